"""Generate the "intents" task: a banking customer's message → one of 77 intent labels (11 products × 7 requests).

    python data/raw/make_intents.py        # rewrites data/raw/intents.jsonl and data/raw/intents_labels.txt
    dvc exp run -S task.name=intents -S task.train=data/raw/intents.jsonl -S task.prefs=null \\
        -S task.metric=accuracy -S task.labels=data/raw/intents_labels.txt -S task.test_size=150

Deterministic; written by this project (no outside text), under the project's licence. A label is
``<product>_<request>`` (``card_cancel``, ``transfer_fee``, ...): a closed set of 77, more than the 50 below which
bakeoff takes the distinct answers as labels by itself, so the params name the file. Each message is one of
several phrasings of the request, with the product named by one of several synonyms, politeness and context
added at random: the label follows from the words, but not from one keyword, and the label strings are not
words a model would write unprompted. Used by ``benchmarks/label_choice.py`` (label choice over 77 labels) and the
77-label repro of the README.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261130
ROWS = 770                                       # 10 per label: 150 test, 40 val, the rest to train

PRODUCTS = {
    "card": ["my card", "my debit card", "the bank card"],
    "transfer": ["a transfer", "my bank transfer", "the payment I sent"],
    "refund": ["a refund", "my refund", "the money back from a merchant"],
    "account": ["my account", "the current account", "my bank account"],
    "pin": ["my PIN", "the PIN code", "my card PIN"],
    "top_up": ["a top-up", "topping up my balance", "the top up"],
    "exchange": ["a currency exchange", "exchanging euros to dollars", "the foreign exchange"],
    "cash_withdrawal": ["a cash withdrawal", "taking cash out at an ATM", "the ATM withdrawal"],
    "direct_debit": ["a direct debit", "the standing order", "my direct debit"],
    "statement": ["my statement", "the monthly statement", "an account statement"],
    "loan": ["my loan", "the personal loan", "a loan"],
}
REQUESTS = {
    "status": ["What is the status of {p}?", "Can you tell me where {p} stands right now?",
               "I am still waiting on {p}, any update?", "Has anything happened with {p} yet?"],
    "cancel": ["I want to cancel {p}.", "Please stop {p}, I no longer need it.",
               "How do I cancel {p}?", "Cancel {p} for me, please."],
    "fee": ["How much do you charge for {p}?", "Is there a fee for {p}?",
            "Why was I charged a fee for {p}?", "What does {p} cost me?"],
    "failed": ["{P} failed and I don't know why.", "Something went wrong with {p}, it did not go through.",
               "Why was {p} declined?", "{P} keeps failing with an error."],
    "limit": ["What is the limit on {p}?", "Can I raise the maximum for {p}?",
              "Is there a cap on how much I can do with {p}?", "I hit a limit with {p}, can it go higher?"],
    "change": ["I need to change the details of {p}.", "How can I update {p}?",
               "Can I modify {p} after setting it up?", "I'd like to edit {p}."],
    "request": ["How do I get {p}?", "I would like to set up {p}.", "Can I apply for {p}?",
                "I want to request {p}, where do I start?"],
}
OPENERS = ["", "", "Hi, ", "Hello. ", "Good morning, ", "Quick question: ", "Sorry to bother you, "]
CLOSERS = ["", "", " Thanks.", " Thank you!", " It's urgent.", " I've been a customer for years."]


def labels() -> list[str]:
    return [f"{p}_{r}" for p in PRODUCTS for r in REQUESTS]


def message(rng: random.Random, product: str, request: str) -> str:
    phrase = rng.choice(PRODUCTS[product])
    text = rng.choice(REQUESTS[request]).format(p=phrase, P=phrase[0].upper() + phrase[1:])
    opener = rng.choice(OPENERS)
    if opener:
        keep = opener.endswith(". ") or text.startswith(("I ", "I'", "PIN"))
        text = opener + (text if keep else text[0].lower() + text[1:])
    return text + rng.choice(CLOSERS)


def rows() -> list[dict]:
    rng = random.Random(SEED)
    out, seen = [], set()
    pairs = [(p, r) for p in PRODUCTS for r in REQUESTS]
    while len(out) < ROWS:
        product, request = pairs[len(out) % len(pairs)]
        label = f"{product}_{request}"
        text = message(rng, product, request)
        if text in seen:
            continue
        seen.add(text)
        out.append({"prompt": f"Which intent does this banking message express?\n\n{text}", "completion": label})
    rng.shuffle(out)
    return out


def main() -> None:
    data = rows()
    with open(HERE / "intents.jsonl", "w") as f:
        for r in data:
            f.write(json.dumps(r) + "\n")
    (HERE / "intents_labels.txt").write_text("\n".join(labels()) + "\n")
    print(f"wrote {len(data)} rows, {len(labels())} labels to {HERE}")


if __name__ == "__main__":
    main()
