"""The task's rows: reading every supported format and splitting (examples), the data stage's checks (prepare), and
the prompts every run sees, shots included (prompts). May import ``core``."""
