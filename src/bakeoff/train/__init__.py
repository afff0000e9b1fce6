"""Training a variant: what each technique accepts (options) and builds and saves (techniques/), the one training
loop they share (trainer), attention and loss kernels (kernels), early stopping (stopping), Unsloth and the CPU
TRL patches (backends/), one variant as the train stage runs it (variant). May import ``core`` and ``data``, and
``search/space.py`` (a run with its search's choice; no torch)."""
