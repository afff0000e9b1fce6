"""What `make repro` checks before DVC reads dvc.yaml: params.yaml through bakeoff's own loader (its message names the
line and the closest key, not DVC's), and what dvc.yaml needs from it that it lacks."""

from __future__ import annotations

from pathlib import Path


def load_params_or_none():
    """params.yaml loaded, or None where it does not load (the stages report that, with its line)."""
    try:
        from bakeoff.core.config import load_params

        return load_params()
    except Exception:  # a bad params.yaml is the stages' error to report, with its line
        return None


def params_error(path: Path = Path("params.yaml")) -> str | None:
    """params.yaml checked by the project's own loader before DVC parses dvc.yaml: a typo in a section dvc.yaml reads
    (`varaints:`) gets bakeoff's message with its line and the closest name, not DVC's "Could not find 'variants'"."""
    from bakeoff.core.config import load_params
    from bakeoff.core.errors import UserError
    from bakeoff.core.secrets import scrub

    if not path.exists():
        return None  # DVC says so
    try:
        load_params(path)
    except UserError as e:
        return scrub(str(e))
    return None


def dvc_lacks(path: Path = Path("params.yaml")) -> str | None:
    """What dvc.yaml needs from params.yaml that it lacks (bakeoff.core.config.dvc_needs), before DVC reads it."""
    import yaml

    from bakeoff.core.config import dvc_needs

    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # no file, or not YAML: the stages say so with its line
    return dvc_needs(raw, str(path))
