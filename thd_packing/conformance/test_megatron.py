"""The Megatron adapter view (spec section 12): PackedSeqParams fields and layout support."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from thd_packing import reference

from .compare import (
    check_local_grad,
    check_positions,
    check_rows,
    names_field,
    names_number,
    outcome,
    same_bits,
    snapshot,
)
from .protocol import CONVENTION_CAPABILITIES, plain_meta
from .running import RankResult, ref_config, run_reference
from .strategies import Batch, PackCase, batches, configs, pack_cases
from .under_test import RuleViolation, assume_declared, caps, needs, prop_settings, target

# The Megatron view keeps verl's convention: spec 1.1's other conventions are not drawn.
CAPS = caps() - CONVENTION_CAPABILITIES
# The engine functions also take spec 1.1's static metadata (keyword-only, R-MEG-10).
PRE_CAPS = CAPS | (caps() & {"static_metadata"})


def _has_cp_partition_mode() -> bool:
    """Whether megatron-core's PackedSeqParams takes `cp_partition_mode` (False without
    megatron-core: the suite installed on its own collects, and these tests are declined).
    Called at collection: megatron-core's import warnings are the suite's, not the target's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(megatron|torch\.jit)\b")
        try:
            from megatron.core.packed_seq_params import PackedSeqParams
        except ImportError:
            return False
    return "cp_partition_mode" in inspect.signature(PackedSeqParams.__init__).parameters


@needs("megatron")
@pytest.mark.rules("R-MEG-1", "R-MEG-10")
@prop_settings(0.5)
@example(PackCase(config={"bucket": 512}, batch=Batch((513,))))
@example(PackCase(config={"cp_size": 2, "min_local_rows": 64}, batch=Batch((3, 5))))
@example(PackCase(config={"cp_size": 2, "fp8": True}, batch=Batch((20, 5))))
@example(PackCase(config={"cp_size": 2}, batch=Batch((4, 3)), need_roll=True))
@example(PackCase(config={"tp_size": 3, "cp_layout": "contiguous"}, batch=Batch((4, 3))))
@example(PackCase(config={"cp_size": 2, "max_num_seqs": 5, "max_seqlen": "total"},
                  batch=Batch((4, 3)), need_roll=True))
@given(pack_cases(caps=PRE_CAPS,
                  config=configs(caps=PRE_CAPS, contiguous_cp=_has_cp_partition_mode()),
                  batch=batches(max_batch=12, budget=400, caps=PRE_CAPS)))
def test_preprocess_fields(case: PackCase) -> None:
    """rows[None], position_ids[None], qkv_format 'thd', every cu_seqlens field equal to
    cu_seqlens_padded, max_seqlen_q = max_seqlen_kv = max_seqlen; rows and position ids as
    pack_thd with pad_value 0; with max_num_seqs / max_seqlen (R-MEG-10) the plan's N + 1
    offsets and its max_seqlen. A wrong plan or wrong rows are reported against their own rules
    (R-META, R-ROW, R-POS, R-ROLL), a wrong field mapping against R-MEG-1."""
    assume_declared(case)
    seqs = case.batch.arrays()
    case = PackCase(config=case.config, batch=case.batch, need_roll=case.need_roll)  # pad 0
    want = run_reference(case, seqs)
    results: list[RankResult] = []
    for rank in range(case.cp_size):
        rows, params, pos = target().megatron_preprocess(seqs, dict(case.config), rank,
                                                         need_roll=case.need_roll)
        plan = want[rank].meta
        cu = np.asarray(params["cu_seqlens_q_padded"])
        if not np.array_equal(cu, plan.cu_seqlens_padded):
            raise RuleViolation(f"rank {rank}: cu_seqlens_q_padded {cu.tolist()}, spec "
                                f"{plan.cu_seqlens_padded.tolist()}", {"R-META-3"})
        if params["qkv_format"] != "thd":
            raise RuleViolation(f"qkv_format {params['qkv_format']!r}", {"R-MEG-1"})
        for key in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_kv_padded"):
            got = np.asarray(params[key])
            if got.dtype != np.int32 or not np.array_equal(got, cu):
                raise RuleViolation(f"{key} = {got.tolist()} ({got.dtype}), expected "
                                    f"cu_seqlens_padded {cu.tolist()}", {"R-MEG-1"})
        for key in ("max_seqlen_q", "max_seqlen_kv"):
            if params[key] != plan.max_seqlen or type(params[key]) is not int:
                raise RuleViolation(f"{key} = {params[key]!r}, spec {plan.max_seqlen}",
                                    {"R-MEG-1"})
        if rows.shape != (1, *want[rank].rows.shape) or pos.shape != (1, plan.local_rows):
            raise RuleViolation(f"rank {rank}: rows {rows.shape}, position_ids {pos.shape}; "
                                f"spec {(1, *want[rank].rows.shape)}, {(1, plan.local_rows)}",
                                {"R-MEG-1"})
        results.append(RankResult(rows[0], pos[0], None))
    check_rows(case, results, want)
    check_positions(case, results, want)


@needs("distributed")
@pytest.mark.rules("R-MEG-3", "R-UNPACK-1", "R-MEG-10")
@prop_settings(0.5)
@given(pack_cases(caps=frozenset(), need_roll=False,
                  config=configs(caps=PRE_CAPS, cp=st.just(1), bucket=st.none(),
                                 min_local_rows=st.none()),
                  batch=batches(max_batch=12, budget=400, dtypes=("float32", "int64"),
                                caps=PRE_CAPS)))
def test_postprocess_single_rank(case: PackCase) -> None:
    """postprocess_thd_engine with cp_size 1 (no collective): the sequences back, and the
    gradient of their sum is 1 on real rows and 0 on padding."""
    assume_declared(case)
    seqs = case.batch.arrays()
    rows, _, meta = target().pack(seqs, dict(case.config), 0)
    outs, grad = target().distributed_unpack(rows, meta, dict(case.config), 0, None)
    assert len(outs) == len(seqs)
    for i, (g, w) in enumerate(zip(outs, seqs, strict=True)):
        assert same_bits(np.asarray(g), w), f"sequence {i}: {np.asarray(g)!r}, spec {w!r}"
    cfg = ref_config(case.config)
    plan = reference.plan_thd(list(case.batch.lengths), cfg)
    check_local_grad(grad, plan, cfg, 0, str(case))


@needs("megatron")
@pytest.mark.rules("R-MEG-2")
def test_contiguous_needs_cp_partition_mode() -> None:
    """Without PackedSeqParams.cp_partition_mode, contiguous cp > 1 raises ValueError before
    touching data; with it, the field carries the layout."""
    seqs = [np.arange(6, dtype=np.int64), np.arange(3, dtype=np.int64)]
    before = [s.copy() for s in seqs]
    config = {"cp_size": 2, "cp_layout": "contiguous"}
    if _has_cp_partition_mode():
        _, params, _ = target().megatron_preprocess(seqs, config, 0)
        assert params.get("cp_partition_mode") == "contiguous"
    else:
        with pytest.raises(ValueError) as caught:
            target().megatron_preprocess(seqs, config, 0)
        # spec section 11: the message names the field and the value
        assert names_field("cp_layout", str(caught.value)) and "contiguous" in str(caught.value), \
            f"the message {str(caught.value)!r} does not name cp_layout='contiguous'"
    assert all(np.array_equal(a, b) for a, b in zip(seqs, before, strict=True))
    # cp_size 1 needs no partition mode at all.
    rows, _, _ = target().megatron_preprocess(seqs, {"cp_layout": "contiguous"}, 0)
    ref_rows, _, _ = reference.pack_thd(seqs, reference.PackConfig(cp_layout="contiguous"), 0)
    assert np.array_equal(rows[0], ref_rows)


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-1", "R-ERR-1")
@pytest.mark.parametrize("kind", ["list", "ndarray", "none"])
def test_preprocess_rejects_foreign_input_ids(kind: str) -> None:
    """input_ids that is not the adapter's batch type (a jagged nested tensor: a list of arrays,
    a plain NumPy array, None) raises TypeError naming input_ids (R-ERR-1: a batch that is not
    one of the implementation's batch forms), not an AttributeError from inside."""
    seqs = [np.arange(5, dtype=np.int64), np.arange(3, dtype=np.int64)]
    input_ids = {"list": seqs, "ndarray": np.zeros((2, 3), np.int64), "none": None}[kind]
    before = snapshot(seqs)
    got = outcome(lambda: target().megatron_preprocess_as_is(input_ids, {}, 0))
    assert snapshot(seqs) == before, "preprocess changed its input"
    if not isinstance(got, TypeError):
        raise RuleViolation(f"preprocess_thd_engine({kind}): expected TypeError, got {got!r}",
                            {"R-ERR-1"})
    if not names_field("input_ids", str(got)):
        raise RuleViolation(f"preprocess_thd_engine({kind}): the message {str(got)!r} does "
                            "not name input_ids", {"R-ERR-1"})
    kind_name = type(input_ids).__name__
    if kind_name not in str(got):
        raise RuleViolation(f"preprocess_thd_engine({kind}): the message {str(got)!r} does "
                            f"not name the type it got ({kind_name})", {"R-ERR-1"})


def _nested(lengths: tuple[int, ...]) -> Any:
    import torch

    return torch.nested.nested_tensor([torch.arange(n) for n in lengths], layout=torch.jagged)


@needs("megatron_checks")
@pytest.mark.rules("R-ERR-4", "R-MEG-2")
@pytest.mark.parametrize("step", ["preprocess", "postprocess"])
@pytest.mark.parametrize("layout", ["ring", "Zigzag", ""])
def test_adapter_rejects_cp_layout(step: str, layout: str) -> None:
    """An unknown cp_layout given to the adapter raises ValueError naming cp_layout and the
    value (R-ERR-4), in preprocess and in postprocess, before any data is read."""
    if step == "preprocess":
        got = outcome(lambda: target().megatron_preprocess_as_is(
            _nested((3, 2)), {}, 0, cp_layout=layout))
    else:
        config = {"tp_size": 1}
        seqs = [np.arange(3, dtype=np.int64), np.arange(2, dtype=np.int64)]
        rows, _, meta = target().pack(seqs, config, 0)
        got = outcome(lambda: target().megatron_postprocess(rows[None], meta, config,
                                                            cp_layout=layout))
    if not isinstance(got, ValueError):
        raise RuleViolation(f"{step} with cp_layout={layout!r}: expected ValueError, got "
                            f"{got!r}", {"R-ERR-4"})
    message = str(got)
    if not names_field("cp_layout", message) or repr(layout) not in message:
        raise RuleViolation(f"{step} with cp_layout={layout!r}: the message {message!r} does "
                            "not name cp_layout and the value", {"R-ERR-4"})


# (config, lengths): cp_size 1, so postprocess needs no collective; alignment makes the padded
# offsets differ from the real ones.
POST_CASES: dict[str, tuple[dict[str, Any], tuple[int, ...]]] = {
    "tp2": ({"tp_size": 2}, (3, 5, 0, 2)),
    "fp8": ({"fp8": True}, (17, 1)),
    "bucket": ({"bucket": 7}, (4, 4, 1)),
}


def _post_input(
    name: str,
) -> tuple[dict[str, Any], list[np.ndarray], np.ndarray, dict[str, Any]]:
    config, lengths = POST_CASES[name]
    cfg = reference.PackConfig(**config)
    seqs = [(np.arange(n * 3, dtype=np.float32) + 100 * i).reshape(n, 3)
            for i, n in enumerate(lengths)]
    rows, _, plan = reference.pack_thd(seqs, cfg, 0, pad_value=-7.0)
    meta = plain_meta(plan)
    return config, seqs, rows, meta


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-3", "R-UNPACK-1", "R-UNPACK-3")
@pytest.mark.parametrize("name", sorted(POST_CASES))
def test_postprocess_uses_padded_offsets(name: str) -> None:
    """A PackedSeqParams built by hand in Transformer Engine's own convention (cu_seqlens_q and
    cu_seqlens_kv the real boundaries, the *_padded fields the padded ones): postprocess still
    returns every sequence, because the rows sit at the padded offsets (R-UNPACK-1's row map is
    built from seqlens_padded; R-MEG-1 puts them in cu_seqlens_q_padded)."""
    config, seqs, rows, meta = _post_input(name)
    real = np.asarray(meta["cu_seqlens"], np.int32)
    assert not np.array_equal(real, meta["cu_seqlens_padded"]), "the case needs padding"
    for params in ({}, {"cu_seqlens_q": real, "cu_seqlens_kv": real}):
        outs = target().megatron_postprocess(rows[None], meta, config, params=params)
        assert len(outs) == len(seqs), f"{len(outs)} sequences back, {len(seqs)} in"
        for i, (g, w) in enumerate(zip(outs, seqs, strict=True)):
            if not same_bits(np.asarray(g), w):
                raise RuleViolation(
                    f"PackedSeqParams {sorted(params) or 'as preprocess builds it'}: sequence "
                    f"{i} came back as {np.asarray(g).tolist()}, spec {w.tolist()}",
                    {"R-MEG-3", "R-UNPACK-1"})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-3", "R-ERR-11")
@pytest.mark.parametrize("shape", ["no-batch-dim", "batch-2", "rows-short", "rows-long",
                                   "flat-1d", "scalar"])
def test_postprocess_rejects_output_shape(shape: str) -> None:
    """An output that is not `[1, local_rows, *trail]` raises ValueError (a shard whose row count
    is not local_rows, R-ERR-11), before anything is read; the output is left unchanged."""
    config, _, rows, meta = _post_input("tp2")
    output = {"no-batch-dim": rows, "batch-2": np.stack([rows, rows]),
              "rows-short": rows[None, :-2], "rows-long": np.concatenate([rows, rows])[None],
              "flat-1d": rows[:, 0].copy(), "scalar": np.array(1.0, np.float32)}[shape]
    output = np.ascontiguousarray(output)
    before = output.tobytes()
    got = outcome(lambda: target().megatron_postprocess(output, meta, config))
    assert output.tobytes() == before, "postprocess changed its output argument"
    if not isinstance(got, ValueError):
        raise RuleViolation(f"postprocess of an output of shape {output.shape}: expected "
                            f"ValueError, got {got!r}", {"R-ERR-11"})
    if not names_field("output", str(got)) and not names_field("shards", str(got)):
        raise RuleViolation(f"postprocess of an output of shape {output.shape}: the message "
                            f"{str(got)!r} names neither output nor shards", {"R-ERR-11"})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-3", "R-ERR-11")
@pytest.mark.parametrize("delta", [-1, 1])
def test_postprocess_rejects_batch_size(delta: int) -> None:
    """A batch_size that is not the number of sequences in input_ids raises ValueError naming
    batch_size and its value (verl's postprocess signature carries both)."""
    config, seqs, rows, meta = _post_input("tp2")
    wrong = len(seqs) + delta
    got = outcome(lambda: target().megatron_postprocess(rows[None], meta, config,
                                                        batch_size=wrong))
    if not isinstance(got, ValueError):
        raise RuleViolation(f"postprocess with batch_size={wrong} for {len(seqs)} sequences: "
                            f"expected ValueError, got {got!r}", {"R-ERR-11"})
    if not names_field("batch_size", str(got)) or not names_number(wrong, str(got)):
        raise RuleViolation(f"postprocess with batch_size={wrong}: the message {str(got)!r} "
                            "does not name batch_size and its value", {"R-ERR-11"})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-1")
def test_dynamic_cp_needs_megatron_support() -> None:
    """Where the installed megatron-core has no dynamic CP groups, `local_cp_size` raises
    ValueError naming local_cp_size before touching data (erratum E-9)."""
    from megatron.core import parallel_state

    if hasattr(parallel_state, "get_dynamic_data_context_parallel_groups"):
        pytest.skip("the installed megatron-core supports dynamic CP")
    got = outcome(lambda: target().megatron_preprocess_as_is(_nested((3, 2)), {}, 0,
                                                             local_cp_size=2))
    if not isinstance(got, ValueError) or not names_field("local_cp_size", str(got)):
        raise RuleViolation(f"preprocess with local_cp_size=2 on a megatron-core without "
                            f"dynamic CP: expected ValueError naming local_cp_size, got "
                            f"{got!r}", {"R-MEG-1"})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-3", "R-ERR-11")
@pytest.mark.parametrize("kind", ["2-D", "float"])
def test_postprocess_names_malformed_cu_seqlens(kind: str) -> None:
    """A PackedSeqParams whose cu_seqlens_q_padded is not a 1-D integer array: the error names
    cu_seqlens_q_padded (spec section 11: the field)."""
    config, _, rows, meta = _post_input("tp2")
    cu = np.asarray(meta["cu_seqlens_padded"])
    bad = cu[None] if kind == "2-D" else cu.astype(np.float32)
    got = outcome(lambda: target().megatron_postprocess(
        rows[None], meta, config, params={"cu_seqlens_q_padded": bad}))
    if kind == "float" and got is None:
        return  # the adapter's override turns the array into int32 first: nothing to check
    if not isinstance(got, (TypeError, ValueError)) or not names_field("cu_seqlens_q_padded",
                                                                  str(got)):
        raise RuleViolation(f"postprocess with a {kind} cu_seqlens_q_padded: expected an "
                            f"error naming cu_seqlens_q_padded, got {got!r}", {"R-ERR-11"})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-3", "R-UNPACK-1")
def test_postprocess_without_padded_offsets() -> None:
    """A PackedSeqParams whose cu_seqlens_q_padded is None (Megatron's default when nothing is
    padded): postprocess locates the rows by cu_seqlens_q."""
    config, seqs, rows, meta = _post_input("tp2")
    outs = target().megatron_postprocess(rows[None], meta, config,
                                         params={"cu_seqlens_q_padded": None})
    assert len(outs) == len(seqs)
    for i, (g, w) in enumerate(zip(outs, seqs, strict=True)):
        assert same_bits(np.asarray(g), w), f"sequence {i} differs"


@needs("megatron_checks", "static_metadata")
@pytest.mark.rules("R-MEG-10", "R-ERR-13")
def test_postprocess_rejects_more_sequences_than_max_num_seqs() -> None:
    """postprocess_thd_engine with max_num_seqs below batch_size: R-ERR-13's ValueError, its
    message naming max_num_seqs and B (R-MEG-10)."""
    config, seqs, rows, meta = _post_input("tp2")
    b, n = len(seqs), 2
    got = outcome(lambda: target().megatron_postprocess(rows[None], meta, config,
                                                        max_num_seqs=n))
    if not isinstance(got, ValueError) or not names_field("max_num_seqs", str(got)) or \
            not names_number(b, str(got)):
        raise RuleViolation(f"postprocess of B = {b} sequences with max_num_seqs={n}: "
                            f"expected ValueError naming max_num_seqs and {b}, got {got!r}",
                            {"R-ERR-13"})


@needs("megatron_checks", "static_metadata")
@pytest.mark.rules("R-MEG-10", "R-MEG-3", "R-ERR-11")
def test_postprocess_max_num_seqs_other_than_the_params() -> None:
    """postprocess_thd_engine with a max_num_seqs whose N + 1 offsets the PackedSeqParams do not
    hold (they come from a pack without it): either the B sequences come back, or a ValueError
    names cu_seqlens_q_padded (a contradicting plan, R-ERR-11's MAY)."""
    config, seqs, rows, meta = _post_input("tp2")
    got: Any = None
    try:
        got = target().megatron_postprocess(rows[None], meta, config,
                                            max_num_seqs=len(seqs) + 2)
    except ValueError as exc:
        if not names_field("cu_seqlens_q_padded", str(exc)):
            raise RuleViolation(f"max_num_seqs={len(seqs) + 2} against {len(seqs) + 1} "
                                f"offsets: the message {str(exc)!r} does not name "
                                "cu_seqlens_q_padded", {"R-ERR-11"}) from None
        return
    assert len(got) == len(seqs), f"{len(got)} sequences back, {len(seqs)} in"
    for i, (g, w) in enumerate(zip(got, seqs, strict=True)):
        if not same_bits(np.asarray(g), w):
            raise RuleViolation(f"sequence {i} came back as {np.asarray(g).tolist()}",
                                {"R-MEG-3"})
