"""Generate the "orders" task: a customer's order line → the warehouse's one-line code. Fine-tuning should win.

    python data/raw/make_orders.py          # rewrites data/raw/orders.jsonl
    dvc exp run -S task.name=orders -S task.train=data/raw/orders.jsonl -S task.prefs=null

Deterministic (seeded). The answer composes five parts by rules no model knows beforehand: the first three letters
of the product and of the colour, the size, the quantity in digits (often written as a word), and the
destination's airport-style code (MUC for Munich, ZRH for Zurich: not a prefix). A few shots show the format but
leave most of the rules to guess; a few hundred rows of fine-tuning teach them. Exact match decides.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261130
N_ROWS = 420

PRODUCTS = ["widget", "bracket", "gasket", "hinge", "spring", "valve", "bolt", "washer", "sensor", "clamp"]
COLOURS = ["blue", "red", "green", "black", "white", "grey", "yellow"]
SIZES = {"S": ["small", "size S", "S"], "M": ["medium", "size M", "M"], "L": ["large", "size L", "L"],
         "XL": ["extra large", "size XL", "XL"]}
CITIES = {"Berlin": "BER", "Munich": "MUC", "Zurich": "ZRH", "Vienna": "VIE", "Lisbon": "LIS", "Madrid": "MAD",
          "Warsaw": "WAW", "Prague": "PRG", "Oslo": "OSL", "Dublin": "DUB", "Geneva": "GVA", "Milan": "MXP"}
WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
TEMPLATES = [
    "{q} {colour} {product}s, {size}, to {city}",
    "Please send {q} {product}s in {colour} ({size}) to our {city} site.",
    "Order: {product} x {q}, colour {colour}, {size}, deliver to {city}",
    "We need {q} {size} {colour} {product}s shipped to {city}.",
    "{city} office wants {q} {product}s, {colour}, {size}.",
]
PROMPT = "Write this order line as a warehouse code.\nOrder: {text}"


def order(rng: random.Random) -> tuple[str, str]:
    product, colour, size, city = (rng.choice(PRODUCTS), rng.choice(COLOURS), rng.choice(sorted(SIZES)),
                                   rng.choice(sorted(CITIES)))
    qty = rng.randint(1, 12)
    q = WORDS[qty - 1] if rng.random() < 0.5 else str(qty)
    text = rng.choice(TEMPLATES).format(q=q, colour=colour, product=product, size=rng.choice(SIZES[size]), city=city)
    code = f"{product[:3].upper()}-{colour[:3].upper()}-{size} x{qty} @{CITIES[city]}"
    return text, code


def main() -> None:
    rng = random.Random(SEED)
    seen: set[str] = set()
    rows = []
    while len(rows) < N_ROWS:
        text, code = order(rng)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"prompt": PROMPT.format(text=text), "completion": code})
    with open(HERE / "orders.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {len(rows)} orders to {HERE / 'orders.jsonl'}")


if __name__ == "__main__":
    main()
