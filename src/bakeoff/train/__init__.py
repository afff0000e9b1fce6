"""Training a variant: what each technique builds and saves (techniques/; what it accepts is
``core/techniques.py``), the one training loop they share (trainer), attention and loss kernels (kernels), early
stopping (stopping), Unsloth and the CPU TRL patches (backends/), one variant as the train stage runs it (variant).
May import ``core`` and ``data``."""
