"""The targets a benchmark checks: each printed beside its figure, and a missed one makes the benchmark exit 1 so
that `make bench` stops on it.

    targets = Targets.from_args(args.target)          # --target name=value overrides a default (e.g. to see a miss)
    targets.at_least("speedup", 4.93, 3.0)
    targets.at_most("noop_s", 1.1, 15.0)
    targets.exit()                                     # exit 1 when any target was missed
"""

from __future__ import annotations

import sys


class Targets:
    def __init__(self, overrides: dict[str, float] | None = None):
        self.overrides = overrides or {}
        self.results: list[dict] = []

    @classmethod
    def from_args(cls, pairs: list[str] | None) -> Targets:
        out = {}
        for p in pairs or []:
            name, _, value = p.partition("=")
            if not value:
                sys.exit(f"error: --target takes name=value, got {p!r}")
            out[name] = float(value)
        return cls(out)

    def _check(self, name: str, value: float, target: float, ok, sign: str) -> bool:
        target = self.overrides.get(name, target)
        met = bool(ok(value, target))
        self.results.append({"name": name, "value": value, "target": f"{sign} {target:g}", "met": met})
        print(f"target {name}: {value:g} {sign} {target:g}: {'met' if met else 'MISSED'}", flush=True)
        return met

    def at_least(self, name: str, value: float, target: float) -> bool:
        return self._check(name, value, target, lambda v, t: v >= t, "≥")

    def at_most(self, name: str, value: float, target: float) -> bool:
        return self._check(name, value, target, lambda v, t: v <= t, "≤")

    def equal(self, name: str, value, target) -> bool:
        met = value == target
        self.results.append({"name": name, "value": value, "target": target, "met": met})
        print(f"target {name}: {value} == {target}: {'met' if met else 'MISSED'}", flush=True)
        return met

    @property
    def missed(self) -> list[str]:
        return [r["name"] for r in self.results if not r["met"]]

    def exit(self) -> None:
        if self.missed:
            print(f"MISSED: {', '.join(self.missed)}", file=sys.stderr, flush=True)
            sys.exit(1)


def add_argument(ap) -> None:
    ap.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replace a target (e.g. --target speedup=1000 to see the benchmark fail)",
    )
