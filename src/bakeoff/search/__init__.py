"""Choosing each run's settings on the validation split: the search spaces and a trial's variant (space), the Optuna
study in its database (study), a variant's search (trials) and a prompt's (prompt), one arm's search as the tune
stage runs it (arm), and the locks that keep several machines off one draw (locks). May import ``core``, ``data``,
``train`` and ``evaluate``."""
