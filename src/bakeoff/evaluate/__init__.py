"""Scoring a run the same way for all (the task metrics themselves are ``core/scoring.py``): generation and latency
in-framework (generation, local) or through an OpenAI-compatible server (endpoint), log-probabilities for validation
loss, preference pairs and label choice (logprobs), lm-evaluation-harness (lmeval), and one variant's or baseline's
evaluation as its stage runs it (variant, baseline). May import ``core``, ``data`` and ``train``."""
