"""The Megatron adapter as a drop-in for verl 0.9.1 (spec section 12, R-MEG-4 to R-MEG-7):
PackedSeqParams fields under a `**kwargs` constructor, verl's error texts, and verl's values in
the slots `pack_thd` leaves unspecified (oracle: conformance/_megatron_slots.py)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given

from thd_packing import reference

from ._megatron_slots import slot_values
from .compare import check_positions, check_rows, names_field, outcome, same_bits
from .protocol import CONVENTION_CAPABILITIES
from .running import RankResult, ref_config, run_reference
from .strategies import Batch, PackCase, batches, configs, pack_cases
from .under_test import RuleViolation, assume_declared, caps, needs, prop_settings, target

# The Megatron view keeps verl's convention: spec 1.1's other conventions are not drawn.
CAPS = caps() - CONVENTION_CAPABILITIES
THD_FIELDS = ("qkv_format", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
              "cu_seqlens_kv_padded", "max_seqlen_q", "max_seqlen_kv")


def _has_cp_partition_mode() -> bool:
    """Whether megatron-core's PackedSeqParams takes `cp_partition_mode` (False without
    megatron-core: the suite installed on its own collects, and these tests are declined)."""
    try:
        from megatron.core.packed_seq_params import PackedSeqParams
    except ImportError:
        return False
    return "cp_partition_mode" in inspect.signature(PackedSeqParams.__init__).parameters


def check_slots(case: PackCase, seqs: list[np.ndarray], rank: int, rows: np.ndarray,
                pos: np.ndarray, params: dict[str, Any]) -> None:
    """The plan first (a different plan is R-META-3's, errata E-1/E-2), then every slot."""
    cfg = ref_config(case.config)
    plan = reference.plan_thd(list(case.batch.lengths), cfg)
    cu = np.asarray(params["cu_seqlens_q_padded"])
    if not np.array_equal(cu, plan.cu_seqlens_padded):
        raise RuleViolation(f"rank {rank}: cu_seqlens_q_padded {cu.tolist()}, spec "
                            f"{plan.cu_seqlens_padded.tolist()}", {"R-META-3"})
    for k, (want_pos, label) in slot_values(seqs, cfg, rank, case.need_roll).items():
        if int(pos[k]) != want_pos:
            rule = "R-MEG-6" if label is None else "R-MEG-7"
            raise RuleViolation(f"rank {rank} row {k}: position id {int(pos[k])}, verl "
                                f"0.9.1 {want_pos}", {rule})
        if label is not None and not same_bits(rows[k], label.astype(rows.dtype)):
            raise RuleViolation(f"rank {rank} row {k} (a last real token): label "
                                f"{rows[k].tolist()}, verl 0.9.1 {label.tolist()}", {"R-MEG-7"})


@needs("megatron")
@pytest.mark.rules("R-MEG-6", "R-MEG-7")
@prop_settings(0.5)
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 5)), need_roll=False))
@example(PackCase(config={"cp_size": 2}, batch=Batch((4, 3)), need_roll=True))
@example(PackCase(config={"tp_size": 2}, batch=Batch((2, 1, 4)), need_roll=True))
@example(PackCase(config={"cp_size": 3, "min_local_rows": 9}, batch=Batch((5,)), need_roll=True))
@example(PackCase(config={"cp_layout": "contiguous", "tp_size": 3}, batch=Batch((4, 2)),
                  need_roll=True))
# zigzag cp = 1 under need_roll, where verl's label is the next buffer row's token: the next
# sequence's (not the sequence's own), a one-row buffer's own first token, an all-empty batch,
# and a next segment that is padding only (label 0, not the next real token).
@example(PackCase(config={}, batch=Batch((3, 2)), need_roll=True))
@example(PackCase(config={}, batch=Batch((1, 0)), need_roll=True))
@example(PackCase(config={}, batch=Batch((0, 0)), need_roll=True))
@example(PackCase(config={"bucket": 8}, batch=Batch((3, 0)), need_roll=True))
@example(PackCase(config={}, batch=Batch((0, 3)), need_roll=True))  # a leading empty sequence
# zigzag cp = 2, rank 1: the second chunk ends on the last real token (L = P - c), id L - 1
@example(PackCase(config={"cp_size": 2}, batch=Batch((6,)), need_roll=True))
@given(pack_cases(caps=CAPS, config=configs(caps=CAPS, contiguous_cp=_has_cp_partition_mode()),
                  batch=batches(max_batch=8, budget=200, caps=CAPS)))
def test_verl_slot_values(case: PackCase) -> None:
    """preprocess_thd_engine on every rank gives verl 0.9.1's position ids on padding rows
    (R-MEG-6) and, under need_roll, verl's label and position id at each sequence's last real
    token (R-MEG-7)."""
    assume_declared(case)
    case = PackCase(config=case.config, batch=case.batch, need_roll=case.need_roll)  # pad 0
    seqs = case.batch.arrays()
    for rank in range(case.cp_size):
        rows, params, pos = target().megatron_preprocess(seqs, dict(case.config), rank,
                                                         need_roll=case.need_roll)
        check_slots(case, seqs, rank, rows[0], pos[0], params)


@needs("kwargs_params")
@pytest.mark.rules("R-MEG-4", "R-MEG-1", "R-MEG-6", "R-MEG-7")
@prop_settings(0.5)
@example(PackCase(config={"cp_size": 2, "cp_layout": "contiguous"}, batch=Batch((5, 3)),
                  need_roll=True))
@example(PackCase(config={"cp_size": 3, "cp_layout": "contiguous", "bucket": 12},
                  batch=Batch((2, 0, 7)), need_roll=False))
@given(pack_cases(caps=CAPS | {"contiguous"}, config=configs(caps=CAPS | {"contiguous"},
                                                             contiguous_cp=True),
                  batch=batches(max_batch=8, budget=200, caps=CAPS)))
def test_kwargs_packed_seq_params(case: PackCase) -> None:
    """A PackedSeqParams whose constructor takes **kwargs (verl's test stub) receives every
    field, cp_partition_mode says the layout, contiguous cp > 1 is accepted (verl accepts it),
    and rows, position ids and slots are as with the real class (R-MEG-4)."""
    assume_declared(case, config={**case.config, "cp_layout": "zigzag"})
    case = PackCase(config=case.config, batch=case.batch, need_roll=case.need_roll)
    seqs = case.batch.arrays()
    want = run_reference(case, seqs)
    results = []
    layout = case.config.get("cp_layout", "zigzag")
    for rank in range(case.cp_size):
        rows, params, pos = target().megatron_preprocess_kwargs(
            seqs, dict(case.config), rank, need_roll=case.need_roll)
        given_fields = set(params.get("given", ()))
        missing = sorted((set(THD_FIELDS) | {"cp_partition_mode"}) - given_fields)
        if missing:
            raise RuleViolation(f"rank {rank}: a **kwargs PackedSeqParams got no {missing} "
                                f"(it was given {sorted(given_fields)})", {"R-MEG-4"})
        if params["cp_partition_mode"] != layout:
            raise RuleViolation(f"rank {rank}: cp_partition_mode "
                                f"{params['cp_partition_mode']!r}, layout {layout!r}",
                                {"R-MEG-4"})
        check_slots(case, seqs, rank, rows[0], pos[0], params)
        results.append(RankResult(rows[0], pos[0], None))
    check_rows(case, results, want)
    check_positions(case, results, want)


def _nested(lengths: tuple[int, ...]) -> Any:
    import torch

    return torch.nested.nested_tensor([torch.arange(n) for n in lengths], layout=torch.jagged)


VERL_TEXTS: dict[str, tuple[dict[str, Any], dict[str, Any], type[Exception], str]] = {
    "layout": ({"cp_layout": "interleaved"}, {}, ValueError,
               "Unsupported context parallel layout: interleaved"),
    "bucket-0": ({"pad_to_length_bucket": 0}, {}, ValueError,
                 "pad_to_length_bucket must be a positive integer"),
    "bucket-negative": ({"pad_to_length_bucket": -4}, {"cp_size": 2}, ValueError,
                        "pad_to_length_bucket must be a positive integer"),
    "bucket-numpy-0": ({"pad_to_length_bucket": np.int64(0)}, {}, ValueError,
                       "pad_to_length_bucket must be a positive integer"),  # any integer type
    "bucket-float": ({"pad_to_length_bucket": 2.5}, {}, TypeError,
                     "'float' object cannot be interpreted as an integer"),
    "bucket-str": ({"pad_to_length_bucket": "8"}, {}, TypeError,
                   "'<=' not supported between instances of 'str' and 'int'"),
    "bucket-half": ({"pad_to_length_bucket": 0.5}, {}, TypeError,
                    "'float' object cannot be interpreted as an integer"),
    "min_local_rows-str": ({"min_local_rows": "8"}, {}, TypeError,
                           "'<' not supported between instances of 'Tensor' and 'str'"),
}
FIELDS = {"cp_layout": ("cp_layout", "R-ERR-4"), "pad_to_length_bucket": ("bucket", "R-ERR-3"),
          "min_local_rows": ("min_local_rows", "R-ERR-1")}


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-5", "R-ERR-1", "R-ERR-3", "R-ERR-4")
@pytest.mark.parametrize("name", sorted(VERL_TEXTS))
def test_error_texts_contain_verl(name: str) -> None:
    """Each message has verl 0.9.1's text for the same input (taken from running the wheel),
    and still names the field and the value."""
    adapter, config, cls, text = VERL_TEXTS[name]
    got = outcome(lambda: target().megatron_preprocess_as_is(_nested((3, 2)), config, 0,
                                                             **adapter))
    if not isinstance(got, cls):
        raise RuleViolation(f"{adapter}: expected {cls.__name__}, got {got!r}", {"R-MEG-5"})
    if text not in str(got):
        raise RuleViolation(f"{adapter}: the message {str(got)!r} lacks verl's {text!r}",
                            {"R-MEG-5"})
    field, rule = FIELDS[next(iter(adapter))]
    if not names_field(field, str(got)):
        raise RuleViolation(f"{adapter}: the message {str(got)!r} does not name {field}",
                            {rule})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-5", "R-MEG-2")
def test_contiguous_refusal_contains_verl_text() -> None:
    """Contiguous cp > 1 without cp_partition_mode: ValueError with verl's text (R-MEG-5)."""
    if _has_cp_partition_mode():
        pytest.skip("the installed megatron-core has cp_partition_mode: nothing is refused")
    got = outcome(lambda: target().megatron_preprocess_as_is(
        _nested((3, 2)), {"cp_size": 2}, 0, cp_layout="contiguous"))
    text = ("cp_layout='contiguous' requires PackedSeqParams.cp_partition_mode, which this "
            "Megatron-core version does not provide. Upgrade Megatron-core or use the zigzag "
            "layout.")
    if not isinstance(got, ValueError) or text not in str(got):
        raise RuleViolation(f"contiguous cp=2: expected ValueError with verl's text, got "
                            f"{got!r}", {"R-MEG-5"})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-5", "R-ERR-4")
def test_postprocess_layout_text_contains_verl() -> None:
    """postprocess_thd_engine with an unknown cp_layout: verl's text too."""
    config = {"tp_size": 1}
    seqs = [np.arange(3, dtype=np.int64), np.arange(2, dtype=np.int64)]
    rows, _, meta = target().pack(seqs, config, 0)
    got = outcome(lambda: target().megatron_postprocess(rows[None], meta, config,
                                                        cp_layout="interleaved"))
    if not isinstance(got, ValueError) or \
            "Unsupported context parallel layout: interleaved" not in str(got):
        raise RuleViolation(f"postprocess cp_layout='interleaved': got {got!r}", {"R-MEG-5"})


# megatron-core 0.16.1's PackedSeqParams constructor (an older or narrower release lacks some).
PARAMS_CTOR = ("qkv_format", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
               "cu_seqlens_kv_padded", "max_seqlen_q", "max_seqlen_kv", "local_cp_size",
               "cp_group")


def _params_without(*names: str) -> type:
    """A PackedSeqParams dataclass whose constructor lacks `names`."""
    import dataclasses

    return dataclasses.make_dataclass(
        "PackedSeqParams", [(f, Any, dataclasses.field(default=None))
                            for f in PARAMS_CTOR if f not in names])


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-4")
@pytest.mark.parametrize("missing", ["qkv_format", "cu_seqlens_kv", "max_seqlen_kv"])
def test_params_without_a_needed_field(missing: str) -> None:
    """A PackedSeqParams whose constructor lacks a field the pack needs: TypeError naming that
    field (R-MEG-4: no field is dropped silently)."""
    seqs = [np.arange(5, dtype=np.int64), np.arange(3, dtype=np.int64)]
    got = outcome(lambda: target().megatron_preprocess_with_params(
        seqs, {"tp_size": 2}, 0, _params_without(missing)))
    if not isinstance(got, TypeError) or not names_field(missing, str(got)):
        raise RuleViolation(f"PackedSeqParams without {missing}: expected TypeError naming "
                            f"it, got {got!r}", {"R-MEG-4"})


@needs("megatron_checks")
@pytest.mark.rules("R-MEG-4", "R-MEG-1")
def test_params_without_redundant_fields() -> None:
    """A PackedSeqParams without cu_seqlens_q_padded / cu_seqlens_kv_padded (equal to
    cu_seqlens_q / _kv) is accepted: it gets every other field, and the rows are the spec's."""
    seqs = [np.arange(5, dtype=np.int64), np.arange(3, dtype=np.int64)]
    config: dict[str, Any] = {"tp_size": 2}
    rows, params, _ = target().megatron_preprocess_with_params(
        seqs, config, 0, _params_without("cu_seqlens_q_padded", "cu_seqlens_kv_padded"))
    want, _, plan = reference.pack_thd(seqs, reference.PackConfig(**config), 0)
    for key in ("cu_seqlens_q", "cu_seqlens_kv"):
        if not np.array_equal(np.asarray(params.get(key)), plan.cu_seqlens_padded):
            raise RuleViolation(f"{key} = {params.get(key)!r}, spec "
                                f"{plan.cu_seqlens_padded.tolist()}", {"R-MEG-1"})
    if params.get("qkv_format") != "thd" or params.get("max_seqlen_kv") != plan.max_seqlen:
        raise RuleViolation(f"PackedSeqParams {params}", {"R-MEG-4"})
    if not same_bits(rows[0], want):
        raise RuleViolation(f"rows {rows[0].tolist()}, spec {want.tolist()}", {"R-MEG-4"})
