"""``python -m bakeoff.size``: the GPU sizing table from params.yaml, before any training (see sizing.py)."""

from bakeoff.errors import cli
from bakeoff.sizing import main

if __name__ == "__main__":
    cli(main)()
