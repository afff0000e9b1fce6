"""What the export stage shipped (reports/shipped.json, ``bakeoff.ship.winner``) as typed records: each variant's
files, how its merged and served artifacts answer against the evaluated model, the serving figures, and the
variants' latencies timed interleaved in one process. Read and written back key for key
(``bakeoff.core.record.Record``): a field that is None was absent.

    s = Shipped.from_dict(runs.read_json(Path("reports/shipped.json")))
    s.variants["lora"].merged.identical_share, s.variants["lora"].serving.rows[0].latency_p50_s
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.core.record import Record


@dataclass
class Agreement(Record):
    """An artifact's answers against the evaluated model's on the test split (``served``: through llama.cpp's
    server, with its engine and threads)."""

    engine: str | None = None
    threads: int | None = None
    failed_items: int | None = None
    n: int | None = None
    identical: int | None = None
    identical_share: float | None = None
    quality: float | None = None
    evaluated_quality: float | None = None
    evaluated_ci: list[float] | None = None
    inside_ci: bool | None = None
    mcnemar_p: float | None = None
    better_items: int | None = None
    worse_items: int | None = None


@dataclass
class ServingRow(Record):
    """Latency and throughput through the server at one concurrency."""

    concurrency: int | None = None
    requests: int | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    tokens_per_s: float | None = None
    requests_per_s: float | None = None
    failed: int | None = None


@dataclass
class Serving(Record):
    """The served GGUF's figures."""

    engine: str | None = None
    gguf_type: str | None = None
    rows: list[ServingRow] | None = None


@dataclass
class InFramework(Record):
    """The evaluation stage's own figures for the variant, beside the served ones."""

    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_tokens_per_s: float | None = None
    gen_tokens_per_s: float | None = None
    serving_dtype: str | None = None


@dataclass
class ShippedVariant(Record):
    """One variant shipped (``status`` ok), skipped (``reason``) or failed (``error``)."""

    status: str | None = None
    reason: str | None = None
    error: str | None = None
    metrics: dict | None = None
    files: dict[str, str] | None = None
    sizes_mb: dict[str, float] | None = None
    gguf_type: str | None = None
    serving_dtype: str | None = None
    gguf_tokenizer: str | None = None
    merged: Agreement | None = None
    served: Agreement | None = None
    serving: Serving | None = None
    in_framework: InFramework | None = None
    wall_s: dict[str, float] | None = None


@dataclass
class Shipped(Record):
    """The export stage's record: what chose the variants, the machine, each variant, and the latencies timed
    interleaved (``latency_interleaved``); ``status`` and ``error`` where the export itself failed."""

    chosen_by: str | None = None
    machine: str | None = None
    variants: dict[str, ShippedVariant] | None = None
    note: str | None = None
    latency_interleaved: dict | None = None
    status: str | None = None
    error: str | None = None
