"""Running a case on every rank: the reference's pack, the target's pack called as on valid
input (a rejection is a rule verdict, anything else a crash), and its outputs read into arrays
(a broken protocol shape is a TargetError, wrong values are left to `compare`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import reference

from .strategies import PackCase
from .under_test import target
from .verdicts import RuleViolation, TargetError

# The meta fields the protocol defines: arrays, and row counts.
META_ARRAYS = ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded")
META_INTS = ("max_seqlen", "total", "local_rows", "num_seqs")


@dataclass
class RankResult:
    rows: np.ndarray
    pos: Any  # np.ndarray; None where the target gives no position ids (they go unchecked)
    meta: Any  # target: Meta dict; reference: Plan


def ref_config(config: dict[str, Any]) -> Any:
    return reference.PackConfig(**config)


def run_reference(case: PackCase, seqs: list[np.ndarray]) -> list[RankResult]:
    cfg = ref_config(case.config)
    out = []
    for rank in range(case.cp_size):
        rows, pos, plan = reference.pack_thd(seqs, cfg, rank, need_roll=case.need_roll,
                                             pad_value=case.pad_value)
        out.append(RankResult(rows, pos, plan))
    return out


# An exception of these classes from the target on a valid case is the target rejecting valid
# input: a rule failure (R-IN-*). Any other exception is a crash: a TargetError, charged to no
# rule (conformance/README.md, "Reading the report").
REJECTIONS = (TypeError, ValueError, NotImplementedError)


def valid_input_rules(case: PackCase | None = None) -> set[str]:
    """The R-IN rules that make a case valid input (what a rejection of it disproves)."""
    rules = {"R-IN-1", "R-IN-3"}
    if case is not None:
        if any(n == 0 for n in case.batch.lengths):
            rules.add("R-IN-2")
        if case.need_roll or not (type(case.pad_value) is int and case.pad_value == 0):
            rules |= {"R-IN-4", "R-IN-5"}
    return rules


def call_target(what: str, fn: Any, *args: Any, rules: set[str] | None = None,
                **kwargs: Any) -> Any:
    """Call the target on a valid input: a rejection (TypeError, ValueError,
    NotImplementedError) is a RuleViolation of `rules` (default R-IN-1, R-IN-3), any other
    exception a TargetError; both chain the original, so its traceback stays in the report."""
    try:
        return fn(*args, **kwargs)
    except TargetError:
        raise
    except REJECTIONS as exc:
        raise RuleViolation(f"{what}: the target rejected a valid input with "
                            f"{type(exc).__name__}: {exc}", rules or valid_input_rules()) from exc
    except Exception as exc:
        raise TargetError(f"{what}: the target crashed: {type(exc).__name__}: {exc}") from exc


def _readable_array(value: Any, what: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:
        raise TargetError(f"{what} cannot be read as an array: {exc!r}") from exc
    if arr.ndim != 1 or arr.dtype.kind not in "iufb":
        raise TargetError(f"{what} is not a 1-D numeric array: {arr.dtype}{list(arr.shape)}")
    return arr


def readable_output(result: Any, what: str) -> tuple[np.ndarray, Any, dict[str, Any]]:
    """Rows, position ids and meta of one pack call, or TargetError where the protocol's shape
    is broken (not a 3-tuple, arrays that cannot be read, meta not a mapping or without
    `cu_seqlens_padded`, row counts that are not integers). Wrong values are left to the rule
    checks."""
    if not isinstance(result, tuple | list) or len(result) != 3:
        raise TargetError(f"{what} returned {type(result).__name__}"
                          f"{'' if not hasattr(result, '__len__') else f' of {len(result)}'}, "
                          "not (rows, position_ids, meta)")
    rows_in, pos_in, meta = result
    try:
        rows = np.asarray(rows_in)
        pos = None if pos_in is None else np.asarray(pos_in)
    except Exception as exc:
        raise TargetError(f"{what}: rows or position ids cannot be read as arrays: "
                          f"{exc!r}") from exc
    if rows.ndim == 0 or (pos is not None and pos.ndim == 0):
        raise TargetError(f"{what}: rows {rows.shape} / position ids "
                          f"{getattr(pos, 'shape', None)} have no row dimension")
    if not isinstance(meta, Mapping):
        raise TargetError(f"{what}: meta is {type(meta).__name__}, not a mapping")
    if "cu_seqlens_padded" not in meta:
        raise TargetError(f"{what}: meta has no cu_seqlens_padded (keys {sorted(meta)})")
    for key in META_ARRAYS:
        if key in meta:
            _readable_array(meta[key], f"{what}: meta[{key!r}]")
    for key in META_INTS:
        if key in meta:
            try:
                int(meta[key])
            except Exception as exc:
                raise TargetError(f"{what}: meta[{key!r}] = {meta[key]!r} is not a row "
                                  "count") from exc
    return rows, pos, dict(meta)


def run_target(case: PackCase, seqs: list[np.ndarray]) -> list[RankResult]:
    """The target's pack on every rank of a valid case (see `call_target`, `readable_output`)."""
    out = []
    rules = valid_input_rules(case)
    for rank in range(case.cp_size):
        what = f"pack(rank {rank})"
        result = call_target(what, target().pack, seqs, dict(case.config), rank,
                             need_roll=case.need_roll, pad_value=case.pad_value, rules=rules)
        rows, pos, meta = readable_output(result, what)
        out.append(RankResult(rows, pos, meta))
    return out


def run_target_packed(case: PackCase, seqs: list[np.ndarray]) -> list[Any]:
    """As `run_target`, each rank's pack kept as the target's `Packed`, with what it gives
    beside the rows (labels, loss mask; the model tier reads them), its rows, position ids and
    meta read as `run_target` reads them."""
    from .protocol import Packed
    from .under_test import as_tuple

    out = []
    rules = valid_input_rules(case)
    for rank in range(case.cp_size):
        what = f"pack(rank {rank})"
        result = call_target(what, target().adapter.pack, seqs, dict(case.config), rank,
                             need_roll=case.need_roll, pad_value=case.pad_value, rules=rules)
        rows, pos, meta = readable_output(as_tuple(result, what), what)
        out.append(Packed(rows, pos, meta, result.labels, result.loss_mask))
    return out
