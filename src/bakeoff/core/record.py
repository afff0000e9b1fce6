"""Typed records read from and written back to the JSON the stages write (the verdict, the data-value curve): a
dataclass per object, its fields the keys it may hold. Reading keeps what JSON says and dataclasses do not: which
keys were there and in what order, so a record written back is the same JSON, byte for byte, and a key that was
absent stays absent (an absent field reads as None).

    @dataclass
    class Tie(Record):
        runs: list[str] | None = None
        at: float | None = None
        rule: str | None = None

    t = Tie.from_dict({"at": 0.5, "runs": ["a", "b"]})
    t.at, t.has("runs"), t.to_dict()        # 0.5, True, {"at": 0.5, "runs": ["a", "b"]}
    t.with_(at=0.6)                          # a copy with ``at`` changed in its place
    t.renamed("at", "rule", "first listed")  # a copy with ``rule`` where ``at`` was

A key no field names is an error naming the record and the key: a record's fields are its schema. A record whose
keys include names only the data knows (a run's name as a column) sets ``OPEN``: those keys are kept in their place
and read with ``rec[name]``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache


class Record:
    """A dataclass read from JSON, written back the same (see the module's doc). Subclasses are ``@dataclass``es whose
    fields all have defaults."""

    _keys: tuple[str, ...] = ()  # the JSON keys present, in their order (set per instance by ``from_dict``/``with_``)
    _named: dict | None = None  # an OPEN record's keys no field names (a run's name), by key
    OPEN = False  # keys no field names are kept (``rec[name]``) instead of refused

    @classmethod
    def from_dict(cls, d: dict | None):
        if d is None:
            return None
        if isinstance(d, cls):
            return d
        hints = _hints(cls)
        unknown = [k for k in d if k not in hints]
        if unknown and not cls.OPEN:
            raise ValueError(f"{cls.__name__}: no field for key(s) {', '.join(map(repr, unknown))}")
        obj = cls(**{k: _read(hints[k], x) for k, x in d.items() if k in hints})
        object.__setattr__(obj, "_keys", tuple(d))
        object.__setattr__(obj, "_named", {k: d[k] for k in unknown})
        return obj

    def get(self, name: str, default=None):
        """A key computed at run time (``f"{split}_quality"``), or ``default`` where the record has no such field or
        key: for code that reads a record and a dict alike."""
        try:
            x = self[name]
        except KeyError:
            return default
        return default if x is None and not self.has(name) else x

    def __getitem__(self, name: str):
        """An OPEN record's value under a key only the data names (a run's name); a field's by its name too."""
        if name in (self._named or {}):
            return self._named[name]
        if name in _hints(type(self)):
            return getattr(self, name)
        raise KeyError(name)

    def __bool__(self) -> bool:
        """False for a record that holds no key, as for an empty dict."""
        return bool(self._order())

    def has(self, key: str) -> bool:
        """Whether the record holds ``key`` (a key present with the value None counts)."""
        return key in self._order()

    def to_dict(self) -> dict:
        return {k: _write(self[k]) for k in self._order()}

    def with_(self, **changes):
        """A copy with ``changes``: a key it held keeps its place, a new one comes last."""
        keys, hints = self._order(), _hints(type(self))
        out = dataclasses.replace(self, **{k: _read(hints[k], x) for k, x in changes.items()})
        object.__setattr__(out, "_keys", keys + tuple(k for k in changes if k not in keys))
        object.__setattr__(out, "_named", self._named)
        return out

    def without(self, *keys: str):
        """A copy without ``keys`` (their fields set to None)."""
        out = dataclasses.replace(self, **{k: None for k in keys})
        object.__setattr__(out, "_keys", tuple(k for k in self._order() if k not in keys))
        object.__setattr__(out, "_named", self._named)
        return out

    def renamed(self, old: str, new: str, value):
        """A copy with key ``old`` replaced by ``new`` = ``value`` in the same place."""
        out = dataclasses.replace(self, **{old: None, new: value})
        object.__setattr__(out, "_keys", tuple(new if k == old else k for k in self._order()))
        object.__setattr__(out, "_named", self._named)
        return out

    def inserted_after(self, after: str, key: str, value):
        """A copy with ``key`` = ``value`` right after key ``after`` (last where ``after`` is absent)."""
        keys = [k for k in self._order() if k != key]
        at = keys.index(after) + 1 if after in keys else len(keys)
        out = dataclasses.replace(self, **{key: value})
        object.__setattr__(out, "_keys", tuple(keys[:at] + [key] + keys[at:]))
        object.__setattr__(out, "_named", self._named)
        return out

    def _order(self) -> tuple[str, ...]:
        """The keys present: as read, or, for a record built in code, every field not None in field order."""
        if self._keys:
            return self._keys
        return tuple(f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None)


@cache
def _hints(cls) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: t for k, t in typing.get_type_hints(cls).items() if k in names}


def _record_in(t):
    """The Record class a field's type names (``X``, ``X | None``), else None."""
    if isinstance(t, type) and issubclass(t, Record):
        return t
    found = [a for a in _arms(t) if isinstance(a, type) and issubclass(a, Record)]
    return found[0] if found else None


def _arms(t) -> tuple:
    """A union's arms (``X | None`` → X, None); any other type alone."""
    union = isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union
    return typing.get_args(t) if union else (t,)


def _has_record(t) -> bool:
    """Whether type ``t`` holds a Record anywhere (``X``, ``list[X]``, ``dict[str, list[X]]``, ``X | None``)."""
    return any(
        (isinstance(a, type) and issubclass(a, Record)) or any(_has_record(g) for g in typing.get_args(a))
        for a in _arms(t)
    )


def _read(t, x):
    """``x`` as type ``t`` holds it: a Record for a Record type, lists and dicts of them where ``t`` says so."""
    if x is None:
        return x
    rec = _record_in(t)
    if rec and isinstance(x, dict):
        return rec.from_dict(x)
    for arm in _arms(t):
        origin, args = typing.get_origin(arm), typing.get_args(arm)
        if origin is list and args and _has_record(args[0]) and isinstance(x, list):
            return [_read(args[0], y) for y in x]
        if origin is dict and len(args) == 2 and _has_record(args[1]) and isinstance(x, dict):
            return {k: _read(args[1], y) for k, y in x.items()}
    return x


def _write(x):
    if isinstance(x, Record):
        return x.to_dict()
    if isinstance(x, list):
        return [_write(y) for y in x]
    if isinstance(x, dict):
        return {k: _write(y) for k, y in x.items()}
    return x
