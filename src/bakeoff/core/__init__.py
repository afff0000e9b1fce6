"""What every stage shares: the params schema (config, schema, sections) with every room's settings on this floor
(what each technique accepts: techniques; the search's spaces and a run with its chosen values: spaces; the task
metrics: scoring), errors a user can fix, every run's paths and records (runs), the one definition of each measured
figure (measure), the base model's loading (models) and MLflow (tracking). May import nothing else of bakeoff."""
