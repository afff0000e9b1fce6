"""CLINC150 (Larson et al., EMNLP 2019: "An Evaluation Dataset for Intent Classification and Out-of-Scope
Prediction"; github.com/clinc/oos-eval, CC BY 3.0, LICENSE beside this file), sampled to a CPU-sized task: all 150
in-scope intents, 8 training queries each from its train split (1,200 rows) and 1 test query each from its test
split (150 rows), seeded. Out-of-scope queries are left out. The text is the dataset's own, unchanged.

    python data/raw/clinc150/make_clinc150.py PATH/TO/oos-eval/data/data_full.json
    # params: task: {name: clinc150, train: data/raw/clinc150/train.csv, test: data/raw/clinc150/test.csv,
    #                columns: {prompt: text, completion: intent}, labels: auto, metric: accuracy,
    #                max_new_tokens: auto, prefs: null}

Made from oos-eval commit 828f8093932c8fe6ca7936c3d2e52903b1c523de.
"""

import csv
import json
import random
import sys
from pathlib import Path

TRAIN_PER_INTENT, TEST_PER_INTENT, SEED = 8, 1, 0


def sample(rows: list, per_intent: int, rng: random.Random) -> list:
    by = {}
    for text, intent in rows:
        by.setdefault(intent, []).append(text)
    out = [(t, intent) for intent in sorted(by) for t in rng.sample(by[intent], per_intent)]
    rng.shuffle(out)
    return out


def main() -> None:
    full = json.loads(Path(sys.argv[1]).read_text())
    here = Path(__file__).parent
    rng = random.Random(SEED)
    for name, rows, k in (("train", full["train"], TRAIN_PER_INTENT), ("test", full["test"], TEST_PER_INTENT)):
        with open(here / f"{name}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["text", "intent"])
            w.writerows(sample(rows, k, rng))
    print(f"wrote {here}/train.csv and test.csv")


if __name__ == "__main__":
    main()
