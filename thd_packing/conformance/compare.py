"""The target's results against the reference, each mismatch charged to the most specific rule:
rows, position ids, metadata (and the stage of the padded plan that explains a wrong one), the
local gradient, unpack against the input batch, and a raised error against the reference's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from thd_packing import reference

from . import requirements as req
from .contract import row_bytes, show
from .protocol import OutputRefused
from .running import META_ARRAYS, META_INTS, RankResult, call_target, ref_config
from .strategies import PackCase
from .under_test import RuleViolation, target


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


def _rows_equal(got: np.ndarray, want: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Per row: real rows equal bit for bit (R-ROW-1), padding rows equal as values with NaN
    equal to NaN (R-ROW-2)."""
    n = want.shape[0]
    width = int(np.prod(want.shape[1:], dtype=np.int64))
    bits = np.all(row_bytes(got) == row_bytes(want), axis=1)
    g, w = got.reshape(n, width), want.reshape(n, width)
    same = g == w
    if want.dtype.kind in "fc":
        same |= np.isnan(g) & np.isnan(w)
    values = np.all(same, axis=1)
    return np.asarray(np.where(real, bits, values), dtype=bool)


def in_scope(rules: np.ndarray, scope: frozenset[str] | None) -> np.ndarray:
    """Per slot: its rule is judged (every rule without a scope)."""
    return np.ones(rules.shape, dtype=bool) if scope is None else np.isin(rules, sorted(scope))


def check_rows(case: PackCase, got: list[RankResult], want: list[RankResult],
               scope: frozenset[str] | None = None) -> None:
    """R-ROW-*, R-ROLL-*: specified rows equal the reference (real rows bit for bit). With
    `scope`, a row whose rule is outside it is not compared."""
    cfg = ref_config(case.config)
    for rank, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.rows.dtype != w.rows.dtype or g.rows.shape != w.rows.shape:
            raise RuleViolation(f"rank {rank}: rows {g.rows.dtype}{list(g.rows.shape)}, spec "
                                f"{w.rows.dtype}{list(w.rows.shape)}", {"R-ROW-1"})
        rows_spec, _ = reference.specified_slots(w.meta, cfg, rank, case.need_roll)
        rmap = reference.row_map(w.meta, cfg, rank)
        real = np.fromiter((src.real for src in rmap), dtype=bool, count=len(rmap))
        rule = np.where(real, "R-ROLL-1" if case.need_roll else "R-ROW-1",
                        "R-ROLL-3" if case.need_roll else "R-ROW-2")
        judged = np.asarray(rows_spec) & in_scope(rule, scope)
        bad = np.flatnonzero(judged & ~_rows_equal(g.rows, w.rows, real))
        if bad.size:
            k = int(bad[0])
            raise RuleViolation(
                f"{describe_row(w.meta, case.config, rank, k)}: target {show(g.rows[k])}, "
                f"spec {show(w.rows[k])} ({bad.size} rows differ on this rank)", {str(rule[k])}
            )


def check_positions(case: PackCase, got: list[RankResult], want: list[RankResult],
                    scope: frozenset[str] | None = None) -> None:
    """R-POS-*, R-ROLL-1, R-TAIL-2: specified position ids equal the reference. With `scope`,
    a slot whose rule is outside it is not compared (nor the dtype, unless R-POS-1 is in it)."""
    cfg = ref_config(case.config)
    for rank, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.pos is None:  # no position ids: declined (running.readable_output)
            continue
        if g.pos.shape != w.pos.shape or (
                g.pos.dtype != np.int64 and (scope is None or "R-POS-1" in scope)):
            raise RuleViolation(f"rank {rank}: position_ids {g.pos.dtype}{list(g.pos.shape)}, "
                                f"spec int64{list(w.pos.shape)}", {"R-POS-1"})
        _, pos_spec = reference.specified_slots(w.meta, cfg, rank, case.need_roll)
        differ = np.flatnonzero(np.asarray(pos_spec) & (g.pos != w.pos))
        if not differ.size:
            continue
        rmap = reference.row_map(w.meta, cfg, rank)
        rule = np.asarray(["R-ROLL-1" if case.need_roll else
                           "R-TAIL-2" if not rmap[k].real and rmap[k].seq >= num_seqs(w.meta)
                           else "R-POS-2" for k in differ], dtype=str)
        keep = in_scope(rule, scope)
        bad, rule = differ[keep], rule[keep]
        if bad.size:
            k = int(bad[0])
            raise RuleViolation(
                f"{describe_row(w.meta, case.config, rank, k)}: target position id "
                f"{int(g.pos[k])}, spec {int(w.pos[k])} ({bad.size} ids differ on this rank)",
                {str(rule[0])},
            )


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


def check_meta(got: list[RankResult], want: list[RankResult],
               config: dict[str, Any] | None = None) -> None:
    """R-META-*, and with `config` the stage that explains a wrong padded plan (R-ALIGN-1..3,
    -5 per sequence, R-TOTAL-1..5, R-TAIL-1 for the total and where it goes, R-STATIC-1 for the
    entries past the real content): a failure is charged to the most specific rule, so the
    rules it makes untestable show as blocked by it. Under max_seqlen='total' a wrong max_seqlen
    is R-STATIC-2."""
    meta_rules = dict(META_RULES)
    if config is not None and config.get("max_seqlen") == "total":
        meta_rules["max_seqlen"] = "R-STATIC-2"
    for rank, (g, w) in enumerate(zip(got, want, strict=True)):
        shape = segment_count_problems(g.meta, w.meta, config)
        if shape:
            message, rules = shape
            raise RuleViolation(f"rank {rank}: {message}", rules)
        problems = meta_mismatches(g.meta, w.meta)
        if not problems:
            continue
        rules = {rule for key, rule in meta_rules.items()
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
    base_rule = {"tp_cp": "R-ALIGN-1", "none": "R-ALIGN-6"}.get(
        str(config.get("seq_align", "tp_cp")), "R-ALIGN-5")
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
        if p > n and base_rule != "R-ALIGN-1":
            # aligned, but to more than seq_align='cp' or 'none' asks (tp, or cp, kept)
            return f"{what}: padded past ceil_to(L_{i}, A) with As = {a_s}", {base_rule}
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


def check_unpack_returns_batch(what: str, shards: Sequence[Any], meta: Mapping[str, Any],
                               config: dict[str, Any], seqs: Sequence[np.ndarray], *,
                               rules: set[str], count_rules: set[str]) -> None:
    """R-UNPACK-1: the target's unpack of every rank's shards returns the B input sequences,
    bit for bit. A rejection is charged to `rules`, the wrong number of arrays to `count_rules`
    (the caller knows what a wrong B disproves: a plan without `num_seqs`, R-META-7, or static
    entries read as sequences, R-STATIC-1)."""
    out = call_target(what, target().unpack, shards, meta, dict(config), rules=rules)
    if not isinstance(out, list | tuple) or len(out) != len(seqs):
        got = len(out) if isinstance(out, list | tuple) else type(out).__name__
        raise RuleViolation(f"{what}: {got} arrays back, B = {len(seqs)}", count_rules)
    for i, (o, s) in enumerate(zip(out, seqs, strict=True)):
        if not same_bits(np.asarray(o), s):
            raise RuleViolation(f"{what}: sequence {i} differs from the input", {"R-UNPACK-1"})


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


def snapshot(seqs: Any) -> list[bytes] | None:
    """Bytes of every array of a batch, to prove a rejected call left its inputs unchanged."""
    if not isinstance(seqs, list | tuple):
        return None
    return [np.asarray(s).tobytes() if isinstance(s, np.ndarray) else repr(s).encode()
            for s in seqs]


def outcome(fn: Any) -> BaseException | None:
    """The exception `fn` raises, the result under test (None: it returned); a consumer's
    refusal of an output the glue reports (OutputRefused) is a failure of its own rule."""
    try:
        fn()
    except OutputRefused:
        raise
    except Exception as exc:
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
    elif (names and any(names_field(n, str(want)) for n in names)
          and not any(names_field(n, str(got)) for n in names)):
        # Spec section 11: the message names the field (and the offending value).
        fail(f"{what}: the message {str(got)!r} does not name the field {names[0]!r}")
    else:
        missing = [n for n in FIELD_NAMES
                   if names_field(n, str(want)) and not names_field(n, str(got))]
        if missing:
            fail(f"{what}: the spec's message names {missing}, the target's {str(got)!r} "
                 "does not (spec section 11: the message names the field)")


def names_field(name: str, message: str) -> bool:
    """The message names the field as a word (not inside another identifier)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


def names_number(number: int, message: str) -> bool:
    """The message shows `number` as a whole number (not inside a longer one)."""
    return re.search(rf"(?<![0-9.]){number}(?![0-9])", message) is not None


def names_item(item: str | int, message: str) -> bool:
    """The message names a field ("a|b": either word) or shows a whole number."""
    if isinstance(item, int):
        return names_number(item, message)
    return any(names_field(word, message) for word in item.split("|"))


def names_object(obj: Any, message: str) -> bool:
    """The message names an offending object that has no short value (a container, an array,
    an object of the wrong type) by its type name or its repr (spec section 11)."""
    return names_field(type(obj).__name__, message) or repr(obj) in message


# Names an error message must repeat when the reference's message uses them (spec section 11).
FIELD_NAMES = ("tp_size", "cp_size", "cp_layout", "fp8", "bucket", "min_local_rows", "cp_rank",
               "need_roll", "pad_value", "seqlens", "pad_to_length", "pad_to_length_bucket",
               "use_remove_padding", "dynamic_context_parallel", "distillation_use_topk",
               "router_replay", "use_fp8_padding", "shards", "local_rows", "total", "tail",
               "seq_align", "max_num_seqs", "max_seqlen")
