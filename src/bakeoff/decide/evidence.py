"""Why before how much: where the gain between the best prompt and the recommended run comes from, what each arm
answered on a few test items, and the exact prompt each prompting baseline sent. Read from the test predictions the
compare stage already reads (``runs/<arm>/predictions.jsonl``) and the prepared splits; no model.

    e = gather(params, df, v, stats)
    e["where"]     # structured answers: accuracy per field per arm, the field with the largest gap named;
                   # labels: the labels the two differ on most, the commonest confusions; free text: quartiles per arm
    e["samples"]   # about five test items chosen by a stated rule, each with its input, reference and every answer
    e["prompts"]   # each prompting baseline's instruction and shots, rendered for one test item
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.core import runs
from bakeoff.decide.verdict_record import Recommendation

if TYPE_CHECKING:
    from bakeoff.core.records import DataStats
    from bakeoff.core.sections import Params
    from bakeoff.decide.verdict_record import Verdict

SAMPLES = 5  # test items shown side by side
RULE = "largest_gaps_then_worst"  # the items the two differ most on, its wins and losses alike, then the worst


def pair(v: Verdict) -> tuple[str | None, str | None]:
    """(best prompt, the run it is set against): the recommended run, or the best fine-tuned one where the
    recommendation is to prompt."""
    rec = v.recommendation or Recommendation()
    run = rec.run if rec.kind == "variant" else v.variant
    return v.baseline, run


def _rows(name: str) -> dict[int, dict]:
    path = runs.predictions(name)
    if not path.exists():
        return {}
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines()) if r}


def gather(params: Params, df: pd.DataFrame, v: Verdict, stats: DataStats) -> dict:
    """Everything the report's evidence sections show, as plain data (also written to reports/metrics.json)."""
    a, b = pair(v)
    ok = [str(n) for n in df.loc[df["status"] == "ok", "name"]]
    preds = {n: rows for n in ok if (rows := _rows(n))}
    out = {"prompt": a, "run": b, "rule": RULE, "prompts": prompts(params)}
    if not a or not b or a not in preds or b not in preds:
        return {**out, "where": None, "samples": []}
    fields = sorted(c[len("field_acc.") :] for c in df.columns if c.startswith("field_acc."))
    labels = stats.labels
    if fields:
        out["where"] = by_field(df, ok, fields, a, b)
    elif labels:
        out["where"] = by_label(preds[a], preds[b], labels, a, b)
    else:
        out["where"] = by_quartile(preds)
    out["samples"] = samples(preds, a, b)
    return out


def guarded(params: Params, df: pd.DataFrame, v: Verdict, stats: DataStats) -> dict:
    """``gather``, or what stopped it (a predictions file the compare stage cannot read): the report says so and is
    written all the same."""
    try:
        return gather(params, df, v, stats)
    except Exception as e:  # the evidence is a view of the runs: its failure must not cost the report
        from bakeoff.core.secrets import scrub

        said = scrub(f"{type(e).__name__}: {e}")
        print(f"[compare] the evidence behind the gain was not gathered: {said}", flush=True)
        return {"error": said}


def by_field(df: pd.DataFrame, ok: list[str], fields: list[str], a: str, b: str) -> dict:
    """Accuracy per field per arm (test split), and the field where ``b`` beats ``a`` by most."""
    rows = df.set_index("name")
    table = {
        n: {f: float(x) for f in fields if (x := rows.loc[n].get(f"field_acc.{f}")) == x and x is not None} for n in ok
    }
    gaps = {f: table[b][f] - table[a][f] for f in fields if f in table.get(a, {}) and f in table.get(b, {})}
    top = max(gaps, key=lambda f: (abs(gaps[f]), f)) if gaps else None
    return {
        "kind": "fields",
        "fields": fields,
        "table": table,
        "gaps": gaps,
        "largest": {"field": top, a: table[a][top], b: table[b][top], "gap": gaps[top]} if top else None,
    }


def by_label(pa: dict, pb: dict, labels: list[str], a: str, b: str, top: int = 5) -> dict:
    """Per true label: how many items each run gets right; the ``top`` labels where they differ most; and each run's
    commonest confusions (true → answered), with counts."""
    from bakeoff.core.scoring import to_label

    right: dict[str, list[int]] = {}
    wrong = {a: Counter(), b: Counter()}
    for i in sorted(set(pa) & set(pb)):
        truth = to_label(pa[i]["reference"], labels)
        cell = right.setdefault(truth, [0, 0, 0])
        cell[2] += 1
        for k, (name, rows) in enumerate(((a, pa), (b, pb))):
            said = to_label(rows[i]["prediction"], labels)
            cell[k] += said == truth
            if said != truth:
                wrong[name][(truth, said)] += 1
    diff = sorted(right, key=lambda t: (-abs(right[t][1] - right[t][0]), t))[:top]
    return {
        "kind": "labels",
        "labels": [{"label": t, "n": right[t][2], a: right[t][0], b: right[t][1]} for t in diff],
        "confusions": {
            n: [
                {"true": t, "answered": s, "count": c}
                for (t, s), c in sorted(w.items(), key=lambda x: (-x[1], x[0]))[:top]
            ]
            for n, w in wrong.items()
        },
    }


def by_quartile(preds: dict[str, dict]) -> dict:
    """The primary metric's per-item score per arm: quartiles (free-text tasks, where a mean hides the spread)."""
    out = {}
    for n, rows in preds.items():
        scores = sorted(float(r["score"]) for r in rows.values() if isinstance(r.get("score"), (int, float)))
        if len(scores) >= 2:
            q1, q2, q3 = statistics.quantiles(scores, n=4, method="inclusive")
            out[n] = {"min": scores[0], "q1": q1, "median": q2, "q3": q3, "max": scores[-1], "n": len(scores)}
    return {"kind": "quartiles", "table": out}


def _score(row: dict) -> float:
    s = row.get("score")
    return float(s) if isinstance(s, (int, float)) else float(row.get("exact_match") or 0)


def samples(preds: dict[str, dict], a: str, b: str, k: int = SAMPLES) -> list[dict]:
    """``k`` test items by ``RULE`` (two of ``b``'s wins over ``a`` and two losses where there are, more of the
    largest gaps, then the item both answer worst; ties by test order), each with its input, reference, ``why``
    (``run_better``: ``b`` scores higher, ``prompt_better``, ``worst``) and every arm's answer and score."""
    ids = sorted(set(preds[a]) & set(preds[b]))
    gap = {i: _score(preds[b][i]) - _score(preds[a][i]) for i in ids}
    wins = sorted((i for i in ids if gap[i] > 0), key=lambda i: (-gap[i], i))
    losses = sorted((i for i in ids if gap[i] < 0), key=lambda i: (gap[i], i))
    chosen = wins[:2] + losses[:2]
    rest = [i for i in wins[2:] + losses[2:]]
    chosen += sorted(rest, key=lambda i: (-abs(gap[i]), i))[: max(0, k - 1 - len(chosen))]
    worst = sorted(
        (i for i in ids if i not in chosen), key=lambda i: (max(_score(preds[a][i]), _score(preds[b][i])), i)
    )[:1]
    out = []
    for i in chosen + worst:
        why = "worst" if i in worst else "run_better" if gap[i] > 0 else "prompt_better"
        first = preds[a][i]
        out.append(
            {
                "id": i,
                "source": first.get("source", ""),
                "why": why,
                "input": first.get("prompt", ""),
                "reference": first.get("reference", ""),
                "answers": {
                    n: {"answer": rows[i].get("prediction", ""), "score": _score(rows[i])}
                    for n, rows in preds.items()
                    if i in rows
                },
            }
        )
    return out


def prompts(params: Params) -> list[dict]:
    """Each prompting baseline's turns for the first test item as its stage recorded sending them (instruction and
    shots included; for ``nearest`` selection, the rule too, since other items get their own shots)."""
    out = []
    for name in params.baselines:
        sent = (runs.read_json(runs.eval_record(name)) or {}).get("prompt_sent")
        out.append({"name": name, **sent} if sent else {"name": name, "error": "unrecorded"})
    return out
