"""Shared machinery of the conformance tests: the target under test, the oracle, comparisons.

The oracle is always `reference/`; only specified slots are compared
(`reference.specified_slots`, spec section 0 "slot").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, settings

import reference

from . import requirements as req
from .strategies import PackCase, declined, unknown_fields
from .targets.protocol import (
    BASE_FEATURES,
    CAPABILITIES,
    CONVENTION_DEFAULTS,
    CONVENTION_VALUES,
    declared_capabilities,
)
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
    """The declared capabilities, the base features the target does not decline, and its fixed
    convention (protocol.declared_capabilities)."""
    return declared_capabilities(target())


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


def with_convention(config: dict[str, Any]) -> dict[str, Any]:
    """The config with the target's fixed convention filled in where it leaves a field out (a
    hand-written config of a test about something else, such as the caller's arrays or a
    rejection, then runs under the target's convention, for the target and the reference)."""
    out = dict(config)
    have = caps()
    for key, values in CONVENTION_VALUES.items():
        if key in out or values[CONVENTION_DEFAULTS[key]] in (None, *have):
            continue
        others = [v for v, cap in values.items() if cap is not None and cap in have]
        if len(others) == 1:
            out[key] = others[0]
    return out


def require_config(config: dict[str, Any], *, lengths: Any = None, trail: tuple[int, ...] = (),
                   need_roll: bool = False, pad_value: Any = 0) -> None:
    """Skip the calling test as declined where the target does not support a config written
    once for every target, whose absent fields are the spec's defaults (a worked example, a
    golden vector): a feature or convention value it does not declare (a target with a fixed
    convention declines the default it does not pack with), or an invalid value of a convention
    field it does not implement at all (it cannot be asked to reject what it does not know).
    Outside hypothesis; inside a @given test with @example use `assume_declared`."""
    require(*declined_by(config=config, lengths=lengths, trail=trail, need_roll=need_roll,
                         pad_value=pad_value), *unknown_fields(caps(), config))


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


def readable_output(result: Any, what: str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
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
        rows, pos = np.asarray(rows_in), np.asarray(pos_in)
    except Exception as exc:
        raise TargetError(f"{what}: rows or position ids cannot be read as arrays: "
                          f"{exc!r}") from exc
    if rows.ndim == 0 or pos.ndim == 0:
        raise TargetError(f"{what}: rows {rows.shape} / position ids {pos.shape} have no row "
                          "dimension")
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
            src = reference.row_map(w.meta, cfg, rank)[k]
            rule = ("R-ROLL-1" if case.need_roll else
                    "R-TAIL-2" if not src.real and src.seq >= num_seqs(w.meta) else "R-POS-2")
            raise RuleViolation(
                f"{describe_row(w.meta, case.config, rank, k)}: target position id "
                f"{int(g.pos[k])}, spec {int(w.pos[k])} ({bad.size} ids differ on this rank)",
                {rule},
            )


META_ARRAYS = ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded")
META_INTS = ("max_seqlen", "total", "local_rows", "num_seqs")


def num_seqs(plan: Any) -> int:
    """B of a reference plan (spec 1.1's `num_seqs`; before it, one entry per sequence)."""
    return int(getattr(plan, "num_seqs", len(plan.seqlens)))


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
        if key not in meta or not hasattr(plan, key):
            continue
        got_v, want_v = meta[key], getattr(plan, key)
        if type(got_v) is not int:
            problems.append(f"{key} is {type(got_v).__name__}, spec Python int")
        if got_v != want_v:
            problems.append(f"{key} {got_v!r}, spec {want_v!r}")
    return problems


META_RULES = {"seqlens": "R-META-1", "seqlens_padded": "R-META-1", "cu_seqlens": "R-META-2",
              "cu_seqlens_padded": "R-META-3", "max_seqlen": "R-META-4", "total": "R-META-5",
              "local_rows": "R-META-5", "num_seqs": "R-META-7"}


def meta_rules(config: dict[str, Any] | None) -> dict[str, str]:
    """META_RULES under the config's convention: max_seqlen='total' is R-STATIC-2."""
    if config is not None and config.get("max_seqlen") == "total":
        return {**META_RULES, "max_seqlen": "R-STATIC-2"}
    return META_RULES


def check_meta(got: list[RankResult], want: list[RankResult],
               config: dict[str, Any] | None = None) -> None:
    """R-META-*, and with `config` the stage that explains a wrong padded plan (R-ALIGN-1..3,
    -5 per sequence, R-TOTAL-1..5, R-TAIL-1 for the total and where it goes, R-STATIC-1 for the
    entries past the real content): a failure is charged to the most specific rule, so the
    rules it makes untestable show as blocked by it."""
    for rank, (g, w) in enumerate(zip(got, want, strict=True)):
        shape = segment_count_problems(g.meta, w.meta, config)
        if shape:
            message, rules = shape
            raise RuleViolation(f"rank {rank}: {message}", rules)
        problems = meta_mismatches(g.meta, w.meta)
        if not problems:
            continue
        rules = {rule for key, rule in meta_rules(config).items()
                 if any(p.startswith(key + " ") for p in problems)}
        stage = plan_stage(g.meta, w.meta, config) if config is not None else None
        if stage is not None:
            message, stage_rules = stage
            raise RuleViolation(f"rank {rank}: {message} ({'; '.join(problems)})", stage_rules)
        if config is None and any(p.startswith("total ") for p in problems):
            rules.add("R-TOTAL-4")
        raise RuleViolation(f"rank {rank}: " + "; ".join(problems), rules or {"R-META-1"})


def segment_count_problems(meta: dict[str, Any], plan: Any,
                           config: dict[str, Any] | None = None
                           ) -> tuple[str, set[str]] | None:
    """A plan with the wrong number of entries K is a rule verdict, checked before anything
    indexes the arrays by sequence: R-META-1 / R-META-3 under the spec's defaults (B + 1
    segments: the total padding as its own trailing segment), R-TAIL-1 under tail='segment'
    (the padding segment missing, or there when T = S), R-STATIC-1 with max_num_seqs (not N
    entries)."""
    k, b = len(plan.seqlens), num_seqs(plan)
    config = config or {}
    problems, rules = [], set()
    for key, want, rule in (("seqlens", k, "R-META-1"), ("seqlens_padded", k, "R-META-1"),
                            ("cu_seqlens", k + 1, "R-META-2"),
                            ("cu_seqlens_padded", k + 1, "R-META-3")):
        if key in meta and np.asarray(meta[key]).shape != (want,):
            problems.append(f"{key} has {np.asarray(meta[key]).shape[0]} entries, spec {want} "
                            f"for B = {b}: {np.asarray(meta[key]).tolist()}")
            rules.add(rule)
    if problems and config.get("max_num_seqs") is not None:
        rules = {"R-STATIC-1"}
    elif problems and config.get("tail", "last") == "segment":
        rules = {"R-TAIL-1"}
    return ("; ".join(problems), rules) if problems else None


def plan_stage(meta: dict[str, Any], plan: Any, config: dict[str, Any]
               ) -> tuple[str, set[str]] | None:
    """Which stage of the spec's padding explains a wrong padded plan (None: the padded lengths
    and total are right, the mismatch is elsewhere in the metadata). The per-sequence stage is
    judged first on every sequence but the last (which also takes the total's surplus)."""
    cfg = ref_config(config)
    b = num_seqs(plan)
    lengths = [int(n) for n in plan.seqlens][:b]
    cu = np.asarray(meta["cu_seqlens_padded"], dtype=np.int64)
    padded = (np.asarray(meta["seqlens_padded"], dtype=np.int64) if "seqlens_padded" in meta
              else np.diff(cu))
    want_p = np.asarray(plan.seqlens_padded, dtype=np.int64)
    a_s, a = req.sequence_base(config), cfg.sequence_align
    segment = config.get("tail", "last") == "segment"
    base_rule = "R-ALIGN-1" if config.get("seq_align", "tp_cp") == "tp_cp" else "R-ALIGN-5"
    # Under tail='last' the last sequence also takes the surplus; under 'segment' every real
    # sequence keeps ceil_to(L_i, A).
    for i in range(b if segment else b - 1):
        p, n = int(padded[i]), lengths[i]
        if p == int(want_p[i]):
            continue
        what = f"P_{i} = {p} for L_{i} = {n}, spec ceil_to(L_{i}, A = {a}) = {int(want_p[i])}"
        if p >= n and p % a_s == 0 and p % a != 0:
            return f"{what}: a multiple of As = {a_s} but not of lcm(16, As)", {"R-ALIGN-2"}
        if p >= n and p % a_s != 0:
            return f"{what}: not a multiple of the sequence base As = {a_s}", {base_rule}
        if p > n and base_rule == "R-ALIGN-5":
            # aligned, but to more than seq_align='cp' asks (tp kept in the alignment)
            return f"{what}: padded past ceil_to(L_{i}, A) with As = cp * f = {a_s}", \
                {"R-ALIGN-5"}
        return what, {"R-ALIGN-3"}
    total = int(meta["total"]) if "total" in meta else int(cu[-1])
    if total != plan.total:
        what = f"total {total}, spec {plan.total}"
        m, f8 = cfg.total_modulus, cfg.fp8_total_align
        s = int(np.sum(-(-np.asarray(lengths, dtype=np.int64) // a) * a))
        bound = max(s, cfg.cp_size * cfg.min_local_rows) if cfg.min_local_rows else s
        if total < bound:
            return f"{what}: below N = {bound}", {"R-TOTAL-3"}
        if total == bound > s:
            # min_local_rows raised the bound, and the total stopped there (erratum E-2)
            return f"{what}: the bound N = cp * min_local_rows = {bound} itself, not rounded " \
                f"up to M = {m}", {"R-TOTAL-4"}
        if f8 is not None and total % f8 != 0:
            recipe = config.get("fp8")
            rules = {"R-TOTAL-1"} if recipe is True else {"R-TOTAL-1", "R-FP8-1"}
            return f"{what}: not a multiple of F = {f8} (fp8={recipe!r})", rules
        if total % m != 0:
            return f"{what}: not a multiple of M = {m}", {"R-TOTAL-2"}
        return f"{what}: not the smallest multiple of M = {m} >= N = {bound}", {"R-TOTAL-4"}
    if not np.array_equal(padded, want_p):
        bad = int(np.flatnonzero(padded != want_p)[0])
        where = (f"seqlens_padded {padded.tolist()}, spec {want_p.tolist()}: the total is "
                 f"right, entry {bad} is not")
        if bad > b or (bad == b and not segment):
            return f"{where} (past the real content: zero-length)", {"R-STATIC-1"}
        if segment:
            return f"{where} (the surplus T - S belongs in segment B = {b})", {"R-TAIL-1"}
        return f"{where} (the surplus belongs on the last sequence)", {"R-TOTAL-5"}
    if not np.array_equal(cu, np.asarray(plan.cu_seqlens_padded, dtype=np.int64)):
        return (f"cu_seqlens_padded {cu.tolist()} is not the running sum of the padded lengths "
                f"{padded.tolist()}"), {"R-META-3"}
    return None


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
               "router_replay", "use_fp8_padding", "shards", "local_rows", "total", "tail",
               "seq_align", "max_num_seqs", "max_seqlen")


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
