"""Engine-level configuration (spec section 10): verl's Megatron engine flags -> PackConfig."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from thd_packing import reference

from .compare import check_same_rejection, names_field, outcome
from .under_test import needs, prop_settings, target

FLAGS = ("pad_to_length", "use_remove_padding", "dynamic_context_parallel",
         "distillation_use_topk", "router_replay", "use_fp8_padding")
CONFIG_KEYS = ("tp_size", "cp_size", "cp_layout", "fp8", "bucket", "min_local_rows")
flag_values = st.one_of(st.booleans(), st.sampled_from([0, 1, None, "true"]))


def _compare(flags: dict[str, Any]) -> None:
    want = outcome(lambda: reference.resolve_engine_config(**flags))
    got = outcome(lambda: target().resolve_engine_config(**flags))
    check_same_rejection(want, got, f"resolve_engine_config({flags})")
    if want is None:
        cfg = reference.resolve_engine_config(**flags)
        expected = {k: getattr(cfg, k) for k in CONFIG_KEYS}
        actual = {k: target().resolve_engine_config(**flags)[k] for k in CONFIG_KEYS}
        assert actual == expected, f"resolve_engine_config({flags}): {actual}, spec {expected}"


@st.composite
def engine_flags(draw: st.DrawFn, *, typed: bool) -> dict[str, Any]:
    """All keyword arguments, then a random subset left out so the defaults are used too."""
    flags = draw(_all_engine_flags(typed=typed))
    keep = draw(st.lists(st.sampled_from(sorted(flags)), unique=True))
    return {k: flags[k] for k in sorted(keep)}


@st.composite
def _all_engine_flags(draw: st.DrawFn, *, typed: bool) -> dict[str, Any]:
    values = flag_values if typed else st.booleans()
    flags: dict[str, Any] = {name: draw(values) for name in FLAGS}
    flags["pad_to_length_bucket"] = draw(st.one_of(
        st.integers(1, 4096), st.sampled_from([0, -1, True, 512.0, "512"]) if typed
        else st.integers(1, 4096)))
    flags["tp_size"] = draw(st.integers(1, 4))
    flags["cp_size"] = draw(st.integers(1, 4))
    flags["cp_layout"] = draw(st.sampled_from(["zigzag", "contiguous"]))
    flags["min_local_rows"] = draw(st.one_of(st.none(), st.integers(1, 64)))
    return flags


@needs("engine")
@pytest.mark.rules("R-ENGINE-2", "R-ENGINE-3", "R-ENGINE-4", "R-ENGINE-5", "R-ENGINE-6",
                   "R-ENGINE-7")
@prop_settings()
@example({})
@example({"pad_to_length": True, "use_remove_padding": False})
@example({"dynamic_context_parallel": True, "use_remove_padding": False})
@example({"use_fp8_padding": True, "tp_size": 2, "cp_size": 3, "cp_layout": "contiguous",
          "min_local_rows": 7, "pad_to_length": True, "pad_to_length_bucket": 100})
@given(engine_flags(typed=False))
def test_engine_flags_match_reference(flags: dict[str, Any]) -> None:
    """Every combination of bool flags: the same rejection or the same PackConfig."""
    _compare(flags)


@needs("engine")
@pytest.mark.rules("R-ENGINE-1", "R-ERR-3")
@prop_settings()
@example({"pad_to_length_bucket": 0})
@example({"pad_to_length_bucket": True})
@example({"use_fp8_padding": 1})
@example({"router_replay": None})
@example({"pad_to_length": "true"})
@given(engine_flags(typed=True))
def test_engine_flag_types_match_reference(flags: dict[str, Any]) -> None:
    """Flags must be bools and the bucket an integer >= 1 even when unused."""
    _compare(flags)


@needs("engine")
@pytest.mark.rules("R-ENGINE-2", "R-ENGINE-3")
@pytest.mark.parametrize("flags,error", [
    ({"dynamic_context_parallel": True, "use_remove_padding": False}, ValueError),
    ({"dynamic_context_parallel": True, "pad_to_length": True}, NotImplementedError),
])
def test_dynamic_context_parallel_rejected(flags: dict[str, Any], error: type) -> None:
    """Dynamic context parallel: without remove-padding ValueError, with a bucket
    NotImplementedError (verl's engine behaviour)."""
    with pytest.raises(error) as caught:
        target().resolve_engine_config(**flags)
    assert all(names_field(flag, str(caught.value)) for flag in flags), str(caught.value)


@needs("engine")
@pytest.mark.rules("R-ENGINE-5")
def test_topk_distillation_rejected_with_bucket() -> None:
    """Top-K distillation cannot use static packed shapes: RuntimeError."""
    with pytest.raises(RuntimeError) as caught:
        target().resolve_engine_config(pad_to_length=True, distillation_use_topk=True)
    # spec section 11: the message names the field (which flag forbids which)
    assert names_field("pad_to_length", str(caught.value)), str(caught.value)
    assert target().resolve_engine_config(distillation_use_topk=True)["bucket"] is None


@needs("engine")
@pytest.mark.rules("R-ENGINE-6")
def test_router_replay_rejected_with_bucket() -> None:
    """Router replay cannot use static packed shapes: RuntimeError."""
    with pytest.raises(RuntimeError) as caught:
        target().resolve_engine_config(pad_to_length=True, router_replay=True)
    assert names_field("pad_to_length", str(caught.value)), str(caught.value)
    assert target().resolve_engine_config(router_replay=True)["bucket"] is None


@needs("engine")
@pytest.mark.rules("R-ENGINE-4", "R-ENGINE-7")
def test_bucket_needs_remove_padding() -> None:
    """pad_to_length without remove-padding is rejected (erratum E-6), with it the bucket is
    used, and without pad_to_length the bucket is ignored."""
    with pytest.raises(ValueError):
        target().resolve_engine_config(pad_to_length=True, use_remove_padding=False)
    assert target().resolve_engine_config(pad_to_length=True,
                                          pad_to_length_bucket=256)["bucket"] == 256
    assert target().resolve_engine_config(pad_to_length_bucket=256)["bucket"] is None
