"""A raw file read row by row, whatever its format (JSONL, JSON, CSV, Parquet, or a Hugging Face dataset saved to a
folder), each row with where it came from (``file:line``) so an error can name it."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from bakeoff.core.errors import UserError


class DataError(UserError):
    """Input data that cannot be used; the message names the file and line."""


def detect_format(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".parquet":
        return "parquet"
    raise DataError(
        f"{path}: cannot tell the format from the suffix {suffix!r}; set task.format (jsonl, csv or parquet)"
    )


def iter_raw(path: str | Path, fmt: str = "auto") -> Iterator[tuple[str, dict]]:
    """Yield (``file:line``, row) for every row of a JSONL, CSV or Parquet file."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found (check task.train / task.test / task.prefs in params.yaml)")
    if path.is_dir():  # a dataset saved with 🤗 datasets, or the hub's file layout, read through datasets itself
        for i, row in enumerate(_hf_rows(path), start=1):
            yield f"{path}:row {i}", row
        return
    fmt = detect_format(path, fmt)
    if fmt == "jsonl":
        with open(path, "rb") as f:
            for i, raw in enumerate(f, start=1):
                try:  # utf-8-sig: a byte-order mark (Excel, Notepad) is read as nothing, not as text
                    line = raw.decode("utf-8-sig" if i == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    bad = raw[e.start : e.start + 4]
                    raise DataError(f"{path}:{i}: not UTF-8 text (byte {e.start}: {bad!r})") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    if line.strip() in ("[", "[{") or (line.lstrip().startswith("[") and i == 1):
                        raise DataError(
                            f"{path}:{i}: a JSON array, not JSON Lines (one object a line): convert it, "
                            f"e.g. jq -c '.[]' {path} > rows.jsonl"
                        ) from None
                    raise DataError(f"{path}:{i}: not valid JSON ({e.msg} at column {e.colno})") from None
                if isinstance(row, list):
                    raise DataError(
                        f"{path}:{i}: a JSON array, not JSON Lines (one object a line): convert it, "
                        f"e.g. jq -c '.[]' {path} > rows.jsonl"
                    )
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
                yield f"{path}:{i}", row
    elif fmt == "csv":
        try:
            with open(path, newline="", encoding="utf-8-sig") as f:  # Excel's "CSV UTF-8" starts with a BOM
                dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
                reader = csv.DictReader(f, dialect=dialect)
                for i, row in enumerate(reader, start=2):  # line 1 is the header
                    yield f"{path}:{reader.line_num or i}", row
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    elif fmt == "parquet":
        import pandas as pd

        frame = pd.read_parquet(path)
        for i, row in enumerate(frame.to_dict(orient="records"), start=1):
            yield f"{path}:row {i}", row
    else:
        raise DataError(f"{path}: unknown format {fmt!r} (use jsonl, csv or parquet)")


def _hf_rows(path: Path):
    """The rows of a ``save_to_disk`` folder (one Dataset, or a DatasetDict of one split) or of a folder in the hub's
    layout (data/train-00000-of-00001.parquet, ...: ``datasets.load_dataset`` on the folder)."""
    import datasets

    saved = any((path / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json"))
    try:
        ds = datasets.load_from_disk(str(path)) if saved else datasets.load_dataset(str(path))
    except Exception as e:  # not a dataset folder: say what was tried
        raise DataError(
            f"{path}: a folder, read through datasets ({'load_from_disk' if saved else 'load_dataset'}), "
            f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        ) from None
    if isinstance(ds, (datasets.DatasetDict, dict)):
        if len(ds) != 1:
            raise DataError(
                f"{path}: holds the splits {', '.join(ds)}; point task.train (and task.test) at one: "
                + (
                    "its subfolder, e.g. " + str(path / next(iter(ds)))
                    if saved
                    else "one split's file, e.g. data/train-00000-of-00001.parquet"
                )
            )
        ds = next(iter(ds.values()))
    return iter(ds)
