"""Generate the default task: support tickets → a one-line JSON triage record.

    python data/raw/make_tickets.py          # rewrites data/raw/tickets.jsonl and prefs.jsonl

Deterministic (seeded): the committed files are exactly what this script writes.
The task is chosen so that a small instruct model cannot guess the label vocabulary zero-shot,
few-shot prompting teaches the format but not every mapping, and a short LoRA run learns it.
Some tickets carry mixed cues (a billing complaint that mentions a crash), so no variant gets
a free 100%.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261129
N_TICKETS = 520
N_PREFS = 260

# product name as the label → the ways customers refer to it
PRODUCTS = {
    "cloudsync": ["CloudSync", "CloudSync desktop client", "cloud sync", "CloudSync on my laptop"],
    "photovault": ["PhotoVault", "photo vault app", "PhotoVault Pro", "my PhotoVault library"],
    "mailpilot": ["MailPilot", "MailPilot add-in", "mail pilot", "MailPilot for Outlook"],
    "notestack": ["NoteStack", "NoteStack editor", "note stack", "NoteStack mobile"],
    "payflow": ["PayFlow", "PayFlow dashboard", "pay flow", "PayFlow invoicing"],
    "taskhive": ["TaskHive", "TaskHive board", "task hive", "TaskHive for teams"],
}

# category → problem statements ({p} is the product mention)
CATEGORIES = {
    "billing": [
        "I was charged twice this month for {p}.",
        "The invoice for {p} shows the wrong VAT number.",
        "My card was billed for {p} after I downgraded to the free plan.",
        "Why did the price of {p} go up without notice?",
        "{p} charged me in dollars instead of euros.",
    ],
    "bug": [
        "{p} crashes every time I open the settings page.",
        "After the last update {p} shows a blank screen.",
        "Syncing in {p} stops at 99% and never finishes.",
        "{p} throws error 0x80042 when I export.",
        "Buttons in {p} do nothing when I click them.",
    ],
    "account": [
        "I can't log in to {p}, the password reset email never arrives.",
        "Please change the email address on my {p} account.",
        "Two-factor codes for {p} are always rejected.",
        "How do I add a second admin to {p}?",
        "My {p} account got locked after one wrong password.",
    ],
    "refund": [
        "I want my money back for {p}, it doesn't do what was advertised.",
        "Please refund the annual {p} plan I bought by mistake.",
        "I cancelled {p} within the trial but still paid, refund please.",
        "Requesting a refund for the {p} add-on I never used.",
    ],
    "feature_request": [
        "It would be great if {p} had a dark mode.",
        "Could {p} support exporting to CSV?",
        "Please add keyboard shortcuts to {p}.",
        "Any plans for {p} to integrate with Slack?",
        "I'd love to see offline mode in {p}.",
    ],
    "how_to": [
        "How do I share a folder in {p} with my team?",
        "Where do I find the import option in {p}?",
        "What's the best way to back up {p} data?",
        "Is there a guide for setting up {p} on a new phone?",
    ],
}

# urgency → cues appended to the ticket
URGENCY = {
    "low": ["No rush.", "Whenever you get a chance.", "Just curious.", "Not urgent at all.", ""],
    "medium": ["Would appreciate a reply this week.", "It's getting annoying.", "Please look into it.",
               "This affects a few of us."],
    "high": ["I need this fixed today.", "This is blocking my work.", "Our whole team is affected.",
             "Please respond as soon as possible!"],
    "critical": ["Production is down for all our customers!", "We are losing money every minute.",
                 "URGENT: our payroll run fails because of this.", "Security issue, data may be exposed!"],
}

OPENERS = ["", "Hi,", "Hello support,", "Hey team,", "Good morning,", "Dear support,"]
CLOSERS = ["", "Thanks.", "Regards, Sam", "Cheers", "Thank you!", "- Priya"]

# distractors: a second, misleading cue that a careless reader would take as the label
DISTRACTORS = {
    "billing": "I also noticed a small glitch in the menu but that's not why I'm writing.",
    "bug": "Billing is fine, by the way, this is purely technical.",
    "account": "It's not a bug in the app itself, I think.",
    "refund": "I'm not asking for a discount, I want the payment reversed.",
    "feature_request": "Nothing is broken, it's just a suggestion.",
    "how_to": "I don't think it's a bug, I just can't find it.",
}


def ticket(rng: random.Random) -> tuple[str, dict]:
    category = rng.choice(sorted(CATEGORIES))
    product = rng.choice(sorted(PRODUCTS))
    urgency = rng.choice(sorted(URGENCY))
    body = rng.choice(CATEGORIES[category]).format(p=rng.choice(PRODUCTS[product]))
    parts = [rng.choice(OPENERS), body]
    if rng.random() < 0.3:
        parts.append(DISTRACTORS[category])
    parts += [rng.choice(URGENCY[urgency]), rng.choice(CLOSERS)]
    text = " ".join(p for p in parts if p)
    return text, {"category": category, "product": product, "urgency": urgency}


PROMPT = ("Triage this support ticket. Reply with one line of JSON with the keys category "
          "(billing, bug, account, refund, feature_request or how_to), product and urgency "
          "(low, medium, high or critical).\nTicket: {text}")


def answer(label: dict) -> str:
    return json.dumps(label, separators=(", ", ": "))


def wrong(label: dict, rng: random.Random) -> dict:
    """A plausible wrong answer: one field changed."""
    bad = dict(label)
    field = rng.choice(["category", "product", "urgency"])
    pool = {"category": CATEGORIES, "product": PRODUCTS, "urgency": URGENCY}[field]
    bad[field] = rng.choice([v for v in sorted(pool) if v != label[field]])
    return bad


def main() -> None:
    rng = random.Random(SEED)
    seen: set[str] = set()
    rows = []
    while len(rows) < N_TICKETS:
        text, label = ticket(rng)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"prompt": PROMPT.format(text=text), "completion": answer(label)})
    with open(HERE / "tickets.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")

    prefs = []
    while len(prefs) < N_PREFS:
        text, label = ticket(rng)
        if text in seen:
            continue
        seen.add(text)
        prefs.append({"prompt": PROMPT.format(text=text), "chosen": answer(label),
                      "rejected": answer(wrong(label, rng))})
    with open(HERE / "prefs.jsonl", "w") as f:
        for r in prefs:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {len(rows)} tickets and {len(prefs)} preference pairs to {HERE}")


if __name__ == "__main__":
    main()
