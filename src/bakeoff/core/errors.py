"""Errors a user can fix, and the entry-point guard that prints them without a traceback."""

from __future__ import annotations

import functools
import sys


class UserError(ValueError):
    """Bad input (params, data, model path); the message names the file, line or key to change."""


def cli(fn):
    """Run a stage's ``main``: a UserError prints ``error: <message>`` and exits 2, with no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            from bakeoff.core.secrets import scrub

            print(f"error: {scrub(str(e))}", file=sys.stderr)
            sys.exit(2)

    return wrapper
