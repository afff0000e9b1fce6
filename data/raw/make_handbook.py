"""Generate the "handbook" task: questions about a fictional company's sites, whose answers live only in its documents.

    python data/raw/make_handbook.py        # rewrites data/raw/handbook.jsonl and data/raw/handbook/*.md

Deterministic (seeded), written for bakeoff and shipped under the project's licence. Every fact is drawn at random
(the manager's name, the opening time, the loading bays, ...), so no model has seen it in pre-training: fine-tuning
on some sites' questions cannot teach another site's facts, and retrieval over data/raw/handbook/ (one Markdown page
a site, set as `task.corpus`) can. Each row names the page that answers it (`doc`), so the report gives the
retrieval's recall. The answers are short (a name, a time, a number), scored by exact match.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261207
SITES = [
    "Harrowgate", "Bellmere", "Quillstone", "Dunmarsh", "Ashcombe", "Pellinor", "Wexley", "Cardenfold",
    "Marlowe Point", "Tessick", "Oakhollow", "Brannock", "Fenwick Cross", "Galloway Reach", "Hythecombe",
    "Ivybridge Yard", "Kestrel Bay", "Lindqvist Park", "Morrowfield", "Northam Rise", "Orrin Vale", "Pendle Hook",
    "Redcastle", "Sallowmere",
]  # fmt: skip
KINDS = ["depot", "warehouse", "office", "workshop"]
FIRST = ["Mira", "Tobias", "Anneke", "Ravi", "Solene", "Idris", "Katya", "Bruno", "Leilani", "Osei", "Fenna", "Jonas"]
LAST = ["Okafor", "Lindqvist", "Marchetti", "Brennan", "Tanaka", "Duarte", "Kowalski", "Achterberg", "Ferreira"]
WORDS = ["amber", "falcon", "juniper", "copper", "meadow", "lantern", "harbour", "thistle", "cobalt", "saffron"]
# (fact written in the page, question, answer): {s} the site's name, {k} its kind, {v} the drawn value
FACTS = [
    ("The {s} {k} is managed by {v}.", "Who manages the {s} {k}?", "name"),
    ("The {s} {k} opens at {v} on weekdays.", "What time does the {s} {k} open on weekdays?", "time"),
    ("There are {v} loading bays at the {s} {k}.", "How many loading bays does the {s} {k} have?", "bays"),
    ("Visitors to the {s} {k} park in car park {v}.", "In which car park do visitors to the {s} {k} park?", "park"),
    ("The fire assembly point code word at the {s} {k} is {v}.", "What is the fire assembly code word at {s}?", "word"),
    ("The {s} {k} keeps {v} first-aid kits on site.", "How many first-aid kits does the {s} {k} keep?", "kits"),
]


def value(kind: str, rng: random.Random) -> str:
    return {
        "name": lambda: f"{rng.choice(FIRST)} {rng.choice(LAST)}",
        "time": lambda: f"{rng.randint(5, 9)}:{rng.choice(['00', '15', '30', '45'])}",
        "bays": lambda: str(rng.randint(3, 40)),
        "park": lambda: rng.choice("ABCDEFGH") + str(rng.randint(1, 9)),
        "word": lambda: rng.choice(WORDS),
        "kits": lambda: str(rng.randint(2, 12)),
    }[kind]()


def main() -> None:
    rng = random.Random(SEED)
    pages, rows = HERE / "handbook", []
    pages.mkdir(exist_ok=True)
    for site in SITES:
        kind = rng.choice(KINDS)
        doc = f"{site.lower().replace(' ', '-')}.md"
        facts = [(fact, q, value(v, rng)) for fact, q, v in FACTS]
        text = [f"# The {site} {kind}"] + [fact.format(s=site, k=kind, v=v) for fact, _, v in facts]
        (pages / doc).write_text("\n\n".join(text) + "\n")  # a paragraph a fact
        rows += [{"prompt": q.format(s=site, k=kind), "completion": v, "doc": doc} for _, q, v in facts]
    rng.shuffle(rows)
    with open(HERE / "handbook.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"wrote {len(rows)} questions about {len(SITES)} sites to {HERE / 'handbook.jsonl'} and {pages}/")


if __name__ == "__main__":
    main()
