"""Stage `model`: resolve `model.base` into models/base/ (safetensors in shards, tokenizer, chat template), stored in
the dtype the runs use (`model.dtype: auto`: bf16 where every variant and the serving dtype resolve to bf16 here).

    python stages/model.py models/base
"""

import json
import sys

from bakeoff import VERBOSE
from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.core.models import resolve_base, run_dtype
from bakeoff.core.runs import fresh_dir


@cli
def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "models/base"
    params = load_params()
    m = params.model
    # train_defaults and the serving dtype decide (what dvc.yaml lists): a variant with a precision of its own reads
    # the stored weights converted on load
    runs_in = run_dtype([params.train_defaults.precision, params.eval.dtype])
    record = resolve_base(
        m.base, fresh_dir(out), dtype=m.dtype, trust_remote_code=m.trust_remote_code, run_precision=runs_in
    )
    print(
        f"[model] ok: {record.get('base')} ({record.get('kind')}"
        + (f", {record['wheel']}" if record.get("wheel") else "")
        + f"): {record.get('params', 0) / 1e6:.1f}M "
        f"params, {record.get('dtype')} → {out} (the record: {out}/bakeoff_source.json)"
    )
    if VERBOSE:
        print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
