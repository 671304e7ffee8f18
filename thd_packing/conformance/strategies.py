"""The suite's hypothesis strategies: configs and batches (the mask form's: masks.py).

Cases are small frozen records whose repr is the minimal counterexample hypothesis prints
(sizes, lengths, dtype, seed); their arrays are built from them on demand, deterministically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from thd_packing.spec.vectors.generate import canonical_batch

from . import requirements as req
from .declines import CONFIG_FEATURES as CONFIG_FEATURES
from .declines import declined as declined
from .declines import fit_layout, supported
from .declines import unknown_fields as unknown_fields
from .protocol import (
    CONVENTION_DEFAULTS,
    CONVENTION_VALUES,
    FP8_RECIPES,
    fixed_bucket,
)

INT32_MAX = 2**31 - 1
# The batches of only empty sequences (valid, R-IN-2): the strategies given a target's `caps`
# never draw them; named tests judge them (the contract tier's degenerate cases, and the
# differential tier's), so one mishandled batch is one finding that blocks no other rule.
ALL_EMPTY_BATCHES = {"all-empty": (0,), "all-empty-3": (0, 0, 0)}

# NumPy dtypes the suite packs (R-IN-1: any dtype). bfloat16 has no NumPy counterpart.
DTYPES = ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "float64",
          "float32", "float16", "bool", "complex64")
TRAILS = ((), (1,), (3,), (2, 2), (0,))
# dtypes whose canonical values 1000 * (i + 1) + j (+ 100000 * trailing index) are exact.
_CANONICAL = {"int64", "int32", "float64", "float32", "complex64"}


@dataclass(frozen=True)
class Batch:
    """A batch description: lengths L_i, trailing shape, dtype, and a seed for the values."""

    lengths: tuple[int, ...]
    trail: tuple[int, ...] = ()
    dtype: str = "int64"
    seed: int = 0

    def arrays(self) -> list[np.ndarray]:
        """Canonical values where the dtype holds them (each value names its source token:
        1000 * (i + 1) + j), random ones otherwise; floats get NaN, -0.0 and inf sprinkled in
        so that row copies are checked bit for bit (R-ROW-1)."""
        rng = np.random.default_rng(self.seed)
        dt = np.dtype(self.dtype)
        canonical = (canonical_batch(list(self.lengths), list(self.trail), self.dtype)
                     if self.dtype in _CANONICAL else None)
        out = []
        for i, length in enumerate(self.lengths):
            shape = (length, *self.trail)
            if canonical is not None:
                arr = canonical[i]
            elif dt.kind == "b":
                arr = rng.integers(0, 2, size=shape).astype(bool)
            elif dt.kind in "iu":
                info = np.iinfo(dt)
                arr = rng.integers(info.min, int(info.max) + 1, size=shape, dtype=dt)
            else:
                arr = rng.standard_normal(size=shape).astype(dt) * 100
            if dt.kind in "fc" and arr.size:
                flat = arr.reshape(-1)
                for special in (np.nan, -0.0, np.inf):
                    flat[rng.integers(0, flat.size)] = special
            out.append(np.ascontiguousarray(arr))
        return out


@dataclass(frozen=True)
class PackCase:
    """One call of pack on every rank: config keyword arguments, batch and per-call flags."""

    config: dict[str, Any] = field(hash=False)
    batch: Batch
    need_roll: bool = False
    pad_value: bool | int | float = 0

    @property
    def cp_size(self) -> int:
        return int(self.config.get("cp_size", 1))


# ----------------------------------------------------------------------------------------------
# Configs (R-IN-3)

# tp and cp, 1 to 8 including non-powers of two; small sizes drawn more often (cheaper cases).
sizes = st.one_of(st.integers(1, 3), st.integers(1, 8))
buckets = st.one_of(
    st.none(),
    st.sampled_from([1, 3, 7, 64, 100, 128, 500, 511, 512, 513, 1000, 1024]),
    st.integers(1, 2048),
)
min_local_rows_values = st.one_of(st.none(), st.integers(1, 40), st.integers(1, 600))


# max_num_seqs as `configs` draws it: valid with any batch drawn (64 sequences and the padding
# segment); `fit_static` brings it down to the batch.
SAFE_MAX_NUM_SEQS = 66


def fp8_values(caps: frozenset[str] | None, *, with_false: bool = True) -> list[Any]:
    """The fp8 settings a target supports: False, True (capability `fp8`), the recipe names
    (capability `fp8_recipes`)."""
    has = (lambda cap: True) if caps is None else caps.__contains__
    out: list[Any] = [False] if with_false else []
    if has("fp8"):
        out.append(True)
    if has("fp8_recipes"):
        out.extend(FP8_RECIPES)
    return out


def fp8_strategy(caps: frozenset[str] | None) -> st.SearchStrategy[Any]:
    """fp8 on: True or a recipe, whichever the target supports (a test of FP8 itself)."""
    values = fp8_values(caps, with_false=False)
    if len(values) <= 1:  # st.just: a 1.0 target draws exactly as before
        return st.just(values[0] if values else False)
    return st.sampled_from(values)


@st.composite
def conventions(draw: st.DrawFn, *, caps: frozenset[str] | None = None,
                tail: st.SearchStrategy[str] | None = None,
                seq_align: st.SearchStrategy[str] | None = None,
                static: bool | None = None,
                labels: st.SearchStrategy[str] | None = None) -> dict[str, Any]:
    """The convention fields (spec 1.1, 1.2) among the values the target supports; a field whose
    only supported value is the default is left out (a 1.0 target sees a 1.0 config)."""
    has = (lambda cap: True) if caps is None else caps.__contains__
    out: dict[str, Any] = {}
    for key, given in (("tail", tail), ("seq_align", seq_align), ("labels", labels)):
        values = supported(CONVENTION_VALUES[key], has)
        if values == [CONVENTION_DEFAULTS[key]] or not values:
            continue
        value = draw(given) if given is not None else draw(st.sampled_from(values))
        if value in values:
            out[key] = value
    if has("static_metadata") and static is not False:
        mns = draw(st.just(SAFE_MAX_NUM_SEQS) if static else
                   st.sampled_from([None, SAFE_MAX_NUM_SEQS]))
        out["max_num_seqs"] = mns
        out["max_seqlen"] = draw(st.sampled_from(["exact", "total"]))
    return out


@st.composite
def configs(
    draw: st.DrawFn,
    *,
    caps: frozenset[str] | None = None,
    contiguous_cp: bool | None = None,
    fp8: st.SearchStrategy[Any] | None = None,
    bucket: st.SearchStrategy[int | None] | None = None,
    min_local_rows: st.SearchStrategy[int | None] | None = None,
    tp: st.SearchStrategy[int] | None = None,
    cp: st.SearchStrategy[int] | None = None,
    tail: st.SearchStrategy[str] | None = None,
    seq_align: st.SearchStrategy[str] | None = None,
    static: bool | None = None,
    labels: st.SearchStrategy[str] | None = None,
) -> dict[str, Any]:
    """PackConfig keyword arguments, never with a feature `caps` lacks (None: every feature),
    even where a strategy for it is passed. `contiguous_cp=False` keeps cp_size > 1 on zigzag;
    `static`: True always sets max_num_seqs, False never, None either."""
    has = (lambda cap: True) if caps is None else caps.__contains__
    if contiguous_cp is None:
        contiguous_cp = True
    contiguous_cp = contiguous_cp and has("contiguous")
    tp_size = draw(tp if tp is not None else sizes) if has("tensor_parallel") else 1
    cp_size = draw(cp if cp is not None else sizes)
    if cp_size > 1 and not has("zigzag") and not contiguous_cp:
        cp_size = 1  # base feature "zigzag" declined and no contiguous CP either
    layouts = ["zigzag", "contiguous"] if (contiguous_cp or cp_size == 1) else ["zigzag"]
    if cp_size > 1 and not has("zigzag"):
        layouts = ["contiguous"]
    out = {
        "tp_size": tp_size,
        "cp_size": cp_size,
        "cp_layout": draw(st.sampled_from(layouts)),
        "fp8": _draw_fp8(draw, fp8, caps),
        "bucket": draw(bucket if bucket is not None else buckets) if has("bucket") else None,
        "min_local_rows": draw(
            min_local_rows if min_local_rows is not None else min_local_rows_values
        ) if has("min_local_rows") else None,
    }
    out.update(draw(conventions(caps=caps, tail=tail, seq_align=seq_align, static=static,
                                labels=labels)))
    if caps is not None:
        fit_layout(out, caps, contiguous_cp)
    _fit_1_2(out, static, contiguous_cp)
    if caps is not None:  # the layout _fit_1_2 left gets its own convention
        fit_layout(out, caps, contiguous_cp, keep_layout=True)
    if out.get("labels") == "ignore":  # every dtype holds 0; pack_cases draws per dtype
        out["ignore_index"] = 0
    # A bucket coprime to the FP8 total alignment can make the modulus millions of rows, too
    # many for the literal reference (the plan-only test checks them): dropped.
    if out["bucket"] is not None and req.total_modulus(out) > MAX_MODULUS:
        out["bucket"] = None
    if caps is not None and fixed_bucket(caps) is not None:  # the target's only bucket
        out["bucket"] = fixed_bucket(caps)
    return out


def _fit_1_2(config: dict[str, Any], static: bool | None, contiguous: bool) -> None:
    """Keep a drawn config valid under R-ERR-14: seq_align='none' and tail='tokens' only on the
    contiguous layout or cp = 1; tail='tokens' without max_num_seqs (a static draw keeps it)."""
    narrow = config.get("seq_align") == "none" or config.get("tail") == "tokens"
    if narrow and config["cp_layout"] == "zigzag" and config["cp_size"] > 1:
        if contiguous:
            config["cp_layout"] = "contiguous"
        else:
            config["cp_size"] = 1
    if config.get("tail") == "tokens" and config.get("max_num_seqs") is not None:
        if static:
            config["tail"] = "segment" if "segment" in CONVENTION_VALUES["tail"] else "last"
        else:
            config["max_num_seqs"] = None


def fit_fixed_total(config: dict[str, Any], lengths: Any, slack: int) -> dict[str, Any]:
    """The config with fixed_total (capability `fixed_total`, never with a bucket) set to the
    smallest total the batch fits plus `slack` steps of M (R-TOTAL-7)."""
    if config.get("bucket") is not None:
        return config
    modulus = req.total_modulus(config)
    fixed = req.ceil_to(req.lower_bound(lengths, config), modulus) + slack * modulus
    return {**config, "fixed_total": max(fixed, modulus)}


def _draw_fp8(draw: st.DrawFn, given: st.SearchStrategy[Any] | None,
              caps: frozenset[str] | None) -> Any:
    """fp8 among the supported settings: `given` where passed (a value the target does not
    support becomes False), else False or True half the time, a recipe the other half."""
    values = fp8_values(caps)
    if given is not None:
        value = draw(given)
        return value if value in values else False
    if len(values) == 1:
        return False
    recipes = [v for v in values if isinstance(v, str)]
    plain = [v for v in values if not isinstance(v, str)]
    return draw(st.one_of(st.sampled_from(plain), st.sampled_from(recipes)) if recipes
                else st.sampled_from(plain))


def fit_static(config: dict[str, Any], b: int, slack: int = 0) -> dict[str, Any]:
    """The config with max_num_seqs (where set) brought down to batch size `b`: B + slack, plus
    the entry R-ERR-13 reserves for the padding segment under tail='segment'."""
    if config.get("max_num_seqs") is None:
        return config
    reserve = 1 if config.get("tail", "last") == "segment" else 0
    return {**config, "max_num_seqs": b + reserve + slack}


def rows_bound(seqlens: Any, config: dict[str, Any]) -> int:
    """An upper bound on the rows a packer builds (to keep a test within `max_rows`)."""
    return req.lower_bound(seqlens, config) + req.total_modulus(config)


MAX_MODULUS = 1 << 13


# ----------------------------------------------------------------------------------------------
# Batches (R-IN-1, R-IN-2)


@st.composite
def lengths(draw: st.DrawFn, *, max_batch: int = 64, budget: int = 3000,
            min_batch: int = 1, caps: frozenset[str] | None = None) -> tuple[int, ...]:
    """B in [min_batch, max_batch]; lengths 0, 1, short and long, within a token budget. Zero
    lengths only where `caps` declares `zero_length` (or `caps` is None); with `caps`, never all
    of them: the batch of only empty sequences has named tests of its own (`ALL_EMPTY_BATCHES`),
    so a target that mishandles it is not shrunk to it by every other property."""
    zero = caps is None or "zero_length" in caps
    low = 0 if zero else 1
    count = draw(st.integers(min_batch, max_batch))
    out = []
    left = budget
    for _ in range(count):
        kind = draw(st.sampled_from(["short", "zero", "one", "long"] if zero
                                    else ["short", "one", "long"]))
        if kind == "zero":
            out.append(0)
        elif kind == "one":
            out.append(1)
        elif kind == "long" and left >= 100:
            out.append(draw(st.integers(100, min(1500, left))))
        else:
            out.append(draw(st.integers(low, max(low, min(40, left)))))
        left -= out[-1]
    return with_a_token(out) if caps is not None else tuple(out)


def with_a_token(lengths: Any) -> tuple[int, ...]:
    """The lengths, the first one 1 where every one is 0: the batch of only empty sequences is
    judged by its named tests (`ALL_EMPTY_BATCHES`), not by every property."""
    out = tuple(int(n) for n in lengths)
    return out if any(out) or not out else (1, *out[1:])


@st.composite
def batches(draw: st.DrawFn, *, dtypes: tuple[str, ...] = DTYPES,
            trails: tuple[tuple[int, ...], ...] = TRAILS, max_batch: int = 64,
            budget: int = 3000, caps: frozenset[str] | None = None) -> Batch:
    """A batch; trailing dims only where `caps` declares `trailing_dims` (or `caps` is None)."""
    if caps is not None and "trailing_dims" not in caps:
        trails = ((),)
    return Batch(
        lengths=draw(lengths(max_batch=max_batch, budget=budget, caps=caps)),
        trail=draw(st.sampled_from(trails)),
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(st.integers(0, 2**16)),
    )


def pad_values(dtype: str) -> st.SearchStrategy[bool | int | float]:
    """pad_value exactly representable in `dtype` (R-IN-5)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.sampled_from([0, False, True, 1])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = int(info.min), int(info.max)
        ints = st.one_of(st.sampled_from([0, lo, hi, 1]), st.integers(lo, hi))
        return st.one_of(ints, ints.map(float).filter(lambda v: lo <= v <= hi and v == int(v)))
    finfo = np.finfo(dt)
    specials = [0.0, -0.0, -100, 1.5, math.nan, math.inf, -math.inf, float(finfo.max), True]
    return st.one_of(st.sampled_from(specials), st.integers(-1000, 1000))


def ignore_indices(dtype: str) -> st.SearchStrategy[int]:
    """ignore_index values `dtype` represents (R-LABEL-2): -100 (PyTorch's) where it can."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.sampled_from([0, 1])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return st.sampled_from([v for v in (-100, -1, 0, int(info.max)) if info.min <= v])
    return st.sampled_from([-100, -1, 0])


@st.composite
def pack_cases(draw: st.DrawFn, *, caps: frozenset[str], need_roll: bool | None = None,
               config: st.SearchStrategy[dict[str, Any]] | None = None,
               batch: st.SearchStrategy[Batch] | None = None) -> PackCase:
    """A valid case drawing only the features in `caps`: without `pad_value` the pad value stays
    0, without `need_roll` (when not forced) labels are never asked for; the default config and
    batch follow `caps` too (pass `configs(caps=...)` / `batches(caps=...)` when overriding)."""
    cfg = draw(config if config is not None else configs(caps=caps))
    b = draw(batch if batch is not None else batches(caps=caps))
    if cfg.get("max_num_seqs") is not None:
        cfg = fit_static(cfg, len(b.lengths), draw(st.sampled_from([0, 0, 1, 2, 5])))
    if "fixed_total" in caps and draw(st.integers(0, 3)) == 0:
        cfg = fit_fixed_total(cfg, b.lengths, draw(st.sampled_from([0, 0, 1, 3])))
    if cfg.get("labels") == "ignore":  # R-LABEL-2: an ignore_index the batch's dtype holds
        cfg = {**cfg, "ignore_index": draw(ignore_indices(b.dtype))}
    if need_roll is None:
        roll = draw(st.booleans()) if "need_roll" in caps else False
    else:
        roll = need_roll
    pad: bool | int | float = 0
    if "pad_value" in caps:
        pad = draw(pad_values(b.dtype))
    return PackCase(config=cfg, batch=b, need_roll=roll, pad_value=pad)


def zero_length_batches(dtypes: tuple[str, ...] = ("int64", "float32"),
                        caps: frozenset[str] | None = None) -> st.SearchStrategy[Batch]:
    """Batches with at least one zero-length sequence, anywhere (R-IN-2, R-ROW-3); trailing dims
    only where `caps` declares `trailing_dims` (the test itself needs `zero_length`); with
    `caps`, a real token somewhere (the batch of only empty ones: `ALL_EMPTY_BATCHES`)."""
    trails = [(), (2,)] if caps is None or "trailing_dims" in caps else [()]
    low = 0 if caps is None else 1  # a real token somewhere
    return st.builds(
        Batch,
        lengths=st.lists(st.integers(0, 12), min_size=1, max_size=8)
        .map(lambda ls: [max(ls[0], low), *ls[1:]])
        .flatmap(lambda ls: st.integers(0, len(ls)).map(lambda k: tuple(ls[:k] + [0] + ls[k:]))),
        trail=st.sampled_from(trails),
        dtype=st.sampled_from(dtypes),
        seed=st.integers(0, 100),
    )
