"""Base features a target may lack (`Declared.lacks`): tensor parallelism and zigzag CP sharding.

verl's FSDP path and OpenRLHF have neither; without a way to decline them every drawn tp > 1 or
zigzag cp > 1 case failed with their NotImplementedError and hid the rest.
"""

from __future__ import annotations

import types

import pytest
from hypothesis import given, settings

from thd_packing.conformance import strategies as s
from thd_packing.conformance.protocol import BASE_FEATURES, Declared
from thd_packing.conformance.targets import TargetLoadError, load_target

# The spec's default convention (base features too, protocol.BASE_FEATURES).
DEFAULT_CONVENTION = frozenset({"tail_last", "seq_align_tp_cp"})
CONTIGUOUS_ONLY = frozenset({"contiguous"}) | DEFAULT_CONVENTION
NEITHER = DEFAULT_CONVENTION


@settings(max_examples=200, deadline=None)
@given(s.configs(caps=CONTIGUOUS_ONLY))
def test_declined_tp_and_zigzag_are_never_drawn(config: dict) -> None:
    assert config["tp_size"] == 1
    assert config["cp_size"] == 1 or config["cp_layout"] == "contiguous"


@settings(max_examples=100, deadline=None)
@given(s.configs(caps=NEITHER))
def test_without_zigzag_or_contiguous_cp_is_one(config: dict) -> None:
    assert (config["tp_size"], config["cp_size"]) == (1, 1)


@settings(max_examples=200, deadline=None)
@given(s.configs(caps=frozenset(BASE_FEATURES) | {"contiguous"}))
def test_declared_base_features_are_drawn(config: dict) -> None:
    # nothing is forced when the features are there: just valid sizes and layouts
    assert config["tp_size"] >= 1 and config["cp_layout"] in ("zigzag", "contiguous")


def test_declined_names_the_base_features() -> None:
    zz = {"tp_size": 2, "cp_size": 2, "cp_layout": "zigzag"}
    assert s.declined(CONTIGUOUS_ONLY, zz) == ["tensor_parallel", "zigzag"]
    assert s.declined(CONTIGUOUS_ONLY | set(BASE_FEATURES), zz) == []
    assert s.declined(CONTIGUOUS_ONLY, {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag"}) == []


def test_unknown_declines_are_a_load_error(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("_fake_declining_target")
    target = load_target("reference")
    fake = types.SimpleNamespace(name="x", pack=target.pack,
                                 declared=Declared(lacks=frozenset({"warp_drive"})))
    module.TARGET = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "_fake_declining_target", module)
    with pytest.raises(TargetLoadError, match="warp_drive"):
        load_target("_fake_declining_target:TARGET")
