"""Stage `evaluate@<variant>`: the baselines' evaluation, on a trained variant; same MLflow run as training.

    python stages/evaluate.py lora

The model is scored as it would be served, in the serving dtype `eval.dtype` (a LoRA adapter merged into the
base; a QLoRA adapter on its 4-bit base, computing in that dtype); latency is measured unmerged too where that
differs. lm-eval scores the same test split from the saved files (`peft=` for an adapter).
"""

import sys

from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.core.supervise import supervise


@cli
def main() -> None:
    supervise("evaluate", sys.argv[1])  # a kill (host OOM) becomes this arm's status; the work runs in a child
    from bakeoff.evaluate.variant import evaluate_variant

    evaluate_variant(load_params(), sys.argv[1])


if __name__ == "__main__":
    main()
