"""reports/metrics.json as a typed record, for what reads it back (the README's block, the screenshots' stamp): each
run's status and headline figures, the verdict, provenance, the curve's summary, the costs and where the gain comes
from. Read and written back key for key (``bakeoff.core.record.Record``).

    m = MetricsFile.from_dict(json.loads(Path("reports/metrics.json").read_text()))
    m.verdict.decision, m.runs["lora"].quality, m.provenance.git_commit
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.core.record import Record
from bakeoff.core.records import Provenance
from bakeoff.decide.curve_record import CurveSummary
from bakeoff.decide.evidence_record import Where
from bakeoff.decide.sizing_record import AllIn
from bakeoff.decide.verdict_record import Verdict


@dataclass
class RunFigures(Record):
    """One run's status and the figures metrics.json keeps for it (each a number; absent where not measured)."""

    OPEN = True
    status: str | None = None
    quality: float | None = None
    quality_ci_low: float | None = None
    quality_ci_high: float | None = None
    gain: float | None = None
    gain_ci_low: float | None = None
    gain_ci_high: float | None = None
    lm_eval_exact_match: float | None = None
    pref_accuracy: float | None = None
    pref_margin: float | None = None
    val_loss: float | None = None
    train_tokens_per_s: float | None = None
    train_peak_rss_mb: float | None = None
    train_wall_s: float | None = None
    gen_tokens_per_s: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None


@dataclass
class MetricsFile(Record):
    """reports/metrics.json."""

    metric: str | None = None
    runs: dict[str, RunFigures] | None = None
    quick_look: bool | None = None
    provenance: Provenance | None = None
    curve: CurveSummary | None = None
    verdict: Verdict | None = None
    costs: dict[str, AllIn] | None = None
    where: Where | None = None
