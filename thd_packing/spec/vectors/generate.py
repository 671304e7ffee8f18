"""Generate the golden vectors in spec/vectors/ from the reference.

Run from the repository root: `python -m spec.vectors.generate` (writes the JSON files) or
`python -m spec.vectors.generate --check` (exits 1 if any checked-in file differs).
`tests/spec/test_vectors.py` runs the check, so a change of behaviour must come with new vectors.

Each vector is one call (config, plan, pack on every rank, unpack, or engine resolution) with its
input and either its full output or the expected error class. Row values are canonical (token j
of sequence i is `1000 * (i + 1) + j`, shaped and cast per the vector's dtype). Unspecified slots
are written as null.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from thd_packing import reference as ref
from thd_packing.spec.examples import canonical_values

HERE = Path(__file__).resolve().parent
INT32_MAX = 2**31 - 1
# Spec 1.1.0's fields: a vector whose config uses one (or an fp8 recipe name) also records
# plan.num_seqs (R-META-7); the 1.0 vectors stay byte-identical.
FIELDS_1_1 = ("tail", "seq_align", "max_num_seqs", "max_seqlen")
# Spec 1.2.0's fields: a vector whose config uses one also records each rank's loss mask
# (R-LABEL-3) when it packs labels.
FIELDS_1_2 = ("fixed_total", "labels", "ignore_index")


def uses_1_2(config: dict[str, Any]) -> bool:
    return (any(field in config for field in FIELDS_1_2)
            or config.get("seq_align") == "none" or config.get("tail") == "tokens")


def uses_1_1(config: dict[str, Any]) -> bool:
    return (any(field in config for field in FIELDS_1_1) or isinstance(config.get("fp8"), str)
            or uses_1_2(config))


def canonical_batch(seqlens: list[int], trail: list[int], dtype: str) -> list[np.ndarray]:
    """Canonical values, broadcast over trailing dims (element e adds 100000 * e)."""
    width = int(np.prod(trail)) if trail else 1
    batch = []
    for length, tokens in zip(seqlens, canonical_values(seqlens), strict=True):
        base = np.array(tokens, dtype=np.int64)
        values = base[:, None] + 100000 * np.arange(width, dtype=np.int64)[None, :]
        values = values.reshape((length, *trail))
        if dtype == "bool":
            batch.append((values % 3 == 0).astype(bool))
        else:
            batch.append(values.astype(dtype))
    return batch


def masked_batch(seqs: list[np.ndarray], mask: list[list[bool]], fill: int = -1) -> np.ndarray:
    """R-IN-7's padded form of `seqs`: row i holds sequence i at `mask[i]`'s True entries and
    `fill` elsewhere (never read)."""
    rows = np.asarray(mask, dtype=bool)
    x = np.full((*rows.shape, *seqs[0].shape[1:]), fill, dtype=seqs[0].dtype)
    for i, seq in enumerate(seqs):
        x[i, rows[i]] = seq
    return x


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _plan_dict(plan: ref.Plan, config: dict[str, Any]) -> dict[str, Any]:
    out = {
        "seqlens": plan.seqlens.tolist(),
        "seqlens_padded": plan.seqlens_padded.tolist(),
        "cu_seqlens": plan.cu_seqlens.tolist(),
        "cu_seqlens_padded": plan.cu_seqlens_padded.tolist(),
        "max_seqlen": plan.max_seqlen,
        "total": plan.total,
        "local_rows": plan.local_rows,
    }
    if uses_1_1(config):
        out["num_seqs"] = plan.num_seqs
    return out


def _masked(values: np.ndarray, specified: np.ndarray) -> list[Any]:
    out = []
    for value, keep in zip(values.tolist(), specified.tolist(), strict=True):
        out.append(value if keep else None)
    return out


def pack_vector(
    name: str,
    rules: list[str],
    config: dict[str, Any],
    seqlens: list[int],
    *,
    trail: list[int] | None = None,
    dtype: str = "int64",
    need_roll: bool = False,
    pad_value: Any = 0,
    mask: list[list[bool]] | None = None,
    derived: bool = False,
) -> dict[str, Any]:
    """A valid pack on every rank, with the plan and the unpack of all ranks; with `mask`, of
    the mask form (R-IN-7: `masked_batch` and the mask; `seqlens` are its row counts); with
    `derived`, the segments position ids derive over the ranks in buffer order (R-PID-1: cp = 1
    or contiguous, every position id specified)."""
    trail = trail or []
    cfg = ref.PackConfig(**config)
    seqs = canonical_batch(seqlens, trail, dtype)
    for s in seqs:
        s.setflags(write=False)  # R-IN-6: the reference packs read-only inputs
    if mask is not None:
        assert [sum(row) for row in mask] == seqlens, "seqlens are the mask's row counts"
    ranks = []
    shards = []
    ids: list[np.ndarray] = []
    for rank in range(cfg.cp_size):
        if mask is None:
            rows, position_ids, plan = ref.pack_thd(
                seqs, cfg, rank, need_roll=need_roll, pad_value=pad_value
            )
        else:
            rows, position_ids, plan = ref.pack_masked(
                masked_batch(seqs, mask), np.asarray(mask, dtype=bool), cfg, rank,
                need_roll=need_roll, pad_value=pad_value
            )
        rows_spec, pos_spec = ref.specified_slots(plan, cfg, rank, need_roll)
        ranks.append(
            {"rows": _masked(rows, rows_spec), "position_ids": _masked(position_ids, pos_spec)}
        )
        if need_roll and uses_1_2(config):
            ranks[-1]["loss_mask"] = ref.loss_mask(plan, cfg, rank).tolist()  # R-LABEL-3
        shards.append(rows)
        ids.append(position_ids)
        assert pos_spec.all() or not derived
    vector: dict[str, Any] = {
        "name": name,
        "call": "pack",
        "rules": rules,
        "config": config,
        "seqlens": seqlens,
        "trail": trail,
        "dtype": dtype,
        "need_roll": need_roll,
        "pad_value": pad_value,
        "plan": _plan_dict(plan, config),
        "ranks": ranks,
    }
    if mask is not None:
        vector["mask"] = mask
    if derived:
        assert cfg.cp_size == 1 or cfg.cp_layout == "contiguous"
        vector["derived_cu_seqlens"] = ref.segments_from_position_ids(np.concatenate(ids))
    if not need_roll:
        unpacked = ref.unpack_thd(shards, plan, cfg)
        assert all(np.array_equal(a, b) for a, b in zip(unpacked, seqs, strict=True))
        vector["unpack_round_trip"] = True
    return vector


def error_vector(
    name: str, rules: list[str], call: str, error: type[BaseException], **inputs: Any
) -> dict[str, Any]:
    """A rejected call: the reference must raise `error` (checked here before writing)."""
    vector = {"name": name, "call": call, "rules": rules, **inputs, "error": error.__name__}
    try:
        run_call(vector)
    except error:
        return vector
    raise AssertionError(f"{name}: the reference did not raise {error.__name__}")


def run_call(vector: dict[str, Any]) -> Any:
    """Execute a vector's call on the reference (used for error vectors)."""
    call = vector["call"]
    if call == "config":
        return ref.PackConfig(**vector["config"])
    if call == "engine":
        return ref.resolve_engine_config(**vector["engine"])
    if call == "plan":
        return ref.plan_thd(vector["seqlens"], ref.PackConfig(**vector.get("config", {})))
    cfg = ref.PackConfig(**vector.get("config", {}))
    if call == "pack" and "mask" in vector:  # R-IN-7: values [B, S] int64, the mask as given
        return ref.pack_masked(np.array(vector["values"], dtype=np.int64),
                               np.array(vector["mask"], dtype=vector["mask_dtype"]), cfg,
                               vector.get("cp_rank", 0))
    if call == "pack":
        seqs = [np.array(s, dtype=d) for s, d in zip(vector["seqs"], vector["dtypes"], strict=True)]
        return ref.pack_thd(
            seqs,
            cfg,
            vector.get("cp_rank", 0),
            need_roll=vector.get("need_roll", False),
            pad_value=vector.get("pad_value", 0),
        )
    if call == "unpack":
        plan = ref.plan_thd(vector["seqlens"], cfg)
        shards = [np.zeros(rows, dtype=np.int64) for rows in vector["shard_rows"]]
        return ref.unpack_thd(shards, plan, cfg)
    raise ValueError(f"unknown call {call!r}")


def engine_vector(name: str, rules: list[str], engine: dict[str, Any]) -> dict[str, Any]:
    cfg = ref.resolve_engine_config(**engine)
    resolved = {
        "tp_size": cfg.tp_size,
        "cp_size": cfg.cp_size,
        "cp_layout": cfg.cp_layout,
        "fp8": cfg.fp8,
        "bucket": cfg.bucket,
        "min_local_rows": cfg.min_local_rows,
    }
    return {"name": name, "call": "engine", "rules": rules, "engine": engine, "config": resolved}


def plan_vector(
    name: str, rules: list[str], config: dict[str, Any], seqlens: list[int]
) -> dict[str, Any]:
    plan = ref.plan_thd(seqlens, ref.PackConfig(**config))
    return {
        "name": name,
        "call": "plan",
        "rules": rules,
        "config": config,
        "seqlens": seqlens,
        "plan": _plan_dict(plan, config),
    }


def build() -> list[dict[str, Any]]:
    """Every vector; together their `rules` cover every rule the reference implements."""
    shard = ["R-SHARD-4", "R-ROW-1", "R-ROW-2", "R-POS-1", "R-POS-2", "R-POS-3", "R-UNPACK-1",
             "R-UNPACK-2", "R-UNPACK-3", "R-META-1", "R-META-2", "R-META-3", "R-META-4",
             "R-META-5", "R-META-6", "R-ALIGN-1", "R-ALIGN-3", "R-ALIGN-4", "R-IN-1", "R-IN-3",
             "R-IN-4"]
    roll = ["R-ROLL-1", "R-ROLL-2", "R-ROLL-3", "R-ROW-2", "R-POS-3"]
    v: list[dict[str, Any]] = []
    # Layouts and sizes.
    v.append(pack_vector("cp1-tp1", shard + ["R-SHARD-1", "R-IN-6"], {}, [3, 1, 4]))
    v.append(pack_vector("cp1-tp3", shard + ["R-SHARD-1"], {"tp_size": 3}, [5, 2]))
    v.append(pack_vector("zigzag-cp2", shard + ["R-SHARD-2"], {"cp_size": 2}, [3, 5, 1]))
    v.append(pack_vector("zigzag-cp3-tp2", shard + ["R-SHARD-2"],
                         {"cp_size": 3, "tp_size": 2}, [7, 13]))
    v.append(pack_vector("zigzag-cp4", shard + ["R-SHARD-2"], {"cp_size": 4}, [9, 2, 16]))
    v.append(pack_vector("contiguous-cp2", shard + ["R-SHARD-3"],
                         {"cp_size": 2, "cp_layout": "contiguous"}, [3, 5]))
    v.append(pack_vector("contiguous-cp3-tp2", shard + ["R-SHARD-3"],
                         {"cp_size": 3, "tp_size": 2, "cp_layout": "contiguous"}, [7, 1, 4]))
    v.append(pack_vector("contiguous-cp1", shard + ["R-SHARD-1"],
                         {"cp_layout": "contiguous"}, [2, 3]))
    # Total-level stages.
    total = ["R-TOTAL-1", "R-TOTAL-2", "R-TOTAL-3", "R-TOTAL-4", "R-TOTAL-5", "R-META-5"]
    v.append(plan_vector("bucket-513", total, {"bucket": 512}, [513]))
    v.append(pack_vector("bucket-cp2", shard + total, {"cp_size": 2, "bucket": 16}, [3, 5]))
    v.append(pack_vector("bucket-not-multiple-of-align", shard + total,
                         {"cp_size": 2, "bucket": 6}, [3]))
    v.append(pack_vector("bucket-tp2-odd", shard + total, {"tp_size": 2, "bucket": 3}, [1]))
    v.append(plan_vector("fp8-cp1", ["R-ALIGN-2"] + total, {"fp8": True}, [1, 17]))
    v.append(plan_vector("fp8-cp2-tp2", ["R-ALIGN-2"] + total,
                         {"fp8": True, "cp_size": 2, "tp_size": 2}, [20, 5, 0]))
    v.append(plan_vector("fp8-bucket", ["R-ALIGN-2"] + total,
                         {"fp8": True, "cp_size": 2, "bucket": 1000}, [300]))
    v.append(plan_vector("min-local-rows-128", total, {"min_local_rows": 128}, [100]))
    v.append(pack_vector("min-local-rows-rounded", shard + total,
                         {"cp_size": 2, "min_local_rows": 3}, [1]))
    v.append(plan_vector("fp8-min-local-rows", ["R-ALIGN-2"] + total,
                         {"fp8": True, "min_local_rows": 200}, [1]))
    v.append(plan_vector("everything", ["R-ALIGN-2"] + total,
                         {"tp_size": 3, "cp_size": 5, "fp8": True, "bucket": 700,
                          "min_local_rows": 900}, [1, 2000, 33]))
    # Contents.
    v.append(pack_vector("need-roll-cp1", shard + roll, {"tp_size": 2}, [1, 2, 5],
                         need_roll=True))
    v.append(pack_vector("need-roll-zigzag-cp2", shard + roll, {"cp_size": 2}, [4, 3, 8],
                         need_roll=True, pad_value=-100))
    v.append(pack_vector("need-roll-contiguous-cp2", shard + roll,
                         {"cp_size": 2, "cp_layout": "contiguous"}, [3, 5], need_roll=True))
    v.append(pack_vector("pad-value", shard + ["R-IN-5"], {"cp_size": 2}, [3], pad_value=-7))
    v.append(pack_vector("trailing-float32", shard, {"cp_size": 2, "tp_size": 2}, [3, 6],
                         trail=[2, 3], dtype="float32", pad_value=float("-inf")))
    v.append(pack_vector("bool-mask", shard, {"cp_size": 2}, [3, 2], dtype="bool",
                         pad_value=False))
    v.append(pack_vector("int8-trailing", shard, {"cp_size": 3, "cp_layout": "contiguous"},
                         [2, 2], trail=[2], dtype="int8", pad_value=-1))
    zero = ["R-IN-2", "R-ROW-3", "R-ALIGN-3"]
    v.append(pack_vector("zero-length-middle", shard + roll + zero, {"cp_size": 2},
                         [4, 0, 2], need_roll=True))
    v.append(pack_vector("zero-length-first", shard + zero, {"cp_size": 2}, [0, 4]))
    v.append(pack_vector("zero-length-last-bucket", shard + zero + total,
                         {"cp_size": 2, "bucket": 8}, [2, 0]))
    v.append(pack_vector("zero-length-only", shard + zero, {"cp_size": 2}, [0]))
    v.append(pack_vector("zero-length-roll-first", shard + roll + zero, {"cp_size": 2},
                         [0, 4], need_roll=True))
    # Engine-level configuration.
    eng = ["R-ENGINE-1", "R-ENGINE-7"]
    v.append(engine_vector("engine-default", eng, {}))
    v.append(engine_vector("engine-bucket", eng, {"pad_to_length": True, "cp_size": 2}))
    v.append(engine_vector("engine-bucket-off", eng,
                           {"pad_to_length": False, "pad_to_length_bucket": 64}))
    v.append(engine_vector("engine-dcp-no-bucket", eng + ["R-ENGINE-3"],
                           {"dynamic_context_parallel": True}))
    v.append(error_vector("engine-dcp-no-rmpad", ["R-ENGINE-2"], "engine", ValueError,
                          engine={"dynamic_context_parallel": True, "use_remove_padding": False}))
    v.append(error_vector("engine-dcp-bucket", ["R-ENGINE-3"], "engine", NotImplementedError,
                          engine={"dynamic_context_parallel": True, "pad_to_length": True}))
    v.append(error_vector("engine-bucket-no-rmpad", ["R-ENGINE-4"], "engine", ValueError,
                          engine={"pad_to_length": True, "use_remove_padding": False}))
    v.append(error_vector("engine-topk", ["R-ENGINE-5"], "engine", RuntimeError,
                          engine={"pad_to_length": True, "distillation_use_topk": True}))
    v.append(error_vector("engine-router-replay", ["R-ENGINE-6"], "engine", RuntimeError,
                          engine={"pad_to_length": True, "router_replay": True}))
    v.append(error_vector("engine-flag-type", ["R-ENGINE-1"], "engine", TypeError,
                          engine={"pad_to_length": 1}))
    v.append(error_vector("engine-bucket-zero", ["R-ENGINE-1", "R-ERR-3"], "engine", ValueError,
                          engine={"pad_to_length_bucket": 0}))
    # Bad input.
    bad_config = [
        ("tp-zero", {"tp_size": 0}, ValueError, ["R-ERR-2"]),
        ("tp-negative", {"tp_size": -2}, ValueError, ["R-ERR-2"]),
        ("tp-bool", {"tp_size": True}, TypeError, ["R-ERR-1"]),
        ("tp-float", {"tp_size": 2.0}, TypeError, ["R-ERR-1"]),
        ("cp-zero", {"cp_size": 0}, ValueError, ["R-ERR-2"]),
        ("cp-str", {"cp_size": "2"}, TypeError, ["R-ERR-1"]),
        ("layout-unknown", {"cp_layout": "ring"}, ValueError, ["R-ERR-4"]),
        ("layout-type", {"cp_layout": 1}, TypeError, ["R-ERR-1"]),
        ("fp8-int", {"fp8": 1}, TypeError, ["R-ERR-1"]),
        ("bucket-bool", {"bucket": True}, TypeError, ["R-ERR-3"]),
        ("bucket-float", {"bucket": 512.0}, TypeError, ["R-ERR-3"]),
        ("bucket-str", {"bucket": "512"}, TypeError, ["R-ERR-3"]),
        ("bucket-zero", {"bucket": 0}, ValueError, ["R-ERR-3"]),
        ("bucket-negative", {"bucket": -512}, ValueError, ["R-ERR-3"]),
        ("min-local-rows-zero", {"min_local_rows": 0}, ValueError, ["R-ERR-2"]),
        ("min-local-rows-bool", {"min_local_rows": True}, TypeError, ["R-ERR-1"]),
    ]
    for name, config, error, rules in bad_config:
        v.append(error_vector(f"reject-{name}", rules, "config", error, config=config))
    v.append(error_vector("reject-negative-length", ["R-ERR-6"], "plan", ValueError,
                          seqlens=[3, -1]))
    v.append(error_vector("reject-float-length", ["R-ERR-1"], "plan", TypeError,
                          seqlens=[3.0]))
    v.append(error_vector("reject-empty-batch-plan", ["R-ERR-7"], "plan", ValueError, seqlens=[]))
    v.append(error_vector("reject-total-int32", ["R-ERR-8", "R-TOTAL-6"], "plan", ValueError,
                          config={"tp_size": 2}, seqlens=[INT32_MAX]))
    v.append(error_vector("reject-sum-int32", ["R-ERR-8", "R-TOTAL-6"], "plan", ValueError,
                          seqlens=[2**30, 2**30]))
    v.append(error_vector("reject-length-int32", ["R-ERR-8"], "plan", ValueError,
                          seqlens=[2**31]))
    pack_errors: list[tuple[str, dict[str, Any], dict[str, Any], type[Exception], list[str]]] = [
        ("cp-rank-high", {"cp_size": 2}, {"cp_rank": 2}, ValueError, ["R-ERR-5"]),
        ("cp-rank-negative", {"cp_size": 2}, {"cp_rank": -1}, ValueError, ["R-ERR-5"]),
        ("cp-rank-float", {"cp_size": 2}, {"cp_rank": 1.0}, TypeError, ["R-ERR-1"]),
        ("need-roll-int", {}, {"need_roll": 1}, TypeError, ["R-ERR-1"]),
        ("pad-value-str", {}, {"pad_value": "0"}, TypeError, ["R-ERR-1"]),
        ("pad-value-fraction", {}, {"pad_value": 0.5}, ValueError, ["R-ERR-10", "R-IN-5"]),
        ("pad-value-range", {}, {"pad_value": 2**63}, ValueError, ["R-ERR-10", "R-IN-5"]),
    ]
    for name, config, call_args, error, rules in pack_errors:
        v.append(error_vector(f"reject-{name}", rules, "pack", error, config=config,
                              seqs=[[1, 2, 3]], dtypes=["int64"], **call_args))
    v.append(error_vector("reject-pad-value-int8", ["R-ERR-10", "R-IN-5"], "pack", ValueError,
                          seqs=[[1, 2]], dtypes=["int8"], pad_value=300))
    v.append(error_vector("reject-pad-value-bool", ["R-ERR-10", "R-IN-5"], "pack", ValueError,
                          seqs=[[True]], dtypes=["bool"], pad_value=2))
    v.append(error_vector("reject-pad-value-float16", ["R-ERR-10", "R-IN-5"], "pack",
                          ValueError, seqs=[[1.0]], dtypes=["float16"], pad_value=1e6))
    v.append(error_vector("reject-empty-batch", ["R-ERR-7"], "pack", ValueError,
                          seqs=[], dtypes=[]))
    v.append(error_vector("reject-trailing-mismatch", ["R-ERR-9"], "pack", ValueError,
                          seqs=[[[1, 2]], [[1, 2, 3]]], dtypes=["int64", "int64"]))
    v.append(error_vector("reject-dtype-mismatch", ["R-ERR-9"], "pack", TypeError,
                          seqs=[[1], [2]], dtypes=["int64", "int32"]))
    v.append(error_vector("reject-scalar-sequence", ["R-ERR-9"], "pack", ValueError,
                          seqs=[5], dtypes=["int64"]))
    v.append(error_vector("reject-unpack-shard-count", ["R-ERR-11"], "unpack", ValueError,
                          config={"cp_size": 2}, seqlens=[4], shard_rows=[2]))
    v.append(error_vector("reject-unpack-shard-rows", ["R-ERR-11"], "unpack", ValueError,
                          config={"cp_size": 2}, seqlens=[4], shard_rows=[2, 3]))
    v += mask_form()
    v += conventions_1_1(shard, roll, total)
    v += conventions_1_2(shard, roll, total)
    return [{key: _jsonable(value) for key, value in vector.items()} for vector in v]


def conventions_1_1(
    shard: list[str], roll: list[str], total: list[str]
) -> list[dict[str, Any]]:
    """Spec 1.1.0: tail, seq_align, FP8 recipes, static metadata, and their rejections."""
    meta = ["R-META-7", "R-IN-3"]
    tail = ["R-TAIL-1", "R-TAIL-2"] + meta
    static = ["R-STATIC-1", "R-STATIC-2", "R-STATIC-3"] + meta
    fp8 = ["R-FP8-1", "R-ALIGN-2", "R-TOTAL-1", "R-TOTAL-2"] + meta
    align = ["R-ALIGN-5", "R-ALIGN-2", "R-TOTAL-2"] + meta
    v: list[dict[str, Any]] = []
    # tail="segment" (R-TAIL-1, R-TAIL-2), with each layout, need_roll and min_local_rows.
    v.append(pack_vector("tail-segment-zigzag-cp2", shard + total + tail,
                         {"cp_size": 2, "bucket": 16, "tail": "segment"}, [3, 5, 1]))
    v.append(pack_vector("tail-segment-roll", shard + roll + tail,
                         {"cp_size": 2, "bucket": 32, "tail": "segment"}, [4, 3],
                         need_roll=True, pad_value=-100))
    v.append(pack_vector("tail-segment-contiguous-cp3", shard + total + tail,
                         {"cp_size": 3, "cp_layout": "contiguous", "bucket": 12,
                          "tail": "segment"}, [2, 5]))
    v.append(pack_vector("tail-segment-min-local-rows", shard + total + tail,
                         {"cp_size": 2, "min_local_rows": 6, "tail": "segment"}, [0, 1]))
    v.append(pack_vector("tail-segment-trailing-float32", shard + tail,
                         {"tp_size": 2, "bucket": 8, "tail": "segment"}, [3], trail=[2],
                         dtype="float32", pad_value=-2.5))
    v.append(plan_vector("tail-segment-absent", tail, {"cp_size": 2, "tail": "segment"}, [3, 5]))
    # seq_align="cp" (R-ALIGN-5): tp on the total only.
    v.append(pack_vector("seq-align-cp-zigzag", shard + total + align,
                         {"tp_size": 4, "cp_size": 2, "seq_align": "cp"}, [3, 5, 0]))
    v.append(pack_vector("seq-align-cp-contiguous", shard + total + align,
                         {"tp_size": 2, "cp_size": 3, "cp_layout": "contiguous",
                          "seq_align": "cp"}, [7, 1, 4]))
    v.append(pack_vector("seq-align-cp-tail-segment", shard + total + align + tail,
                         {"tp_size": 2, "cp_size": 2, "seq_align": "cp", "tail": "segment",
                          "bucket": 24}, [3, 9]))
    v.append(plan_vector("seq-align-tp-cp-explicit", align, {"tp_size": 4, "cp_size": 2,
                                                              "seq_align": "tp_cp"}, [3, 5]))
    # FP8 recipes (R-FP8-1, R-TOTAL-1).
    v.append(plan_vector("fp8-tensor", fp8, {"tp_size": 2, "cp_size": 2, "fp8": "tensor"},
                         [20, 5]))
    v.append(plan_vector("fp8-mxfp8", fp8 + ["R-ALIGN-5"],
                         {"tp_size": 2, "cp_size": 2, "seq_align": "cp", "fp8": "mxfp8"},
                         [20, 5]))
    v.append(plan_vector("fp8-block", fp8, {"tp_size": 2, "fp8": "block"}, [5, 40]))
    v.append(plan_vector("fp8-nvfp4", fp8, {"cp_size": 2, "fp8": "nvfp4"}, [3]))
    v.append(plan_vector("fp8-true-seq-align-cp", fp8 + ["R-ALIGN-5"],
                         {"tp_size": 2, "cp_size": 2, "seq_align": "cp", "fp8": True}, [20, 5]))
    v.append(pack_vector("fp8-mxfp8-pack", shard + fp8,
                         {"tp_size": 2, "cp_size": 2, "fp8": "mxfp8", "tail": "segment"},
                         [5, 2]))
    # Static metadata (R-STATIC-1..3).
    v.append(pack_vector("max-num-seqs-last", shard + total + static,
                         {"bucket": 16, "max_num_seqs": 4}, [3, 5]))
    v.append(pack_vector("max-num-seqs-segment", shard + total + static + tail,
                         {"cp_size": 2, "bucket": 16, "tail": "segment", "max_num_seqs": 4},
                         [3, 5]))
    v.append(plan_vector("max-num-seqs-segment-empty", static + tail,
                         {"cp_size": 2, "tail": "segment", "max_num_seqs": 3}, [3, 5]))
    v.append(plan_vector("max-num-seqs-exact-fit", static,
                         {"cp_size": 2, "max_num_seqs": 3}, [3, 5, 2]))
    v.append(plan_vector("max-seqlen-total", static + ["R-META-4"],
                         {"bucket": 16, "max_seqlen": "total"}, [3, 5]))
    v.append(pack_vector("static-zero-total", shard + static,
                         {"cp_size": 2, "max_num_seqs": 3, "max_seqlen": "total"}, [0]))
    v.append(pack_vector("static-everything", shard + total + static + tail + fp8 + align,
                         {"tp_size": 2, "cp_size": 2, "fp8": "mxfp8", "bucket": 32,
                          "min_local_rows": 8, "tail": "segment", "seq_align": "cp",
                          "max_num_seqs": 5, "max_seqlen": "total"}, [3, 0, 7]))
    v.append(pack_vector("static-roll-contiguous", shard + roll + static + tail,
                         {"cp_size": 2, "cp_layout": "contiguous", "bucket": 12,
                          "tail": "segment", "max_num_seqs": 4, "max_seqlen": "total"},
                         [4, 1], need_roll=True, pad_value=-1))
    # Rejections (R-ERR-1, R-ERR-12, R-ERR-13).
    bad_config = [
        ("tail-none", {"tail": None}, TypeError, ["R-ERR-1"]),
        ("tail-unknown", {"tail": "first"}, ValueError, ["R-ERR-12"]),
        ("seq-align-int", {"seq_align": 2}, TypeError, ["R-ERR-1"]),
        ("seq-align-unknown", {"seq_align": "tp"}, ValueError, ["R-ERR-12"]),
        ("max-seqlen-int", {"max_seqlen": 4096}, TypeError, ["R-ERR-1"]),
        ("max-seqlen-unknown", {"max_seqlen": "bucket"}, ValueError, ["R-ERR-12"]),
        ("fp8-none", {"fp8": None}, TypeError, ["R-ERR-1"]),
        ("fp8-unknown-recipe", {"fp8": "True"}, ValueError, ["R-ERR-12"]),
        ("fp8-recipe-case", {"fp8": "MXFP8"}, ValueError, ["R-ERR-12"]),
        ("max-num-seqs-zero", {"max_num_seqs": 0}, ValueError, ["R-ERR-12"]),
        ("max-num-seqs-above-int32", {"max_num_seqs": 2**31}, ValueError, ["R-ERR-12"]),
        ("max-num-seqs-bool", {"max_num_seqs": True}, TypeError, ["R-ERR-1"]),
        ("max-num-seqs-float", {"max_num_seqs": 4.0}, TypeError, ["R-ERR-1"]),
    ]
    for name, config, error, rules in bad_config:
        v.append(error_vector(f"reject-{name}", rules, "config", error, config=config))
    v.append(error_vector("reject-too-many-sequences", ["R-ERR-13"], "plan", ValueError,
                          config={"max_num_seqs": 2}, seqlens=[1, 2, 3]))
    v.append(error_vector("reject-too-many-sequences-segment", ["R-ERR-13"], "plan", ValueError,
                          config={"tail": "segment", "max_num_seqs": 2}, seqlens=[0, 0]))
    v.append(error_vector("reject-too-many-sequences-pack", ["R-ERR-13"], "pack", ValueError,
                          config={"cp_size": 2, "max_num_seqs": 1}, seqs=[[1, 2], [3]],
                          dtypes=["int64", "int64"]))
    return v


def conventions_1_2(
    shard: list[str], roll: list[str], total: list[str]
) -> list[dict[str, Any]]:
    """Spec 1.2.0: seq_align="none", fixed_total, tail="tokens", labels="ignore", the loss mask,
    position-id boundaries, and their rejections."""
    meta = ["R-META-7", "R-IN-3", "R-POS-4"]
    none = ["R-ALIGN-6", "R-ALIGN-2", "R-TOTAL-2"] + meta
    fixed = ["R-TOTAL-7"] + meta
    tokens = ["R-TAIL-3", "R-TAIL-4", "R-PID-1", "R-PID-2", "R-PID-3"] + meta
    labels = ["R-LABEL-1", "R-LABEL-2", "R-LABEL-3", "R-CONSUMER-15"] + meta
    v: list[dict[str, Any]] = []
    # seq_align="none" (R-ALIGN-6): the contiguous layout and cp = 1.
    v.append(pack_vector("seq-align-none-contiguous-cp2", shard + total + none + ["R-SHARD-3"],
                         {"cp_size": 2, "cp_layout": "contiguous", "seq_align": "none"},
                         [1, 1]))
    v.append(pack_vector("seq-align-none-contiguous-cp3-tp2", shard + total + none,
                         {"tp_size": 2, "cp_size": 3, "cp_layout": "contiguous",
                          "seq_align": "none", "tail": "segment"}, [7, 0, 4], derived=True))
    v.append(pack_vector("seq-align-none-cp1-zigzag", shard + total + none,
                         {"tp_size": 4, "seq_align": "none"}, [3, 2]))
    v.append(plan_vector("seq-align-none-fp8", none + ["R-FP8-1", "R-TOTAL-1"],
                         {"tp_size": 2, "cp_size": 2, "cp_layout": "contiguous",
                          "seq_align": "none", "fp8": True}, [20, 5]))
    v.append(plan_vector("seq-align-none-mxfp8-min-local-rows", none + ["R-TOTAL-3"],
                         {"tp_size": 2, "cp_size": 4, "cp_layout": "contiguous",
                          "seq_align": "none", "fp8": "mxfp8", "min_local_rows": 300}, [5]))
    # fixed_total (R-TOTAL-7).
    v.append(pack_vector("fixed-total-zigzag-cp2", shard + total + fixed,
                         {"cp_size": 2, "fixed_total": 24}, [3, 5]))
    v.append(pack_vector("fixed-total-segment-static", shard + fixed + ["R-TAIL-1", "R-STATIC-1",
                         "R-STATIC-2", "R-STATIC-3"],
                         {"cp_size": 2, "fixed_total": 16, "tail": "segment", "max_num_seqs": 4,
                          "max_seqlen": "total"}, [3, 0, 2]))
    v.append(plan_vector("fixed-total-exact-fit", fixed, {"tp_size": 2, "fixed_total": 8},
                         [3, 4]))
    v.append(plan_vector("fixed-total-min-local-rows", fixed + ["R-TOTAL-3"],
                         {"cp_size": 2, "cp_layout": "contiguous", "fixed_total": 64,
                          "min_local_rows": 32}, [1]))
    # tail="tokens" (R-TAIL-3, R-TAIL-4).
    v.append(pack_vector("tail-tokens-cp1", shard + total + tokens,
                         {"bucket": 8, "tail": "tokens"}, [3, 2], pad_value=-1, derived=True))
    v.append(pack_vector("tail-tokens-contiguous-cp2", shard + total + tokens + none,
                         {"cp_size": 2, "cp_layout": "contiguous", "seq_align": "none",
                          "tail": "tokens", "bucket": 12}, [5, 0, 2], derived=True))
    v.append(pack_vector("tail-tokens-zero-length", shard + tokens + ["R-IN-2", "R-META-8"],
                         {"tp_size": 2, "seq_align": "none", "tail": "tokens",
                          "min_local_rows": 6}, [0, 1, 0],
                         derived=True))
    v.append(pack_vector("tail-tokens-roll", shard + roll + tokens,
                         {"bucket": 8, "tail": "tokens"}, [3, 2], need_roll=True,
                         pad_value=-100))
    # labels="ignore" (R-LABEL-1..3).
    v.append(pack_vector("labels-ignore-cp1", shard + labels, {"tp_size": 2, "labels": "ignore"},
                         [3, 2, 0, 1], need_roll=True, pad_value=7))
    v.append(pack_vector("labels-ignore-zigzag-cp2", shard + labels + ["R-SHARD-2"],
                         {"cp_size": 2, "labels": "ignore", "bucket": 16}, [4, 3], need_roll=True))
    v.append(pack_vector("labels-ignore-contiguous-tokens", shard + labels + tokens + none,
                         {"cp_size": 2, "cp_layout": "contiguous", "seq_align": "none",
                          "tail": "tokens", "labels": "ignore", "ignore_index": -1,
                          "fixed_total": 10}, [4, 1, 2], need_roll=True, derived=True))
    v.append(pack_vector("labels-ignore-segment-float32", shard + labels + ["R-TAIL-2"],
                         {"tail": "segment", "bucket": 8, "labels": "ignore"}, [3], trail=[2],
                         dtype="float32", need_roll=True))
    v.append(pack_vector("labels-ignore-without-roll", shard + ["R-LABEL-1"] + meta,
                         {"cp_size": 2, "labels": "ignore"}, [3, 5]))
    # Rejections (R-ERR-1, R-ERR-12, R-ERR-14, R-ERR-15, R-ERR-16).
    bad_config = [
        ("seq-align-none-zigzag", {"cp_size": 2, "seq_align": "none"}, ValueError,
         ["R-ERR-14", "R-ALIGN-6"]),
        ("tail-tokens-zigzag", {"cp_size": 3, "tail": "tokens"}, ValueError,
         ["R-ERR-14", "R-TAIL-3"]),
        ("tail-tokens-max-num-seqs", {"tail": "tokens", "max_num_seqs": 3}, ValueError,
         ["R-ERR-14", "R-TAIL-3"]),
        ("tail-tokens-unknown", {"tail": "token"}, ValueError, ["R-ERR-12"]),
        ("fixed-total-bucket", {"fixed_total": 16, "bucket": 16}, ValueError, ["R-ERR-14"]),
        ("fixed-total-not-multiple", {"cp_size": 2, "fixed_total": 6}, ValueError,
         ["R-ERR-14", "R-TOTAL-7"]),
        ("fixed-total-zero", {"fixed_total": 0}, ValueError, ["R-ERR-14"]),
        ("fixed-total-above-int32", {"fixed_total": 2**31}, ValueError, ["R-ERR-14"]),
        ("fixed-total-bool", {"fixed_total": True}, TypeError, ["R-ERR-1"]),
        ("fixed-total-float", {"fixed_total": 16.0}, TypeError, ["R-ERR-1"]),
        ("labels-unknown", {"labels": "shift"}, ValueError, ["R-ERR-12"]),
        ("labels-bool", {"labels": True}, TypeError, ["R-ERR-1"]),
        ("ignore-index-bool", {"ignore_index": False}, TypeError, ["R-ERR-1", "R-LABEL-2"]),
        ("ignore-index-float", {"ignore_index": -100.0}, TypeError, ["R-ERR-1", "R-LABEL-2"]),
    ]
    for name, config, error, rules in bad_config:
        v.append(error_vector(f"reject-{name}", rules, "config", error, config=config))
    v.append(error_vector("reject-fixed-total-too-small", ["R-ERR-15", "R-TOTAL-7"], "plan",
                          ValueError, config={"cp_size": 2, "fixed_total": 8}, seqlens=[3, 5]))
    v.append(error_vector("reject-fixed-total-min-local-rows", ["R-ERR-15"], "plan", ValueError,
                          config={"fixed_total": 8, "min_local_rows": 9}, seqlens=[1]))
    v.append(error_vector("reject-fixed-total-too-small-pack", ["R-ERR-15"], "pack", ValueError,
                          config={"fixed_total": 2}, seqs=[[1, 2], [3]],
                          dtypes=["int64", "int64"]))
    v.append(error_vector("reject-ignore-index-uint8", ["R-ERR-16", "R-LABEL-2"], "pack",
                          ValueError, config={"labels": "ignore"}, seqs=[[1, 2]],
                          dtypes=["uint8"], need_roll=True))
    v.append(error_vector("reject-ignore-index-bool-dtype", ["R-ERR-16"], "pack", ValueError,
                          config={"labels": "ignore"}, seqs=[[True, False]], dtypes=["bool"],
                          need_roll=True))
    return v


def mask_form() -> list[dict[str, Any]]:
    """R-IN-7: a padded batch with a bool mask packs as the list of its masked rows; a mask
    that is not bool, or not the batch's [B, S], is rejected."""
    def row(s: int, cols: list[int]) -> list[bool]:
        return [c in cols for c in range(s)]

    # 16 columns (two 8-byte words): a run plus a stray token, an empty row, a run on the
    # word boundary up to column S - 1, left padding.
    mask = [row(16, [0, 1, 2, 3, 4, 11]), row(16, []), row(16, list(range(8, 16))),
            row(16, list(range(13, 16)))]
    values = [[10 * i + j for j in range(4)] for i in range(2)]
    v = [
        pack_vector("mask-form-cp2", ["R-IN-7", "R-IN-2", "R-SHARD-2", "R-ROW-1", "R-POS-2"],
                    {"cp_size": 2}, [sum(r) for r in mask], trail=[2], mask=mask),
        pack_vector("mask-form-need-roll", ["R-IN-7", "R-ROLL-1"], {"tp_size": 3},
                    [3, 4], mask=[row(5, [0, 2, 4]), row(5, [1, 2, 3, 4])], need_roll=True),
        error_vector("reject-mask-int", ["R-IN-7", "R-ERR-1"], "pack", TypeError,
                     values=values, mask=[row(4, [0, 1])] * 2, mask_dtype="int64"),
        error_vector("reject-mask-shape", ["R-IN-7"], "pack", ValueError,
                     values=values, mask=[row(5, [0, 1])] * 2, mask_dtype="bool"),
    ]
    return v


def render(vector: dict[str, Any]) -> str:
    return json.dumps(vector, indent=1, sort_keys=True, allow_nan=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, don't write")
    args = parser.parse_args(argv)
    vectors = build()
    expected = {f"{vector['name']}.json": render(vector) for vector in vectors}
    existing = {path.name: path.read_text() for path in HERE.glob("*.json")}
    if args.check:
        differ = sorted(
            name for name in set(expected) | set(existing)
            if expected.get(name) != existing.get(name)
        )
        for name in differ:
            print(f"differs: spec/vectors/{name}", file=sys.stderr)
        return 1 if differ else 0
    for name in set(existing) - set(expected):
        (HERE / name).unlink()
    for name, text in expected.items():
        (HERE / name).write_text(text)
    print(f"wrote {len(expected)} vectors to {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
