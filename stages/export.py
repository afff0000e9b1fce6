"""Stage `export`: ship the recommended variant (or `export.variants`), then prove the shipped files still answer
as the evaluated model did.

    python stages/export.py exports

For each variant, exports/<variant>/ gets its LoRA adapter (PEFT's format), the merged bf16 model, a GGUF made by
llama.cpp's converter, an Ollama Modelfile and SERVE.md. Then, on the test split:
- the merged model is re-scored in-framework (merge fidelity: identical answers to the evaluated model);
- the GGUF is served by llama.cpp's server on 127.0.0.1 and scored through the endpoint path (the served quality
  beside the in-framework 95% interval, the share of identical answers, a paired McNemar test);
- serving figures through that server: latency p50/p95 and tokens/s at batch 1 and at export.concurrency.
reports/shipped.json holds it all; the compare stage puts it in the report.
"""

import sys
from pathlib import Path

from bakeoff.core import runs
from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.ship.winner import export_all

SHIPPED = Path("reports/shipped.json")


@cli
def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "exports")
    params = load_params()
    shipped = {"chosen_by": None, "machine": runs.device_name(), "variants": {}}
    rec = runs.guarded({}, lambda: export_all(params, out, shipped))  # whatever fails, compare still runs
    if rec["status"] != "ok":
        shipped.update(status=rec["status"], error=rec["error"])
        print(f"[export] {rec['status']}: {rec['error'].splitlines()[0]}")
    out.mkdir(parents=True, exist_ok=True)  # a declared output, even when nothing was exported
    runs.write_json(SHIPPED, shipped)


if __name__ == "__main__":
    main()
