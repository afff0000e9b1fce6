"""Nested, label-stratified shares of the training split: the rows a data-value curve's point trains on.

    rows = nested_subset(train, 0.25, seed=0, labels=["billing", "shipping", ...])

Every row gets a seeded rank within its stratum (its label; one stratum when the task has no closed label set), from
a hash of the seed and the row's text, never from its position (the order of a list in memory, or rows added
elsewhere, leave it where it was). A share takes the first
``round(share × n)`` rows of each stratum (at least one, so every label is seen), so a smaller share is always inside
a larger one, and the same share is the same rows on every rerun and every machine.
"""

from __future__ import annotations

import hashlib


def row_key(item) -> str:
    """A row's identity: its text (prompt and answer), so that a row keeps its rank when others are added."""
    if hasattr(item, "messages"):
        answer = getattr(item, "completion", None)
        answer = answer if answer is not None else f"{getattr(item, 'chosen', '')}\x00{getattr(item, 'rejected', '')}"
        return repr(item.messages) + "\x00" + str(answer)
    return repr(item)


def _rank(seed: int, item) -> str:
    return hashlib.sha256(f"{seed}\x00{row_key(item)}".encode()).hexdigest()


def stratum(item, labels: list[str] | None) -> str:
    """The stratum a row is drawn in: its answer when the task has a closed label set, else one for all."""
    answer = getattr(item, "completion", None)
    return answer.strip() if labels and isinstance(answer, str) and answer.strip() in labels else ""


def nested_subset(items: list, share: float, seed: int = 0, labels: list[str] | None = None) -> list:
    """The rows of ``items`` a ``share`` in (0, 1] keeps: nested in every larger share, label-stratified, in the
    order of ``items``."""
    if not 0 < share <= 1:
        raise ValueError(f"a share of the training split is in (0, 1]; got {share}")
    if share == 1:
        return list(items)
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(stratum(item, labels), []).append(i)
    keep: set[int] = set()
    for idx in groups.values():
        ranked = sorted(idx, key=lambda i: _rank(seed, items[i]))
        keep.update(ranked[: max(1, round(share * len(ranked)))])
    return [item for i, item in enumerate(items) if i in keep]
