"""The adapter swapped in for verl 0.9.1: values pinned by running the 0.9.1 wheel.

Each table below is what verl 0.9.1's `preprocess_thd_engine` returned (util.py loaded on its
own, fake parallel state, a `PackedSeqParams` stub whose constructor takes `**kwargs`, as verl's
own tests stub it), written down once; the tests run the adapter only. Where a listed erratum
applies (E-3, E-4, E-5: `_verl_errata.erratum_slots`) the slot is not compared; everything else,
padding position ids and last-token labels included (R-MEG-6, R-MEG-7), must be verl's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from thd_packing import reference as ref

pytest.importorskip("megatron.core")
from megatron.core import packed_seq_params as psp_module  # noqa: E402
from megatron.core import parallel_state  # noqa: E402

from impl import megatron as adapter  # noqa: E402

from ._verl_errata import erratum_slots  # noqa: E402

THD_FIELDS = ["cp_partition_mode", "cu_seqlens_kv", "cu_seqlens_kv_padded", "cu_seqlens_q",
              "cu_seqlens_q_padded", "max_seqlen_kv", "max_seqlen_q", "qkv_format"]


class KwargsParams:
    """verl's test stub: a PackedSeqParams whose constructor takes **kwargs."""

    def __init__(self, **kwargs: Any) -> None:
        self.given = sorted(kwargs)
        self.__dict__.update(kwargs)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """The **kwargs PackedSeqParams and a settable fake parallel state."""
    state = {"tp": 1, "cp": 1, "rank": 0}
    monkeypatch.setattr(psp_module, "PackedSeqParams", KwargsParams)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size",
                        lambda: state["tp"])
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: state["cp"])
    monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda: state["rank"])
    yield state


def nested(lengths: list[int]) -> Any:
    return torch.nested.nested_tensor(
        [torch.arange(n) + 1000 * (i + 1) for i, n in enumerate(lengths)], layout=torch.jagged)


# name: (tp, cp, lengths, need_roll, adapter kwargs, verl's cu_seqlens_q_padded,
#        {rank: (verl's rows, verl's position ids)})
VERL = {
    "zigzag-cp2-pad": (1, 2, [3, 5], False, {}, [0, 4, 12], {
        0: ([1000, 0, 2000, 2001, 0, 0], [0, 0, 0, 1, 0, 0]),
        1: ([1001, 1002, 2002, 2003, 2004, 0], [1, 2, 2, 3, 4, 0])}),
    "zigzag-cp2-roll": (1, 2, [4, 3], True, {}, [0, 4, 8], {
        0: ([1001, 1000, 2001, 2000], [0, 0, 0, 0]),
        1: ([1002, 1003, 2002, 0], [1, 2, 1, 2])}),
    "cp1-tp2-roll": (2, 1, [2, 1, 4], True, {}, [0, 2, 4, 8], {
        0: ([1001, 2000, 0, 3000, 3001, 3002, 3003, 1000], [1, 0, 0, 0, 1, 2, 3, 0])}),
    "cp1-min-local-rows": (1, 1, [3, 2], False, {"min_local_rows": 8}, [0, 3, 8], {
        0: ([1000, 1001, 1002, 2000, 2001, 0, 0, 0], [0, 1, 2, 0, 1, 0, 0, 0])}),
    "contiguous-cp2": (1, 2, [5, 3], False, {"cp_layout": "contiguous"}, [0, 6, 10], {
        0: ([1000, 1001, 1002, 1003, 1004], [0, 1, 2, 3, 4]),
        1: ([0, 2000, 2001, 2002, 0], [0, 0, 1, 2, 0])}),
    "contiguous-cp2-roll": (1, 2, [5, 3], True, {"cp_layout": "contiguous"}, [0, 6, 10], {
        0: ([1001, 1002, 1003, 1004, 1000], [1, 2, 3, 4, 0]),
        1: ([0, 2001, 2002, 2000, 0], [0, 1, 2, 0, 0])}),
    "zigzag-cp3-mlr-roll": (1, 3, [5], True, {"min_local_rows": 4}, [0, 12], {
        0: ([1001, 1002, 0, 1000], [1, 1, 0, 0]),
        1: ([1003, 1004, 0, 0], [3, 3, 0, 0]),
        2: ([0, 0, 0, 0], [5, 5, 0, 0])}),
    "zigzag-cp2-bucket-roll": (1, 2, [4, 2], True, {"pad_to_length_bucket": 16}, [0, 4, 16], {
        0: ([1001, 1000, 2001, 0, 0, 0, 0, 2000], [0, 0, 1, 2, 2, 0, 0, 0]),
        1: ([1002, 1003, 0, 0, 0, 0, 0, 0], [1, 2, 4, 5, 5, 0, 0, 0])}),
}


@pytest.mark.rules("R-MEG-1", "R-MEG-4", "R-MEG-6", "R-MEG-7")
@pytest.mark.parametrize("name", sorted(VERL))
def test_matches_verl_0_9_1(stub: dict[str, int], name: str) -> None:
    """Rows, position ids and PackedSeqParams as verl 0.9.1 gave them, slot for slot, except
    where an erratum applies; the **kwargs stub receives every field verl passes."""
    tp, cp, lengths, roll, kwargs, cu, ranks = VERL[name]
    stub.update(tp=tp, cp=cp)
    cfg = ref.PackConfig(tp_size=tp, cp_size=cp, cp_layout=kwargs.get("cp_layout", "zigzag"),
                         bucket=kwargs.get("pad_to_length_bucket"),
                         min_local_rows=kwargs.get("min_local_rows"))
    compared = 0
    for rank, (want_rows, want_pos) in ranks.items():
        stub["rank"] = rank
        rows, params, pos = adapter.preprocess_thd_engine(nested(lengths), need_roll=roll,
                                                          **kwargs)
        assert isinstance(params, KwargsParams) and params.given == THD_FIELDS
        assert params.cu_seqlens_q_padded.tolist() == cu
        assert params.cp_partition_mode == kwargs.get("cp_layout", "zigzag")
        skip = erratum_slots(lengths, cfg, rank, roll)
        for k, (g_row, g_pos) in enumerate(zip(rows[0].tolist(), pos[0].tolist(), strict=True)):
            if "value" not in skip.get(k, ()):
                assert g_row == want_rows[k], f"rank {rank} row {k}: {g_row}, verl {want_rows[k]}"
                compared += 1
            if "pos" not in skip.get(k, ()):
                assert g_pos == want_pos[k], f"rank {rank} row {k}: id {g_pos}, verl {want_pos[k]}"
                compared += 1
    assert compared > 0


@pytest.mark.rules("R-MEG-4", "R-MEG-2")
def test_kwargs_stub_accepts_contiguous(stub: dict[str, int]) -> None:
    """With a **kwargs PackedSeqParams, contiguous cp > 1 is accepted (verl accepts it), where
    the real 0.16.1 class makes the adapter refuse it (R-MEG-2)."""
    stub.update(cp=2, rank=1)
    _, params, _ = adapter.preprocess_thd_engine(nested([5, 3]), cp_layout="contiguous")
    assert params.cp_partition_mode == "contiguous" and params.given == THD_FIELDS


class NoGroupParams:
    """A PackedSeqParams without local_cp_size / cp_group (not **kwargs)."""

    def __init__(self, qkv_format: Any = None, cu_seqlens_q: Any = None,
                 cu_seqlens_kv: Any = None, max_seqlen_q: Any = None,
                 max_seqlen_kv: Any = None) -> None:
        self.cu_seqlens_q = cu_seqlens_q


@pytest.mark.rules("R-MEG-4")
def test_a_needed_field_is_never_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A constructor that cannot take local_cp_size and cp_group (dynamic CP): TypeError naming
    the field, not an object without them."""
    group = object()
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: 1)
    monkeypatch.setattr(parallel_state, "get_dynamic_data_context_parallel_groups",
                        lambda group_size: group, raising=False)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(psp_module, "PackedSeqParams", NoGroupParams)
    with pytest.raises(TypeError, match="local_cp_size=2"):
        adapter.preprocess_thd_engine(nested([3]), local_cp_size=2)


# verl 0.9.1's exception class and text for one bad argument (from running the wheel).
VERL_ERRORS = [
    ({"cp_layout": "interleaved"}, ValueError, "Unsupported context parallel layout: interleaved"),
    ({"cp_layout": None}, ValueError, "Unsupported context parallel layout: None"),
    ({"pad_to_length_bucket": 0}, ValueError, "pad_to_length_bucket must be a positive integer"),
    ({"pad_to_length_bucket": 2.5}, TypeError,
     "'float' object cannot be interpreted as an integer"),
    ({"pad_to_length_bucket": "8"}, TypeError,
     "'<=' not supported between instances of 'str' and 'int'"),
    ({"min_local_rows": "3"}, TypeError,
     "'<' not supported between instances of 'Tensor' and 'str'"),
]


@pytest.mark.rules("R-MEG-5")
@pytest.mark.parametrize("kwargs,cls,text", VERL_ERRORS)
def test_error_texts(stub: dict[str, int], kwargs: dict[str, Any], cls: type, text: str) -> None:
    """A trainer's `pytest.raises(cls, match=verl's text)` passes; our wording names the field."""
    stub.update(cp=2)
    with pytest.raises(cls, match=text.replace("(", r"\(").replace(")", r"\)")) as caught:
        adapter.preprocess_thd_engine(nested([3]), **kwargs)
    field = next(iter(kwargs)).replace("pad_to_length_", "")
    assert field in str(caught.value)


@pytest.mark.rules("R-MEG-5", "R-MEG-2")
def test_contiguous_refusal_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real 0.16.1 PackedSeqParams (no cp_partition_mode): verl's ValueError text."""
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: 1)
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: 2)
    monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda: 0)
    with pytest.raises(ValueError, match=r"cp_layout='contiguous' requires PackedSeqParams\."
                       r"cp_partition_mode, which this Megatron-core version does not provide\. "
                       r"Upgrade Megatron-core or use the zigzag layout\."):
        adapter.preprocess_thd_engine(nested([3]), cp_layout="contiguous")


@pytest.mark.rules("R-MEG-5")
def test_postprocess_layout_text(stub: dict[str, int]) -> None:
    rows, params, _ = adapter.preprocess_thd_engine(nested([3]))
    with pytest.raises(ValueError, match="Unsupported context parallel layout: ring"):
        adapter.postprocess_thd_engine(rows, params, nested([3]), 1, cp_layout="ring")
