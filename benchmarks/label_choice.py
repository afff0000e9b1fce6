"""Label choice over 77 labels: every (prompt, label) pair scored as a full sequence against the shared prompt.

    python benchmarks/label_choice.py                   # the default base model (models/base), the intents task
    python benchmarks/label_choice.py --full-items 150  # the full-sequence pass on every item too (~1 h at 3 shots)

The task is ``data/raw/make_intents.py``'s: 77 labels, 150 test items (the last 150 rows), shots from the rest.
Both passes run bakeoff's own ``choose_labels`` on the same model (loaded in the serving dtype ``eval.dtype``,
scored in fp32 as ``choose_labels`` does) in the same process, at 0 and at 3 shots (fixed shots, as the ``few_shot``
baseline). The shared-prompt pass scores all 150
items; the full-sequence pass scores the first ``--full-items`` of them (its cost per item does not depend on which
items), and the speed-up is the ratio of seconds per item. Identical choices are counted on the items both scored.
Targets: speed-up ≥ 10, and at both shot counts every choice identical, or a tie within bf16 rounding: where the two
passes pick different labels, both passes score those two labels within ``TIE_NATS`` of each other (each differing
item's margins are recorded). Writes reports/bench/label_choice.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# two summed log-probabilities closer than this are a tie within bf16 rounding: bf16 keeps 8 bits of mantissa, a
# relative step of 2^-8; the summed scores here are -5 to -20 nats, so one rounding step is 0.02-0.08 nats
TIE_NATS = 0.08

from targets import Targets
from targets import add_argument as add_target_argument


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "base"))
    ap.add_argument("--items", type=int, default=150, help="test items scored by the shared-prompt pass")
    ap.add_argument("--full-items", type=int, default=20, help="of those, scored by the full-sequence pass too")
    ap.add_argument("--shots", default="0,3")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "label_choice.json"))
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)

    import sys

    sys.path.insert(0, str(ROOT / "data" / "raw"))
    import make_intents

    from bakeoff.core.config import load_params
    from bakeoff.core.models import load_for_eval, load_tokenizer, resolve_precision
    from bakeoff.data.examples import Example
    from bakeoff.data.prompts import encode, few_shot_messages, render_prompt
    from bakeoff.evaluate.logprobs import choose_labels, label_scores

    params = load_params(ROOT / "params.yaml")
    precision = resolve_precision(params.eval.dtype)
    tok, model = load_tokenizer(args.model), load_for_eval(args.model, None, precision)
    rows = [
        Example([{"role": "user", "content": r["prompt"]}], r["completion"], id=i)
        for i, r in enumerate(make_intents.rows())
    ]
    labels = make_intents.labels()
    test, train = rows[-args.items :], rows[: -args.items]
    results = []
    for shots in [int(s) for s in args.shots.split(",")]:
        prompts = [few_shot_messages(e, train[:shots]) for e in test]
        mean_len = sum(len(encode(tok, render_prompt(tok, p))) for p in prompts) / len(prompts)
        choose_labels(model, tok, prompts[:1], labels[:2])  # warm-up, untimed
        t0 = time.perf_counter()
        s_table = label_scores(model, tok, prompts, labels, desc=f"{shots}-shot shared prompt")
        t_shared = (time.perf_counter() - t0) / len(prompts)
        n = min(args.full_items, len(prompts))
        t0 = time.perf_counter()
        f_table = label_scores(model, tok, prompts[:n], labels, desc=f"{shots}-shot full sequences", shared=False)
        t_full = (time.perf_counter() - t0) / n
        pick = lambda row: max(range(len(labels)), key=lambda j: (row[j], -j))  # choose_labels' rule
        shared, full = [labels[pick(r)] for r in s_table], [labels[pick(r)] for r in f_table]
        same = sum(a == b for a, b in zip(shared, full))
        differing = [
            {
                "item": i,
                "shared_choice": labels[a],
                "full_choice": labels[b],
                "shared_margin": round(s_table[i][a] - s_table[i][b], 4),
                "full_margin": round(f_table[i][b] - f_table[i][a], 4),
            }
            for i in range(n)
            if (a := pick(s_table[i])) != (b := pick(f_table[i]))
        ]
        ties = sum(abs(d["shared_margin"]) <= TIE_NATS and abs(d["full_margin"]) <= TIE_NATS for d in differing)
        acc = sum(c == e.completion for c, e in zip(shared, test)) / len(test)
        results.append(
            {
                "shots": shots,
                "labels": len(labels),
                "items_shared": len(prompts),
                "items_full": n,
                "prompt_tokens_mean": round(mean_len, 1),
                "shared_s_per_item": round(t_shared, 4),
                "full_s_per_item": round(t_full, 4),
                "speedup": round(t_full / t_shared, 2),
                "identical": same,
                "ties_within_rounding": ties,
                "differing": differing,
                "accuracy_shared": round(acc, 4),
                "precision": precision,
            }
        )
        print(
            f"{shots}-shot: full {t_full:.2f} s/item, shared {t_shared:.3f} s/item ({t_full / t_shared:.1f}×), "
            f"{same}/{n} identical, {ties} of the {n - same} others ties within {TIE_NATS} nats",
            flush=True,
        )

    print(f"\n## Label choice, {len(labels)} labels, {args.items} test items ({precision}, this machine)\n")
    print(
        "| shots | prompt tokens | full sequences s/item | shared prompt s/item | speed-up | identical choices "
        f"| others: ties within {TIE_NATS} nats | accuracy |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['shots']} | {r['prompt_tokens_mean']:.0f} | {r['full_s_per_item']:.2f} | "
            f"{r['shared_s_per_item']:.3f} | **{r['speedup']:.1f}×** | {r['identical']}/{r['items_full']} | "
            f"{r['ties_within_rounding']}/{r['items_full'] - r['identical']} | {r['accuracy_shared']:.1%} |"
        )
    print()
    for r in results:
        targets.at_least(f"speedup_{r['shots']}_shot", r["speedup"], 10.0)
        targets.equal(
            f"identical_or_tie_{r['shots']}_shot", r["identical"] + r["ties_within_rounding"], r["items_full"]
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"results": results, "targets": targets.results}, indent=2))
    print(f"wrote {out}")
    targets.exit()


if __name__ == "__main__":
    main()
