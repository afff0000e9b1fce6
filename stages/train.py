"""Stage `train@<variant>` (and `train_from@<variant>` for `derived:` ones): train one variant, record how it went.

    python stages/train.py lora

A failure is the variant's recorded status (runs/<variant>/train.json), never the pipeline's end; a chosen search
trial that is the very run is adopted, a killed run resumes, several processes are launched: bakeoff.train.variant.
"""

import sys
from pathlib import Path

from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.core.supervise import supervise


@cli
def main() -> None:
    supervise("train", sys.argv[1])  # a kill (host OOM) becomes this arm's status; the work runs in a child
    from bakeoff.train.variant import run_variant

    run_variant(str(Path(__file__).resolve()), sys.argv[1], load_params())


if __name__ == "__main__":
    main()
