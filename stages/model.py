"""Stage `model`: resolve `model.base` into models/base/ (safetensors, tokenizer, chat template).

    python stages/model.py models/base
"""

import json
import sys

from bakeoff.config import load_params
from bakeoff.errors import cli
from bakeoff.models import resolve_base
from bakeoff.runs import fresh_dir


@cli
def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "models/base"
    m = load_params().model
    record = resolve_base(m.base, fresh_dir(out), dtype=m.dtype, trust_remote_code=m.trust_remote_code)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
