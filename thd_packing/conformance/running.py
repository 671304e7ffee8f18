"""Running a case on every rank: the reference's pack, and the target's called as on valid input
(a rejection is a rule verdict, any other exception a TargetError) with its outputs read into
arrays (a broken protocol shape is a TargetError; wrong values are left to `compare`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from thd_packing import reference
from thd_packing.reference.pack import lay_out

from .contract import segment_batch
from .protocol import NotDeclared, OutputRefused, Packed, collecting_refusals, zero_length_of
from .strategies import PackCase
from .under_test import (
    POSITIONS,
    RuleViolation,
    TargetError,
    as_tuple,
    not_declared,
    note_given,
    note_violation,
    target,
)

# The meta fields the protocol defines: arrays, and row counts.
META_ARRAYS = ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded")
META_INTS = ("max_seqlen", "total", "local_rows", "num_seqs")


@dataclass
class RankResult:
    rows: np.ndarray
    pos: Any  # np.ndarray; None where the target gives no position ids (declined)
    meta: Any  # target: Meta dict; reference: Plan


def ref_config(config: dict[str, Any]) -> Any:
    return reference.PackConfig(**config)


def run_reference(case: PackCase, seqs: list[np.ndarray]) -> list[RankResult]:
    """The reference's pack on every rank, of the sequences the target's segments stand for:
    where it declares zero-length omitted, the non-empty ones (R-META-8). Their rows are the
    batch's (an empty sequence has none); their plan counts B' entries, as the target's must."""
    seqs = segment_batch(seqs, zero_length_of(target()))
    cfg = ref_config(case.config)
    out = []
    for rank in range(case.cp_size):
        rows, pos, plan = reference.pack_thd(seqs, cfg, rank, need_roll=case.need_roll,
                                             pad_value=case.pad_value)
        out.append(RankResult(rows, pos, plan))
    return out


def run_reference_on_its_plan(case: PackCase, seqs: list[np.ndarray],
                              got: list[RankResult]) -> list[RankResult] | None:
    """The reference's rows and position ids laid out on the plan the target reports (the row
    map is read off the plan, §5), so that a target's rows are judged apart from its plan.
    None where the row map cannot lay that plan out: ranks that disagree on
    `cu_seqlens_padded`, fewer segments than sequences, a segment shorter than its sequence, a
    total other than cp * each rank's rows, a zigzag segment that 2 * cp does not divide."""
    segs = segment_batch(seqs, zero_length_of(target()))
    cfg, cp = ref_config(case.config), case.cp_size
    cu = np.asarray(got[0].meta["cu_seqlens_padded"], dtype=np.int64)
    lengths = np.asarray([s.shape[0] for s in segs], dtype=np.int64)
    padded, b = np.diff(cu), len(segs)
    if (not segs or cu.size <= b or cu[0] != 0 or np.any(padded < 0)
            or np.any(padded[:b] < lengths)
            or any(g.rows.shape[0] * cp != cu[-1] for g in got)
            or any(not np.array_equal(np.asarray(g.meta["cu_seqlens_padded"]), cu) for g in got)
            or (cp > 1 and cfg.cp_layout == "zigzag" and np.any(padded % (2 * cp)))):
        return None
    full = np.concatenate([lengths, np.zeros(padded.size - b, dtype=np.int64)])
    plan = reference.Plan(seqlens=full, seqlens_padded=padded,
                          cu_seqlens=np.concatenate([[0], np.cumsum(full)]),
                          cu_seqlens_padded=cu, max_seqlen=int(padded.max()),
                          total=int(cu[-1]), local_rows=int(cu[-1]) // cp, num_seqs=b)
    return [RankResult(*lay_out(segs, plan, cfg, rank, need_roll=case.need_roll,
                                pad_value=case.pad_value), plan) for rank in range(cp)]


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
    """Call the target on a valid input: a rejection (TypeError, ValueError) is a
    RuleViolation of `rules` (default R-IN-1, R-IN-3); glue that refuses the output as its
    consumer would (`OutputRefused`) a RuleViolation of its rule; `NotDeclared` a usage error
    of the adapter (`under_test.not_declared`); any other exception, a plain
    NotImplementedError included, a TargetError, a crash (R-CONSUMER-17; conformance/README.md,
    "Reading the report"). Each chains the original, so its traceback stays in the report."""
    try:
        return fn(*args, **kwargs)
    except TargetError:
        raise
    except NotDeclared as exc:
        not_declared(exc, what, args, kwargs)
    except OutputRefused as exc:
        raise RuleViolation(f"{what}: {exc}", {exc.rule}) from exc
    except (TypeError, ValueError) as exc:
        raise RuleViolation(f"{what}: the target rejected a valid input with "
                            f"{type(exc).__name__}: {exc}", rules or valid_input_rules()) from exc
    except Exception as exc:
        raise TargetError(f"{what}: the target crashed: {type(exc).__name__}: {exc}") from exc


def readable_output(result: tuple[Any, Any, Any], what: str
                    ) -> tuple[np.ndarray, Any, dict[str, Any]]:
    """Rows, position ids and meta of one pack call (a `target()` pack-like method's tuple), or
    TargetError where the protocol's shape is broken (arrays that cannot be read, meta not a
    mapping or without `cu_seqlens_padded`, row counts that are not integers). Whether position
    ids came is noted (a test that met none declines its position-id rules); wrong values are
    left to the checks."""
    rows_in, pos_in, meta = result
    try:
        rows = np.asarray(rows_in)
        pos = None if pos_in is None else np.asarray(pos_in)
    except Exception as exc:
        raise TargetError(f"{what}: rows or position ids cannot be read as arrays: "
                          f"{exc!r}") from exc
    note_given(POSITIONS, pos is not None)
    if rows.ndim == 0 or (pos is not None and pos.ndim == 0):
        raise TargetError(f"{what}: rows {rows.shape} / position ids "
                          f"{getattr(pos, 'shape', None)} have no row dimension")
    if not isinstance(meta, Mapping):
        raise TargetError(f"{what}: meta is {type(meta).__name__}, not a mapping")
    if "cu_seqlens_padded" not in meta:
        raise TargetError(f"{what}: meta has no cu_seqlens_padded (keys {sorted(meta)})")
    for key in (k for k in META_ARRAYS if k in meta):
        try:
            arr = np.asarray(meta[key])
        except Exception as exc:
            raise TargetError(f"{what}: meta[{key!r}] cannot be read as an array: "
                              f"{exc!r}") from exc
        if arr.ndim != 1 or arr.dtype.kind not in "iufb":
            raise TargetError(f"{what}: meta[{key!r}] is not a 1-D numeric array: "
                              f"{arr.dtype}{list(arr.shape)}")
    for key in META_INTS:
        try:
            int(meta.get(key, 0))
        except Exception as exc:
            raise TargetError(f"{what}: meta[{key!r}] = {meta[key]!r} is not a row "
                              "count") from exc
    return rows, pos, dict(meta)


def run_target_packed(case: PackCase, seqs: list[np.ndarray]) -> list[Packed]:
    """The target's pack on every rank of a valid case (see `call_target`, `readable_output`),
    kept as `Packed` with what it gives beside the rows (labels, loss mask: the model tier)."""
    out = []
    rules = valid_input_rules(case)
    for rank in range(case.cp_size):
        what = f"pack(rank {rank})"
        with collecting_refusals() as refused:
            result = call_target(what, target().adapter.pack, seqs, dict(case.config), rank,
                                 need_roll=case.need_roll, pad_value=case.pad_value,
                                 rules=rules)
        for message, rule in dict.fromkeys(refused):  # charged, and the pack judged on
            note_violation(RuleViolation(f"{what}: {message}", {rule}), case)
        rows, pos, meta = readable_output(as_tuple(result, what), what)
        out.append(Packed(rows, pos, meta, result.labels, result.loss_mask))
    return out


def run_target(case: PackCase, seqs: list[np.ndarray]) -> list[RankResult]:
    """The target's pack on every rank of a valid case, as `run_target_packed`."""
    return [RankResult(p.rows, p.position_ids, p.meta) for p in run_target_packed(case, seqs)]
