"""The report's serving sections: endpoint baselines (what answered, how it was priced, how labels were chosen) and
"Shipped" (what the export stage wrote for the winner, and whether it still answers alike)."""

from __future__ import annotations

from bakeoff.decide.run_record import rows_of
from bakeoff.decide.shipped_record import Agreement, InFramework, ServingRow, Shipped, ShippedVariant
from bakeoff.decide.verdict_record import Scope


def _pct(x) -> str:
    return f"{x:.1%}" if isinstance(x, (int, float)) else "–"


def _check(name: str, a: Agreement) -> str:
    lo, hi = a.evaluated_ci
    flag = (
        "inside"
        if a.inside_ci
        else "**outside: a drop to look at before shipping**"
        if a.quality < lo
        else "**outside (above)**"
    )
    return (
        f"| {name} | {a.identical}/{a.n} ({a.identical_share:.1%}) | {_pct(a.quality)} | "
        f"{_pct(a.evaluated_quality)} [{_pct(lo)}, {_pct(hi)}] | {flag} | "
        f"{a.better_items}/{a.worse_items}, "
        f"p {a.mcnemar_p:.2f} |"
    )


def shipped_lines(shipped: Shipped | None, scope: Scope | None = None) -> list[str]:
    """The report's "Shipped" section: per variant, its files, the agreement checks, the serving figures."""
    if not shipped:
        return []
    out = ["## Shipped: the winner exported, served and re-scored", ""]
    if (shipped.status or "ok") != "ok":
        return out + [
            (
                f"The export did not run ({shipped.status}: {shipped.error.splitlines()[0]}); the "
                "results above stand without it."
            ),
            "",
        ]
    if not shipped.variants:
        return out + [f"Nothing exported: {shipped.note if shipped.has('note') else 'no variant was chosen'}.", ""]
    n = (scope or Scope()).n
    for name, s in shipped.variants.items():
        if s.status != "ok":
            out += [f"`{name}` was not exported ({s.status}: {s.reason or s.error or ''}).", ""]
            continue
        out += _agreement_lines(name, s, shipped, n) + _serving_lines(s)
    return out


def _agreement_lines(name: str, s: ShippedVariant, shipped: Shipped, n: int | None) -> list[str]:
    """The variant's files, then each artifact's answers against the evaluated model's."""
    out = [
        f"`{name}` ({shipped.chosen_by or ''}) is in `exports/{name}/`: "
        + ", ".join(
            f"{k} `{v}`" + (f" ({s.sizes_mb[k]:.0f} MB)" if s.sizes_mb.get(k, 0) >= 1 else "")
            for k, v in s.files.items()
        )
        + (
            f", and `SERVE.md` with the commands for vLLM, llama.cpp and Ollama. GGUF {s.gguf_type}, its "
            f"tokenizer {s.gguf_tokenizer or ''}."
            if s.gguf_type
            else ", and `SERVE.md` with the commands for vLLM. No GGUF (`export.gguf: null`)."
        ),
        "",
        f"Measured on {shipped.machine or 'this machine'}, on the test split"
        + (f" ({n} items)" if n else "")
        + f": each artifact's answers against the answers `{name}` gave "
        "when it was evaluated in-framework (serving dtype "
        f"{s.serving_dtype}). McNemar's exact test on the items only one of them gets right "
        "(right here / right in-framework).",
        "",
        (
            "| artifact | identical answers | its quality | evaluated quality [95% interval] | against the "
            "interval | items better/worse, McNemar |"
        ),
        "|---|---|---|---|---|---|",
    ]
    if s.merged:
        out.append(_check("merged bf16 safetensors, re-scored in-framework", s.merged))
    if s.served:
        out.append(_check(f"GGUF {s.gguf_type} served by {s.served.engine}, through the endpoint path", s.served))
    return out + [""]


def _serving_lines(s: ShippedVariant) -> list[str]:
    """Latency and throughput through llama.cpp's server, with the in-framework figures beside them."""
    rows = (s.serving.rows if s.serving else None) or []
    if not rows:
        return []
    inf = s.in_framework or InFramework()
    out = [
        (
            f"Serving figures, measured through {s.serving.engine} ({s.served.threads} threads) "
            "on this machine, nothing cached:"
        ),
        "",
        "| engine | requests in flight | latency p50 | latency p95 | generated tokens/s |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| llama.cpp, GGUF {s.gguf_type} | {r.concurrency} | {r.latency_p50_s:.3f} s | "
            f"{r.latency_p95_s:.3f} s | {r.tokens_per_s:.1f} |"
        )
    apart = (
        [
            (
                f"In-framework (transformers, {inf.serving_dtype}) at batch 1 the evaluation stage timed p50 "
                f"{inf.latency_p50_s:.3f} s, in another process at another time: not interleaved with the figures "
                "above, so not compared with them."
            ),
            "",
        ]
        if inf.latency_p50_s is not None
        else []
    )
    return out + ["", throughput_words(rows) + " A batching engine (vLLM) was not measured here.", "", *apart]


def throughput_words(rows: list[ServingRow], band: float = 0.10) -> str:
    """What the served figures show as more requests are in flight: throughput within ``band`` of batch 1's
    (requests queue), or falling or rising by how much, said from the figures, not assumed."""
    one, many = rows[0], rows[-1]
    if len(rows) < 2 or not one.tokens_per_s:
        return ""
    a, b = one.tokens_per_s, many.tokens_per_s
    change = (b - a) / a
    if abs(change) <= band:
        what = f"throughput stays within {band:.0%} ({a:.1f} → {b:.1f} generated tokens/s): requests queue"
    else:
        what = (
            f"throughput {'falls' if change < 0 else 'rises'} {abs(change):.0%}, from {a:.1f} to {b:.1f} "
            "generated tokens/s"
        )
    return (
        f"With {many.concurrency} requests in flight against 1, latency p50 goes from {one.latency_p50_s:.2f} "
        f"to {many.latency_p50_s:.2f} s and {what}."
    )


def endpoint_lines(df) -> list[str]:
    """One row per endpoint baseline: its model, failures, measured tokens and price, and its label-choice path."""
    if "engine" not in df.columns or not df["engine"].notna().any():
        return []
    out = [
        "## Endpoint baselines",
        "",
        (
            "Prompting arms answered by an OpenAI-compatible server, on the same items, prompts and statistics as the "
            "local ones. Token counts are the server's own; the price is the one in params.yaml."
        ),
        "",
        (
            "| baseline | model | failed items | prompt / completion tokens per request | $ per 1,000 requests | "
            "label choice |"
        ),
        "|---|---|---|---|---|---|",
    ]

    def count(x) -> str:
        return f"{int(x)}" if isinstance(x, (int, float)) and x == x else "–"

    for r in rows_of(df[df["engine"].notna()]):
        model = str(r.engine).removeprefix("endpoint: ")
        if r.status != "ok":  # it never answered (a dead URL, a refused key): nothing was sent
            why = f"{r.status}: {r.error if r.has('error') else ''}"
            out.append(f"| `{r.name}` | {model} | not run ({why}) | – | – | – |")
            continue
        usd = r.usd_per_request
        price = f"${usd * 1000:.4f}" if isinstance(usd, float) and usd == usd else "no price set"
        out.append(
            f"| `{r.name}` | {model} | {count(r.n_failed_items)} of {count(r.n_test)} | "
            f"{r.prompt_tokens_per_request} / {r.completion_tokens_per_request} | {price} | "
            f"{r.label_choice_via or '–'} |"
        )
    return out + [""]
