"""Static metadata (capability `static_metadata`, spec 1.1 R-STATIC-1..3), judged on the
target's own output, without the reference: with max_num_seqs = N the plan's arrays have N
(cu_seqlens* N + 1) entries, those past the real content zero-length at the end of the buffer;
unpack still returns the B sequences; with a bucket, max_num_seqs and max_seqlen='total', every
shape and int a compiled consumer sees takes one value over micro-batches of different B within
one bucket.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from . import requirements as req
from .compare import check_unpack_returns_batch
from .contract import segment_lengths
from .protocol import zero_length_of
from .running import META_ARRAYS, run_target
from .strategies import Batch, PackCase, batches, configs, pack_cases
from .under_test import RuleViolation, assume_declared, caps, needs, prop_settings, target

CAPS = caps()
_STATIC = configs(caps=CAPS, static=True)


def _entries(meta: dict[str, Any], key: str) -> np.ndarray:
    return np.asarray(meta[key], dtype=np.int64)


@needs("static_metadata")
@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-META-7", "R-UNPACK-1")
@prop_settings()
@example(PackCase(config={"cp_size": 2, "max_num_seqs": 5, "max_seqlen": "total"},
                  batch=Batch((3, 0, 5))))
@example(PackCase(config={"max_num_seqs": 3, "tail": "segment"}, batch=Batch((4, 4))))
@example(PackCase(config={"max_num_seqs": 1}, batch=Batch((0,))))
@given(pack_cases(caps=CAPS, need_roll=False, config=_STATIC,
                  batch=batches(caps=CAPS, max_batch=12, budget=600)))
def test_static_entries(case: PackCase) -> None:
    """N entries whatever B; entries past the B sequences zero-length (under 'segment' entry B
    is the padding segment, P = T - S, possibly 0); num_seqs = B; max_seqlen = T under 'total';
    the target's unpack with its own metadata returns the B sequences."""
    assume_declared(case)
    seqs = case.batch.arrays()
    got = run_target(case, seqs)
    config = case.config
    b = len(segment_lengths(case.batch.lengths, zero_length_of(target())))  # B' (R-META-8)
    n = int(config["max_num_seqs"])
    segment = config.get("tail", "last") == "segment"
    for rank, result in enumerate(got):
        meta = result.meta
        where = f"rank {rank}, B = {b}, max_num_seqs = {n}"
        for key, want in (("seqlens", n), ("seqlens_padded", n), ("cu_seqlens", n + 1),
                          ("cu_seqlens_padded", n + 1)):
            if key in meta and _entries(meta, key).shape != (want,):
                raise RuleViolation(f"{where}: {key} has {_entries(meta, key).size} entries, "
                                    f"spec {want}: {_entries(meta, key).tolist()}",
                                    {"R-STATIC-1"})
        cu = _entries(meta, "cu_seqlens_padded")
        padded = np.diff(cu)
        total = int(cu[-1])
        surplus = total - req.padded_sum(case.batch.lengths, config)
        tail = padded[b:]
        want_tail = np.zeros(n - b, dtype=np.int64)
        if segment:
            want_tail[0] = surplus
        if not np.array_equal(tail, want_tail):
            raise RuleViolation(f"{where}: padded entries past the real content "
                                f"{tail.tolist()}, spec {want_tail.tolist()} (tail="
                                f"{config.get('tail', 'last')!r})",
                                {"R-STATIC-1", "R-TAIL-1"} if segment else {"R-STATIC-1"})
        if "seqlens" in meta and _entries(meta, "seqlens")[b:].any():
            raise RuleViolation(f"{where}: real lengths past the B sequences "
                                f"{_entries(meta, 'seqlens').tolist()}", {"R-STATIC-1"})
        if "num_seqs" in meta and meta["num_seqs"] != b:
            raise RuleViolation(f"{where}: num_seqs {meta['num_seqs']!r}", {"R-META-7"})
        if config.get("max_seqlen") == "total" and "max_seqlen" in meta \
                and meta["max_seqlen"] != total:
            raise RuleViolation(f"{where}: max_seqlen {meta['max_seqlen']!r}, spec the "
                                f"total {total} (max_seqlen='total')", {"R-STATIC-2"})
    if "unpack" in CAPS:
        check_unpack_returns_batch("unpack", [g.rows for g in got], got[0].meta, config, seqs,
                                   rules={"R-UNPACK-1"}, count_rules={"R-STATIC-1", "R-UNPACK-1"})


@st.composite
def _bucket_runs(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[int, ...]]]:
    """A config with a bucket, max_num_seqs and max_seqlen='total', and 2 to 4 batches of
    different B whose padded sums S all fall in the first bucket (0 < S <= M: T = M)."""
    config = draw(configs(caps=CAPS, static=True, bucket=st.integers(1, 600),
                          min_local_rows=st.none()))
    config = {**config, "max_num_seqs": draw(st.integers(3, 12)), "max_seqlen": "total"}
    m, a = req.total_modulus(config), req.sequence_align(config)
    reserve = 1 if config.get("tail", "last") == "segment" else 0
    sizes = draw(st.lists(st.integers(1, config["max_num_seqs"] - reserve), min_size=2,
                          max_size=4, unique=True))
    runs = []
    for b in sizes:
        lens, used = [], 0
        for _ in range(b):
            room = (m - used) // a * a  # the padded length a sequence may still take
            low = 0 if "zero_length" in CAPS else 1
            if room < low:
                break
            n = draw(st.integers(low, max(low, min(room, 300))))
            lens.append(n)
            used += req.ceil_to(n, a)
        assume(len(lens) == b and used > 0)
        runs.append(tuple(lens))
    return config, runs


@needs("static_metadata", "bucket")
@pytest.mark.rules("R-STATIC-3", "R-STATIC-1", "R-STATIC-2")
@prop_settings(0.5)
@example(({"tp_size": 1, "cp_size": 2, "cp_layout": "zigzag", "fp8": False, "bucket": 64,
           "min_local_rows": None, "max_num_seqs": 8, "max_seqlen": "total"},
          [(3,), (5, 7, 1), (2, 2, 2, 2, 2, 2, 2, 2)]))
@given(_bucket_runs())
def test_one_graph_key_per_bucket(run: tuple[dict[str, Any], list[tuple[int, ...]]]) -> None:
    """Every array's shape and dtype and every int (total, local_rows, max_seqlen) a consumer
    sees take one value over micro-batches of different B in one bucket; the total is M, the
    bucket's first multiple (num_seqs, which only says how many are real, is not compared)."""
    config, runs = run
    assume_declared(config=config, lengths=[n for lens in runs for n in lens])
    keys: dict[tuple[Any, ...], list[int]] = {}
    totals: set[int] = set()
    for lens in runs:
        case = PackCase(config=config, batch=Batch(lens))
        got = run_target(case, case.batch.arrays())
        for rank, result in enumerate(got):
            meta = result.meta
            key = (rank, result.rows.shape, str(result.rows.dtype), result.pos.shape,
                   *((k, np.asarray(meta[k]).shape, str(np.asarray(meta[k]).dtype))
                     for k in META_ARRAYS if k in meta),
                   *((k, meta[k]) for k in ("total", "local_rows", "max_seqlen") if k in meta))
            keys.setdefault(key, []).append(len(lens))
            totals.add(int(np.asarray(meta["cu_seqlens_padded"])[-1]))
    per_rank = {key[0] for key in keys}
    if len(keys) != len(per_rank):
        shown = "; ".join(f"B in {bs}: {key[1:]}" for key, bs in list(keys.items())[:3])
        raise RuleViolation(f"{config}: {len(keys)} distinct shape/int keys over "
                            f"{len(per_rank)} ranks for batches of B = "
                            f"{[len(r) for r in runs]}: {shown}", {"R-STATIC-3"})
    m = req.total_modulus(config)
    if totals != {m}:
        raise RuleViolation(f"{config}: totals {sorted(totals)}, spec M = {m} (0 < S <= M)",
                            {"R-STATIC-3"})
