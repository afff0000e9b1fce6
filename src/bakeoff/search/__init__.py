"""Choosing each run's settings on the validation split (the settings and spaces themselves are ``core/spaces.py``):
a trial's run, its rungs, its budget and its study's name (space), the Optuna study in its database (study), a
variant's search (trials) and a prompt's (prompt), one arm's search as the tune stage runs it (arm), and the locks
that keep several machines off one draw (locks); and, beside the search's short runs, the data-value curve's
longer ones: one point, the arm trained or prompted again on a share of train and scored on test (curve_point).
May import ``core``, ``data``, ``train`` and ``evaluate``."""
