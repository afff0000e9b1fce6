"""Running the pipeline: ``make repro`` with a clock (clock), ``make quick``'s small budget (quick), and one
machine's share of a bake-off on several (worker). No stage imports it; it may import every room."""
