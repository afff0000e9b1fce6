"""Backends that run a technique through another engine (Unsloth) or patch one for this platform (TRL on CPU)."""
