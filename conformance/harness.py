"""Shared machinery of the conformance tests: the target under test, the oracle, comparisons.

The oracle is always `reference/`; only specified slots are compared
(`reference.specified_slots`, spec section 0 "slot").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, settings

import reference

from .strategies import PackCase, declined
from .targets.protocol import BASE_FEATURES, CAPABILITIES
from .verdicts import RuleViolation as RuleViolation  # re-exported: tests raise h.RuleViolation
from .verdicts import TargetError as TargetError

_STATE: dict[str, Any] = {"target": None, "spec": None}


def set_target(obj: Any, spec: str) -> None:
    _STATE["target"], _STATE["spec"] = obj, spec


def target() -> Any:
    """The target under test (loaded by conftest.py from --target / THD_TARGET)."""
    if _STATE["target"] is None:
        raise RuntimeError("no target loaded: run the suite through pytest (conformance/)")
    return _STATE["target"]


def target_spec() -> str:
    return str(_STATE["spec"])


def caps() -> frozenset[str]:
    """The declared capabilities plus the base features the target does not decline."""
    declines = frozenset(getattr(target(), "declines", ()) or ())
    return frozenset(target().capabilities) | (frozenset(BASE_FEATURES) - declines)


# A skip for a feature the target does not declare starts with this; the report lists such
# tests as "declined" (per capability), apart from other skips.
DECLINED = "declined capability"


def skip_reason(cap: str) -> str:
    reasons = getattr(target(), "skip_reasons", {}) or {}
    why = reasons.get(cap) or CAPABILITIES.get(cap) or BASE_FEATURES.get(cap, cap)
    return f"{DECLINED} {cap!r}: target {target().name!r}: {why}"


def require(*needed: str) -> None:
    """Skip the calling test as declined, with the target's reason, unless it has every
    capability. Inside a hypothesis test with @example use `needs` instead: a skip raised in an
    explicit example makes hypothesis print "Failing explicit example" lines."""
    for cap in needed:
        if cap not in caps():
            pytest.skip(skip_reason(cap))


def needs(*needed: str) -> pytest.MarkDecorator:
    """Marker: the test runs only if the target declares every capability (checked by
    conftest.py at setup, before hypothesis runs, so a declined test prints nothing)."""
    unknown = set(needed) - set(CAPABILITIES) - set(BASE_FEATURES)
    if unknown:
        raise ValueError(f"needs(): unknown capabilities {sorted(unknown)}")
    return pytest.mark.needs(*needed)


def max_rows() -> int | None:
    """The target's `max_rows` (None: no limit)."""
    value = getattr(target(), "max_rows", None)
    return None if value is None else int(value)


def within_rows(rows: int) -> bool:
    limit = max_rows()
    return limit is None or rows <= limit


def require_rows(rows: int, what: str) -> None:
    """Skip as declined when a test would make the target build more rows than `max_rows`."""
    if not within_rows(rows):
        pytest.skip(f"{DECLINED} 'max_rows': {what} needs up to {rows} rows, target "
                    f"{target().name!r} declares max_rows={max_rows()}")


def declined_by(config: dict[str, Any] | None = None, lengths: Any = None,
                trail: tuple[int, ...] = (), need_roll: bool = False,
                pad_value: Any = 0) -> list[str]:
    """The capabilities a case needs that the target does not declare."""
    out = declined(caps(), config, lengths, trail)
    if need_roll and "need_roll" not in caps():
        out.append("need_roll")
    if not (type(pad_value) is int and pad_value == 0) and "pad_value" not in caps():
        out.append("pad_value")
    return out


def assume_declared(case: PackCase | None = None, **kwargs: Any) -> None:
    """Drop a case that uses a declined feature: the strategies never draw one, but a pinned
    @example is written once for every target (hypothesis.assume is silent in explicit
    examples)."""
    if case is not None:
        kwargs = {"config": case.config, "lengths": case.batch.lengths,
                  "trail": case.batch.trail, "need_roll": case.need_roll,
                  "pad_value": case.pad_value, **kwargs}
    assume(not declined_by(**kwargs))


def prop_settings(weight: float = 1.0, **kwargs: Any) -> settings:
    """The loaded profile's example count scaled by `weight` and by the target's `cost`
    (a slow target such as verl's Python loops declares cost > 1 to keep runs reasonable)."""
    base = settings().max_examples
    cost = float(getattr(_STATE["target"], "cost", 1.0) or 1.0)
    return settings(max_examples=max(3, round(base * weight / cost)), **kwargs)


# ----------------------------------------------------------------------------------------------
# Running a case on every rank


@dataclass
class RankResult:
    rows: np.ndarray
    pos: np.ndarray
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


def run_target(case: PackCase, seqs: list[np.ndarray]) -> list[RankResult]:
    out = []
    for rank in range(case.cp_size):
        rows, pos, meta = target().pack(seqs, dict(case.config), rank,
                                        need_roll=case.need_roll, pad_value=case.pad_value)
        out.append(RankResult(np.asarray(rows), np.asarray(pos), meta))
    return out


# ----------------------------------------------------------------------------------------------
# Comparisons with readable first-mismatch messages


def _value(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a), threshold=8)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit equality (R-ROW-1): NaN payloads and the sign of zero count."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


def same_value(a: np.ndarray, b: np.ndarray) -> bool:
    """Value equality with NaN equal to NaN (pad_value rows, R-ROW-2)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def describe_row(plan: Any, config: dict[str, Any], rank: int, k: int) -> str:
    src = reference.row_map(plan, ref_config(config), rank)[k]
    kind = "real" if src.real else "padding"
    return f"rank {rank} local row {k} (sequence {src.seq}, offset {src.offset}, {kind})"


def _row_bytes(a: np.ndarray) -> np.ndarray:
    width = int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize
    return np.ascontiguousarray(a).view(np.uint8).reshape(a.shape[0], width)


def _rows_equal(got: np.ndarray, want: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Per row: real rows equal bit for bit (R-ROW-1), padding rows equal as values with NaN
    equal to NaN (R-ROW-2)."""
    n = want.shape[0]
    width = int(np.prod(want.shape[1:], dtype=np.int64))
    bits = np.all(_row_bytes(got) == _row_bytes(want), axis=1)
    g, w = got.reshape(n, width), want.reshape(n, width)
    same = g == w
    if want.dtype.kind in "fc":
        same |= np.isnan(g) & np.isnan(w)
    values = np.all(same, axis=1)
    return np.asarray(np.where(real, bits, values), dtype=bool)


def check_rows(case: PackCase, got: list[RankResult], want: list[RankResult]) -> None:
    """R-ROW-*, R-ROLL-*: specified rows equal the reference (real rows bit for bit)."""
    cfg = ref_config(case.config)
    for rank, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.rows.dtype != w.rows.dtype or g.rows.shape != w.rows.shape:
            raise RuleViolation(f"rank {rank}: rows {g.rows.dtype}{list(g.rows.shape)}, spec "
                                f"{w.rows.dtype}{list(w.rows.shape)}", {"R-ROW-1"})
        rows_spec, _ = reference.specified_slots(w.meta, cfg, rank, case.need_roll)
        rmap = reference.row_map(w.meta, cfg, rank)
        real = np.fromiter((src.real for src in rmap), dtype=bool, count=len(rmap))
        bad = np.flatnonzero(np.asarray(rows_spec) & ~_rows_equal(g.rows, w.rows, real))
        if bad.size:
            k = int(bad[0])
            if case.need_roll:
                rules = {"R-ROLL-1" if real[k] else "R-ROLL-3"}
            else:
                rules = {"R-ROW-1" if real[k] else "R-ROW-2"}
            raise RuleViolation(
                f"{describe_row(w.meta, case.config, rank, k)}: target {_value(g.rows[k])}, "
                f"spec {_value(w.rows[k])} ({bad.size} rows differ on this rank)", rules
            )


def check_positions(case: PackCase, got: list[RankResult], want: list[RankResult]) -> None:
    """R-POS-*, R-ROLL-1: specified position ids equal the reference."""
    cfg = ref_config(case.config)
    for rank, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.pos.dtype != np.int64 or g.pos.shape != w.pos.shape:
            raise RuleViolation(f"rank {rank}: position_ids {g.pos.dtype}{list(g.pos.shape)}, "
                                f"spec int64{list(w.pos.shape)}", {"R-POS-1"})
        _, pos_spec = reference.specified_slots(w.meta, cfg, rank, case.need_roll)
        bad = np.flatnonzero(np.asarray(pos_spec) & (g.pos != w.pos))
        if bad.size:
            k = int(bad[0])
            raise RuleViolation(
                f"{describe_row(w.meta, case.config, rank, k)}: target position id "
                f"{int(g.pos[k])}, spec {int(w.pos[k])} ({bad.size} ids differ on this rank)",
                {"R-ROLL-1" if case.need_roll else "R-POS-2"},
            )


META_ARRAYS = ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded")
META_INTS = ("max_seqlen", "total", "local_rows")


def meta_mismatches(meta: dict[str, Any], plan: Any) -> list[str]:
    """R-META-*: every field the target reports equals the reference plan, with the right type."""
    problems = []
    for key in META_ARRAYS:
        if key not in meta:
            continue
        got, want = np.asarray(meta[key]), np.asarray(getattr(plan, key))
        if got.dtype != np.int32:
            problems.append(f"{key} dtype {got.dtype}, spec int32")
        if got.shape != want.shape or not np.array_equal(got, want):
            problems.append(f"{key} {got.tolist()}, spec {want.tolist()}")
    for key in META_INTS:
        if key not in meta:
            continue
        got_v, want_v = meta[key], getattr(plan, key)
        if type(got_v) is not int:
            problems.append(f"{key} is {type(got_v).__name__}, spec Python int")
        if got_v != want_v:
            problems.append(f"{key} {got_v!r}, spec {want_v!r}")
    return problems


META_RULES = {"seqlens": "R-META-1", "seqlens_padded": "R-META-1", "cu_seqlens": "R-META-2",
              "cu_seqlens_padded": "R-META-3", "max_seqlen": "R-META-4", "total": "R-META-5",
              "local_rows": "R-META-5"}


def check_meta(got: list[RankResult], want: list[RankResult]) -> None:
    """R-META-*: the plan on every rank; a wrong total also disproves R-TOTAL-4."""
    for rank, (g, w) in enumerate(zip(got, want, strict=True)):
        problems = meta_mismatches(g.meta, w.meta)
        if problems:
            rules = {rule for key, rule in META_RULES.items()
                     if any(p.startswith(key + " ") for p in problems)}
            if any(p.startswith("total ") for p in problems):
                rules.add("R-TOTAL-4")
            raise RuleViolation(f"rank {rank}: " + "; ".join(problems), rules or {"R-META-1"})


def snapshot(seqs: Any) -> list[bytes] | None:
    """Bytes of every array of a batch, to prove a rejected call left its inputs unchanged."""
    if not isinstance(seqs, list | tuple):
        return None
    return [np.asarray(s).tobytes() if isinstance(s, np.ndarray) else repr(s).encode()
            for s in seqs]


def outcome(fn: Any) -> BaseException | None:
    try:
        fn()
    except Exception as exc:  # the exception is the result under test
        return exc
    return None


def check_same_rejection(want: BaseException | None, got: BaseException | None,
                         what: str, rules: set[str] | None = None,
                         names: tuple[str, ...] = ()) -> None:
    """R-ERR-*: the target raises the reference's error class (a subclass is fine), or accepts
    what the reference accepts. With `rules`, a failure names exactly those rules."""
    def fail(message: str) -> None:
        if rules:
            raise RuleViolation(message, rules)
        raise AssertionError(message)

    if want is None:
        if got is not None:
            fail(f"{what}: the spec accepts this, the target raised {got!r}")
        return
    if got is None:
        fail(f"{what}: the spec raises {type(want).__name__} ({want}), the target accepted it")
    elif not isinstance(got, type(want)):
        fail(f"{what}: the spec raises {type(want).__name__} ({want}), the target raised "
             f"{type(got).__name__} ({got})")
    elif (names and any(_names(n, str(want)) for n in names)
          and not any(_names(n, str(got)) for n in names)):
        # Spec section 11: the message names the field (and the offending value).
        fail(f"{what}: the message {str(got)!r} does not name the field {names[0]!r}")
    else:
        missing = [n for n in FIELD_NAMES if _names(n, str(want)) and not _names(n, str(got))]
        if missing:
            fail(f"{what}: the spec's message names {missing}, the target's {str(got)!r} "
                 "does not (spec section 11: the message names the field)")


def _names(name: str, message: str) -> bool:
    """The message names the field as a word (not inside another identifier)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


def names_number(number: int, message: str) -> bool:
    """The message shows `number` as a whole number (not inside a longer one)."""
    return re.search(rf"(?<![0-9.]){number}(?![0-9])", message) is not None


def names_object(obj: Any, message: str) -> bool:
    """The message names an offending object that has no short value (a container, an array,
    an object of the wrong type) by its type name or its repr (spec section 11)."""
    return _names(type(obj).__name__, message) or repr(obj) in message


# Names an error message must repeat when the reference's message uses them (spec section 11).
FIELD_NAMES = ("tp_size", "cp_size", "cp_layout", "fp8", "bucket", "min_local_rows", "cp_rank",
               "need_roll", "pad_value", "seqlens", "pad_to_length", "pad_to_length_bucket",
               "use_remove_padding", "dynamic_context_parallel", "distillation_use_topk",
               "router_replay", "use_fp8_padding", "shards", "local_rows", "total")


def check_local_grad(grad: np.ndarray | None, plan: Any, cfg: Any, rank: int,
                     what: str) -> None:
    """R-MEG-3: the gradient of the outputs' sum on a rank's own rows is 1 on real rows and 0 on
    padding, so the local rows stayed in the autograd graph."""
    if grad is None:
        return
    real = np.array([src.real for src in reference.row_map(plan, cfg, rank)], dtype=bool)
    assert np.shape(grad)[0] == len(real), \
        f"{what}: rank {rank} holds {np.shape(grad)[0]} rows, spec {len(real)}"
    flat = np.asarray(grad).reshape(len(real), int(np.prod(np.shape(grad)[1:])))
    expected = np.broadcast_to(real[:, None], flat.shape).astype(flat.dtype)
    assert np.array_equal(flat, expected), (
        f"{what}: rank {rank}: gradient on the local rows is not 1 on real rows and 0 on "
        "padding (the local output left the autograd graph)")
