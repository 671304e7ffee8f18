"""Length distributions for the bucket planner: files of per-sample lengths and synthetic ones.

Files hold one length per sample (the number of tokens a sample packs into THD rows). Every
parse error is a ``ValueError`` that names the file and, for text files, the 1-based line, so a
user can fix the input without reading this code.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

SYNTHETIC = ("uniform", "lognormal", "longtail")
FILE_EXTENSIONS = (".jsonl", ".csv", ".npy")


def _as_length(value: object, where: str) -> int:
    """One length: a non-negative integer (R-ERR-6 forbids negative lengths); bools refused."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{where}: expected a non-negative integer length, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            number: int | float = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise ValueError(
                    f"{where}: expected a non-negative integer length, got {value!r}"
                ) from None
    else:
        number = value
    if isinstance(number, float):
        if not number.is_integer():
            raise ValueError(f"{where}: length {value!r} is not an integer")
        number = int(number)
    if number < 0:
        raise ValueError(f"{where}: negative length {number}")
    return number


def _read_jsonl(path: Path, key: str) -> list[int]:
    lengths: list[int] = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: malformed JSON ({exc.msg})") from None
            if isinstance(record, dict):
                if key not in record:
                    raise ValueError(
                        f"{where}: object has no {key!r} key (keys: {sorted(record)}); "
                        f"choose one with --jsonl-key"
                    )
                record = record[key]
            elif isinstance(record, str):
                raise ValueError(f"{where}: expected a non-negative integer length, got {record!r}")
            lengths.append(_as_length(record, where))
    return lengths


def _read_csv(path: Path, column: str) -> list[int]:
    """One column of integers, with or without a header; several columns need a header."""
    lengths: list[int] = []
    with path.open(encoding="utf-8", newline="") as handle:
        rows = [(n, row) for n, row in enumerate(csv.reader(handle), start=1) if any(row)]
    if not rows:
        return lengths
    first_no, first = rows[0]
    index = 0
    try:
        [_as_length(cell, "") for cell in first]
        has_header = False
    except ValueError:
        has_header = True
    if has_header:
        names = [cell.strip() for cell in first]
        if len(names) == 1:
            index = 0
        elif column in names:
            index = names.index(column)
        else:
            raise ValueError(
                f"{path}:{first_no}: no {column!r} column in header {names}; "
                f"choose one with --csv-column"
            )
        rows = rows[1:]
    elif len(first) > 1:
        raise ValueError(
            f"{path}:{first_no}: {len(first)} columns but no header; add a header row "
            f"naming a {column!r} column, or keep one column"
        )
    for lineno, row in rows:
        if index >= len(row):
            raise ValueError(f"{path}:{lineno}: missing column {index + 1}")
        lengths.append(_as_length(row[index], f"{path}:{lineno}"))
    return lengths


def _read_npy(path: Path) -> list[int]:
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
    if array.ndim != 1:
        raise ValueError(f"{path}: expected a 1-D array of lengths, got shape {array.shape}")
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            bad = int(np.flatnonzero(~np.isfinite(array) | (array != np.round(array)))[0])
            value = array[bad].item()
            raise ValueError(f"{path}: element {bad} is {value!r}, not an integer length")
    elif array.dtype.kind not in ("i", "u"):
        raise ValueError(f"{path}: expected an integer array, got dtype {array.dtype}")
    if array.size and array.min() < 0:
        bad = int(np.flatnonzero(array < 0)[0])
        raise ValueError(f"{path}: element {bad} is a negative length {int(array[bad])}")
    return [int(v) for v in array.tolist()]


def load_lengths(path: str | Path, *, jsonl_key: str = "length",
                 csv_column: str = "length") -> list[int]:
    """Per-sample lengths from a ``.jsonl``, ``.csv`` or ``.npy`` file (chosen by extension).

    JSONL lines are integers or objects with ``jsonl_key``; CSV is one column, or a header row
    naming ``csv_column``. Raises ``ValueError`` naming the file (and line) for bad content,
    ``FileNotFoundError`` for a missing file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FILE_EXTENSIONS:
        raise ValueError(
            f"{path}: unsupported file extension {suffix or '(none)'!r}; "
            f"use one of {', '.join(FILE_EXTENSIONS)}"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if suffix == ".npy":
        lengths = _read_npy(path)
    else:
        try:
            if suffix == ".jsonl":
                lengths = _read_jsonl(path, jsonl_key)
            else:
                lengths = _read_csv(path, csv_column)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if not lengths:
        raise ValueError(f"{path}: the file holds no lengths")
    return lengths


def synthetic_stream(name: str, *, max_len: int = 4096, seed: int = 0,
                     chunk: int = 4096) -> Iterator[int]:
    """An endless seeded stream of lengths in ``[1, max_len]`` from a named distribution.

    - ``uniform``: every length in ``[1, max_len]`` equally likely.
    - ``lognormal``: RL responses; log-normal with median ``max_len / 8`` and sigma 1, clipped
      at ``max_len`` (so truncated responses pile up at the limit, as in RL rollouts).
    - ``longtail``: 90% short prompts-like samples (log-normal, median ``max_len / 32``, sigma
      0.7) and 10% long ones, uniform in ``[max_len / 2, max_len]``.
    """
    if name not in SYNTHETIC:
        raise ValueError(f"unknown distribution {name!r}; choose one of {', '.join(SYNTHETIC)}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be an integer >= 1, got {max_len!r}")
    rng = np.random.default_rng(seed)
    while True:
        draw: np.ndarray
        if name == "uniform":
            draw = rng.integers(1, max_len + 1, size=chunk)
        elif name == "lognormal":
            draw = rng.lognormal(np.log(max_len / 8), 1.0, size=chunk)
        else:
            short = rng.lognormal(np.log(max_len / 32), 0.7, size=chunk)
            long = rng.uniform(max_len / 2, max_len, size=chunk)
            draw = np.where(rng.random(chunk) < 0.1, long, short)
        values = np.clip(np.rint(draw), 1, max_len).astype(np.int64)
        yield from (int(v) for v in values)
