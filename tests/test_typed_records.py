"""The typed records between the decision and the report read the committed run's JSON and write it back byte for
byte: every key in its place, an absent key still absent; a key no field names is an error naming it."""

import json
import re
from dataclasses import dataclass

import pytest
from conftest import ROOT

from bakeoff.core.clock_record import ClockRecord
from bakeoff.core.record import Record
from bakeoff.core.records import Provenance
from bakeoff.decide.curve_record import Curve
from bakeoff.decide.metrics_record import MetricsFile
from bakeoff.decide.shipped_record import Shipped
from bakeoff.decide.sizing_record import AllIn, Money, Sizing
from bakeoff.decide.verdict_record import Verdict

REPORTS = ROOT / "reports"


def _same(cls, d: dict) -> None:
    got = cls.from_dict(d)
    assert json.dumps(got.to_dict(), indent=2) == json.dumps(d, indent=2)


def test_the_committed_records_load_and_write_back_unchanged():
    """Every record the committed run wrote, read typed and written back: the same JSON, key for key."""
    curve = json.loads((REPORTS / "curve.json").read_text())
    _same(Curve, curve)
    sized = json.loads((REPORTS / "sizing.json").read_text())
    _same(Sizing, {k: sized[k] for k in ("calibration", "fits", "gpu_check")})
    _same(Verdict, sized["verdict"])
    _same(Money, sized["cost"])
    for c in sized["costs"].values():
        _same(AllIn, c)
    _same(Verdict, json.loads((REPORTS / "metrics.json").read_text())["verdict"])
    _same(Shipped, sized["shipped"])
    _same(Provenance, json.loads((REPORTS / "metrics.json").read_text())["provenance"])
    _same(ClockRecord, json.loads((REPORTS / "clock.json").read_text()))
    _same(MetricsFile, json.loads((REPORTS / "metrics.json").read_text()))
    v = Verdict.from_dict(sized["verdict"])
    assert (
        v.recommendation.choice.considered[0].run
        == sized["verdict"]["recommendation"]["choice"]["considered"][0]["run"]
    )
    assert (
        Curve.from_dict(curve).arms["recommended"].backtest.inside == curve["arms"]["recommended"]["backtest"]["inside"]
    )


@dataclass
class _Tie(Record):
    runs: list[str] | None = None
    at: float | None = None
    rule: str | None = None


def test_a_record_keeps_its_keys_order_and_absence_through_every_change():
    t = _Tie.from_dict({"at": 0.5, "runs": ["a", "b"], "rule": None})
    assert list(t.to_dict()) == ["at", "runs", "rule"] and t.has("rule") and t.rule is None
    assert list(t.with_(at=0.6).to_dict().items()) == [("at", 0.6), ("runs", ["a", "b"]), ("rule", None)]
    assert t.without("runs").to_dict() == {"at": 0.5, "rule": None} and not t.without("runs").has("runs")
    assert list(t.renamed("at", "runs", ["c"]).without("rule").to_dict()) == ["runs"]
    assert list(_Tie.from_dict({"at": 1.0}).inserted_after("at", "rule", "x").to_dict()) == ["at", "rule"]
    assert not _Tie.from_dict({}) and _Tie(at=1.0).to_dict() == {"at": 1.0}  # built in code: the fields set, in order
    with pytest.raises(ValueError, match="_Tie: no field for key\\(s\\) 'score'"):
        _Tie.from_dict({"at": 1.0, "score": 2})


@dataclass
class _Largest(Record):
    OPEN = True
    field: str | None = None
    gap: float | None = None


def test_an_open_record_keeps_the_keys_only_its_data_names_in_their_place():
    """A row keyed by run names (the evidence's largest gap) reads them with rec[name] and writes them back where
    they were; a closed record refuses them."""
    d = {"field": "urgency", "prompt_search": 0.4, "full": 0.9, "gap": 0.5}
    got = _Largest.from_dict(d)
    assert (got.field, got["full"], got["prompt_search"], got["gap"]) == ("urgency", 0.9, 0.4, 0.5)
    assert json.dumps(got.with_(gap=0.6).to_dict()) == json.dumps({**d, "gap": 0.6})
    with pytest.raises(KeyError):
        got["lora"]
    with pytest.raises(ValueError, match="_Tie: no field for key"):
        _Tie.from_dict(d)


# x["k"] and x.get("k") with a string constant: a lookup by string key (a list of one string is not one). src/ held
# 1,687 when the records were typed; read by field, they stay at half that or fewer
STRING_KEY = re.compile(r'(?<=[\w\)\]])\[\s*"[^"\n]*"\s*\]|\.get\(\s*"[^"\n]*"')
MOST_STRING_KEYS = 845


def test_string_key_lookups_stay_at_half_what_they_were():
    found = {p: len(STRING_KEY.findall(p.read_text())) for p in (ROOT / "src").rglob("*.py")}
    total = sum(found.values())
    worst = sorted(found.items(), key=lambda x: -x[1])[:5]
    assert total <= MOST_STRING_KEYS, f"{total} string-key lookups in src/ (most: {worst}): read records by field"
    assert len(STRING_KEY.findall('x["a"] + f(y)["b"] + z.get("c") + ["d"]')) == 3
