"""Stage `tune@<variant>` (`tune_from@` for `derived:` ones, `tune_prompt@<baseline>` for the prompting arm):
search the run's values on the validation split, write runs/<name>/tuned.json, which `train@<variant>` (or
`baseline@<baseline>`) reads.

    python stages/tune.py lora
    python stages/tune.py searched     # a baseline with `search: {shots: [...], selection: [...], ...}`

With `tune.trials: 0` it writes an empty choice (the variant trains as params.yaml says) without loading torch. A
variant named in `tune.share` works on the study of the variant it names (one search for variants that differ
only in memory levers): DVC runs that one first, so this stage finds the study complete and reads its choice.
Every trial is an MLflow child run of the `<variant>.tune` run. A trial that runs out of memory (or past
`memory_budget_gb`), is unsupported or crashes is recorded with its status, peak and tokens, and the study goes on; a
search that cannot run at all leaves the values params.yaml writes (the stage still exits 0).
"""

import sys

from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.core.supervise import supervise


@cli
def main() -> None:
    params = load_params()
    # a trial that kills the process (host OOM): the study resumes in a new one, a second loss counts as failed
    supervise("tune", sys.argv[1], tries=params.tune.trials + 1)
    from bakeoff.search.arm import tune_arm

    tune_arm(params, sys.argv[1])


if __name__ == "__main__":
    main()
