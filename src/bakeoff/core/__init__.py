"""What every stage shares: the params schema (config, schema), errors a user can fix, every run's paths and
records (runs), the one definition of each measured figure (measure), the base model's loading (models) and MLflow
(tracking). May import nothing else of bakeoff, except that the params schema reads each room's own settings:
``train/options.py``, ``search/space.py`` and ``evaluate/scoring.py`` (all torch-free)."""
