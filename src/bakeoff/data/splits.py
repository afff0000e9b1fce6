"""The seeded split of a task's rows into test, val and train, where they are carved out of one file.

parts = split(rows, "auto", 60, seed=0, what="rows of data/raw/tickets.jsonl")   # {"test", "val", "train"}
"""

from __future__ import annotations

import random

from bakeoff.data.examples import DataError

VAL_SHARE, VAL_FLOOR, VAL_CAP = 0.1, 40, 400  # val_size: auto — a tenth of what the test split leaves, 40 to 400 rows


def _count(size: float, n: int) -> int:
    return round(size * n) if size < 1 else int(size)


def auto_val(n_rest: int) -> int:
    """``val_size: auto``: a share of the rows the test split leaves, between a floor and a cap (and never more than
    half of them): more data, a steadier validation loss and search."""
    return min(VAL_CAP, max(VAL_FLOOR, round(VAL_SHARE * n_rest)), n_rest // 2)


def split(items: list, val_size, test_size, seed: int, what: str = "rows") -> dict[str, list]:
    """Seeded shuffle, then test, val and train slices (sizes: a fraction < 1 or a count; val_size also ``auto``;
    None: that split is not carved, it comes from its own file). A carved split must hold a row, and train too: each
    failure names its key and the row count."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    n = len(items)
    n_test = 0 if test_size is None else _count(test_size, n)
    if test_size is not None and not 1 <= n_test < n:
        raise DataError(
            f"task.test_size: {test_size} gives {n_test} test rows of the {n} {what}: it must leave at "
            f"least one row to score and one to train on (a count from 1 to {n - 1}, or a fraction)"
        )
    n_val = 0 if val_size is None else auto_val(n - n_test) if val_size == "auto" else _count(val_size, n)
    if val_size is not None and n_val < 1:
        raise DataError(
            f"task.val_size: {val_size} gives {n_val} validation rows of the {n} {what}: every search, "
            "early stop and winner is judged on validation (a count ≥ 1, a fraction, or auto)"
        )
    if n_test + n_val >= n:
        raise DataError(
            f"task.val_size + task.test_size ({n_val} + {n_test}) leave no training rows out of the {n} {what}"
        )
    pick = [items[i] for i in order]
    return {"test": pick[:n_test], "val": pick[n_test : n_test + n_val], "train": pick[n_test + n_val :]}
