"""The task metrics: pure functions of (prediction, reference) text, and their registry. No torch.

A metric turns one (prediction, reference) into an item and a list of items into one figure. For most metrics
the item is the example's score in [0, 1] and the figure is their mean; macro-F1 keeps the (predicted, true)
label pair, because it is not a mean over examples. The paired bootstrap (``bakeoff.core.measure``) resamples items,
so it works for both kinds. ``task.metric`` names one of ``METRICS``.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    """Lower case, punctuation removed, whitespace collapsed."""
    return " ".join(text.lower().translate(_PUNCT).split())


def loose_match(prediction: str, reference: str) -> float:
    """1.0 when prediction and reference are equal after ``normalize`` (case, punctuation, spacing ignored)."""
    return float(normalize(prediction) == normalize(reference))


def exact_match(prediction: str, reference: str) -> float:
    """1.0 when the prediction is the reference: for a JSON-object reference, the same object once parsed (key order
    and whitespace ignored, values exact); otherwise equal after ``normalize``. Normalising JSON as text would strip
    its syntax and accept ``category: bug; urgency: high`` for ``{"category": "bug", "urgency": "high"}``."""
    ref = parse_json_object(reference)
    if ref is not None:
        return float(parse_json_object(prediction) == ref)
    return loose_match(prediction, reference)


def parse_json_object(text: str) -> dict | None:
    """The JSON object in ``text`` (a Markdown code fence around it is allowed), or None."""
    t = text.strip()
    if t.startswith("```"):
        t = t.strip("`")
        t = t[t.find("\n") + 1 :] if "\n" in t else t
    try:
        value = json.loads(t)
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def contains_reference(prediction: str, reference: str) -> float:
    """1.0 when the answer holds the reference somewhere, as whole words after ``normalize`` ("The capital of Peru
    is Lima." holds ``Lima``); for a JSON-object reference, when it holds every field's value. Far above exact
    match, it says the model knows the answers and misses the format."""
    ref = parse_json_object(reference)
    wanted = [str(v) for v in ref.values()] if ref else [reference]
    said = f" {normalize(prediction)} "
    return float(all(normalize(w) and f" {normalize(w)} " in said for w in wanted))


def json_valid(prediction: str, reference: str) -> float:
    """1.0 when the prediction is a JSON object."""
    return float(parse_json_object(prediction) is not None)


def json_field_scores(prediction: str, reference: str) -> dict[str, float]:
    """Per reference field: 1.0 when the prediction has that key with an equal value (``normalize``d)."""
    ref = parse_json_object(reference) or {}
    pred = parse_json_object(prediction) or {}
    return {k: float(k in pred and normalize(str(pred[k])) == normalize(str(v))) for k, v in ref.items()}


def json_fields(prediction: str, reference: str) -> float:
    """The share of the reference's fields the prediction gets right (0 when it is not JSON)."""
    per = json_field_scores(prediction, reference)
    return sum(per.values()) / len(per) if per else 0.0


def chrf(prediction: str, reference: str) -> float:
    """Sentence chrF (sacrebleu's defaults: character 6-grams, beta 2), scaled to [0, 1]."""
    import sacrebleu

    return sacrebleu.sentence_chrf(prediction, [reference]).score / 100


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (longest common subsequence of words; rouge-score's tokenizer)."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"]).score(reference, prediction)["rougeL"].fmeasure


OTHER = "(other)"  # a prediction outside the label set


def to_label(prediction: str, labels: list[str]) -> str:
    """The label the prediction names (``normalize``d equality), else ``OTHER``."""
    norm = normalize(prediction)
    for label in labels:
        if normalize(label) == norm:
            return label
    return OTHER


def macro_f1(pairs: list[tuple[str, str]]) -> float:
    """Unweighted mean of per-label F1 over the labels that occur as truth or prediction (``OTHER`` excluded)."""
    labels = sorted({t for _, t in pairs} | {p for p, _ in pairs} - {OTHER})
    f1s = []
    for label in labels:
        tp = sum(p == label and t == label for p, t in pairs)
        fp = sum(p == label and t != label for p, t in pairs)
        fn = sum(p != label and t == label for p, t in pairs)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(f1s) / len(f1s) if f1s else 0.0


def confusion(pairs: list[tuple[str, str]], labels: list[str]) -> dict[str, dict[str, int]]:
    """{true label: {predicted label: count}}, with ``OTHER`` for predictions outside the set."""
    out = {t: {p: 0 for p in [*labels, OTHER]} for t in labels}
    for p, t in pairs:
        row = out.setdefault(t, {q: 0 for q in [*labels, OTHER]})
        row[p] = row.get(p, 0) + 1
    return out


def format_only_miss(prediction: str, reference: str) -> bool:
    """Wrong under exact match only for its format: equal once spaces are dropped too ("Card arrival" for
    ``card_arrival``), or a JSON answer with every field right but not written as the reference is."""
    if exact_match(prediction, reference):
        return False
    if loose_match(prediction, reference) or normalize(prediction).replace(" ", "") == normalize(reference).replace(
        " ", ""
    ):
        return True
    fields_ = json_field_scores(prediction, reference)
    return bool(fields_) and all(fields_.values())


def mean(items: list[float]) -> float:
    return sum(items) / len(items) if items else 0.0


@dataclass(frozen=True)
class Metric:
    item: Callable[[str, str], Any]  # (prediction, reference) → the example's item
    figure: Callable[[list], float] = mean  # items → the run's figure
    needs_labels: bool = False


# the names task.metric may take; every run records all that apply to its task
METRICS: dict[str, Metric] = {
    "exact_match": Metric(exact_match),
    "loose_match": Metric(loose_match),  # exact match of the normalised text, JSON syntax and all
    "contains_reference": Metric(contains_reference),  # the reference inside the answer: knowledge, format aside
    "json_valid": Metric(json_valid),
    "json_fields": Metric(json_fields),
    "chrf": Metric(chrf),
    "rouge_l": Metric(rouge_l),
    "accuracy": Metric(exact_match, needs_labels=True),  # exact match against a closed label set
    "macro_f1": Metric(lambda p, r: (p, r), macro_f1, needs_labels=True),  # items are (predicted, true) labels
}


def metric_items(metric: str, predictions: list[str], references: list[str], labels: list[str] | None = None) -> list:
    """The per-example items of ``metric`` (label pairs for macro-F1)."""
    m = METRICS[metric]
    if metric == "macro_f1":
        return [(to_label(p, labels or []), to_label(r, labels or [])) for p, r in zip(predictions, references)]
    return [m.item(p, r) for p, r in zip(predictions, references)]


def score(
    metric: str, predictions: list[str], references: list[str], labels: list[str] | None = None
) -> tuple[float, list]:
    """The run's figure and the per-example items of one metric."""
    items = metric_items(metric, predictions, references, labels)
    return METRICS[metric].figure(items), items


def all_metrics(predictions: list[str], references: list[str], labels: list[str] | None) -> dict:
    """Every metric that applies: exact match, loose match, contains-reference, chrF and ROUGE-L always; JSON validity
    and per-field accuracy
    when every reference is a JSON object; accuracy, macro-F1 and the confusion matrix over a label set."""
    out: dict[str, Any] = {}
    names = ["exact_match", "loose_match", "contains_reference", "chrf", "rouge_l"]
    is_json = bool(references) and all(parse_json_object(r) is not None for r in references)
    if is_json:
        names += ["json_valid", "json_fields"]
    if labels:
        names += ["accuracy", "macro_f1"]
    for name in names:
        out[name] = round(score(name, predictions, references, labels)[0], 4)
    out["format_misses"] = sum(format_only_miss(p, r) for p, r in zip(predictions, references))
    if is_json:
        fields_: dict[str, list[float]] = {}
        for p, r in zip(predictions, references):
            for k, v in json_field_scores(p, r).items():
                fields_.setdefault(k, []).append(v)
        out.update({f"field_acc.{k}": round(mean(v), 4) for k, v in fields_.items()})
    if labels:
        out["confusion"] = confusion(metric_items("macro_f1", predictions, references, labels), labels)
    return out


def preference_metrics(margins: list[float]) -> dict[str, float]:
    """``pref_accuracy``: share of pairs whose chosen answer is more likely than the rejected one (ties count
    as wrong); ``pref_margin``: mean log-probability margin in nats. A variant's margin minus the base model's
    is DPO's implicit reward margin divided by beta."""
    if not margins:
        return {}
    return {
        "pref_accuracy": round(sum(m > 0 for m in margins) / len(margins), 4),
        "pref_margin": round(sum(margins) / len(margins), 4),
        "n_pref": len(margins),
    }


def by_label_choice(figures, split: str = "test") -> bool:
    """The one label-choice rule: a prompting baseline is judged by its choice among the task's labels where that
    scored better than its free generation on the choosing split (``val`` or ``test``). ``figures``: a run's metrics,
    a record's or a table row's; a figure missing or not a number loses."""
    pre = "val_" if split == "val" else ""
    num = lambda x: float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else float("-inf")
    return num(figures.get(f"{pre}quality_label_choice")) > num(figures.get(f"{pre}quality"))
