"""Declared conventions (spec 1.1): a target's fixed `convention` and its convention
features decide what the strategies draw and what a pinned config is declined for."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings

from thd_packing.conformance import strategies as s
from thd_packing.conformance.protocol import BASE_FEATURES, Declared, fixed_bucket
from thd_packing.conformance.protocol import capabilities as declared_capabilities
from thd_packing.conformance.targets import TargetLoadError, load_target


def fake(**declared: Any) -> types.SimpleNamespace:
    """A target whose `declared` is Declared(**declared), packing with the reference."""
    ref = load_target("reference")
    return types.SimpleNamespace(name="x", pack=ref.pack, declared=Declared(**declared))


SEGMENT = declared_capabilities(fake(convention={"tail": "segment"}))
CP_ALIGN = declared_capabilities(fake(convention={"seq_align": "cp"}))
EVERY = frozenset(BASE_FEATURES) | {"tail_segment", "seq_align_cp", "fp8", "fp8_recipes",
                                    "static_metadata", "bucket", "contiguous", "seq_align_none",
                                    "tail_tokens", "labels_ignore"}
RING = declared_capabilities(fake(convention={"seq_align": "none"},
                                  lacks=frozenset({"zigzag", "tensor_parallel"})))


def test_fixed_convention_is_its_only_value() -> None:
    assert "tail_segment" in SEGMENT and "tail_last" not in SEGMENT
    assert "seq_align_tp_cp" in SEGMENT  # the other field keeps the default
    assert "seq_align_cp" in CP_ALIGN and "seq_align_tp_cp" not in CP_ALIGN
    plain = declared_capabilities(fake())
    assert {"tail_last", "seq_align_tp_cp"} <= plain and "tail_segment" not in plain
    # a capability the fixed convention contradicts is taken away
    both = declared_capabilities(fake(features=frozenset({"tail_segment"}),
                                      convention={"tail": "last"}))
    assert "tail_segment" not in both and "tail_last" in both


@pytest.mark.parametrize("convention", [{"tail": "middle"}, {"fp8": "mxfp8"},
                                        {"max_seqlen": "total"}])
def test_bad_convention_is_a_load_error(monkeypatch: pytest.MonkeyPatch,
                                        convention: dict[str, Any]) -> None:
    module = types.ModuleType("_fake_convention_target")
    module.TARGET = fake(convention=convention)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_fake_convention_target", module)
    with pytest.raises(TargetLoadError, match="convention"):
        load_target("_fake_convention_target:TARGET")


@settings(max_examples=100, deadline=None)
@given(s.configs(caps=SEGMENT))
def test_fixed_convention_always_named(config: dict[str, Any]) -> None:
    assert config["tail"] == "segment"
    assert "seq_align" not in config and "max_num_seqs" not in config
    assert config["fp8"] is False


@settings(max_examples=100, deadline=None)
@given(s.configs(caps=frozenset(BASE_FEATURES)))
def test_a_spec_1_0_target_sees_the_1_0_config(config: dict[str, Any]) -> None:
    assert set(config) == {"tp_size", "cp_size", "cp_layout", "fp8", "bucket",
                           "min_local_rows"}


def test_every_convention_is_drawn() -> None:
    seen: set[tuple[str, Any]] = set()

    @settings(max_examples=300, deadline=None, database=None)
    @given(s.configs(caps=EVERY))
    def collect(config: dict[str, Any]) -> None:
        for key in ("tail", "seq_align", "fp8", "max_num_seqs", "max_seqlen", "labels"):
            seen.add((key, config.get(key)))

    collect()
    for pair in [("tail", "last"), ("tail", "segment"), ("seq_align", "cp"),
                 ("tail", "tokens"), ("seq_align", "none"), ("labels", "ignore"),
                 ("labels", "roll"),
                 ("seq_align", "tp_cp"), ("fp8", "mxfp8"), ("fp8", True), ("fp8", False),
                 ("max_num_seqs", None), ("max_num_seqs", s.SAFE_MAX_NUM_SEQS),
                 ("max_seqlen", "total")]:
        assert pair in seen, pair


def test_declined_convention_values() -> None:
    assert s.declined(SEGMENT, {}) == ["tail_last"]  # absent means the spec default
    assert s.declined(SEGMENT, {"tail": "segment"}) == []
    assert s.declined(SEGMENT, {"tail": "segment", "fp8": "nvfp4"}) == ["fp8_recipes"]
    assert s.declined(CP_ALIGN, {"seq_align": "cp", "max_num_seqs": 4}) == ["static_metadata"]
    assert s.declined(CP_ALIGN, {"seq_align": "cp", "max_seqlen": "total"}) == [
        "static_metadata"]
    assert s.declined(EVERY, {"tail": "segment", "seq_align": "cp", "fp8": "block",
                              "max_num_seqs": 3, "max_seqlen": "total"}) == []
    # an invalid value is the rejection tests' business, not a declined value
    assert s.declined(SEGMENT, {"tail": "middle"}) == []


def test_unknown_fields_of_invalid_values() -> None:
    plain = declared_capabilities(fake())
    assert s.unknown_fields(plain, {"tail": "middle"}) == ["tail_tokens"]
    assert s.unknown_fields(SEGMENT, {"tail": "middle"}) == []  # it implements tail
    assert s.unknown_fields(plain, {"fp8": "mxfp4"}) == ["fp8_recipes"]
    assert s.unknown_fields(plain, {"max_num_seqs": 0}) == ["static_metadata"]
    assert s.unknown_fields(EVERY, {"tail": 1, "seq_align": "tp", "max_seqlen": "max"}) == []


def test_fit_static() -> None:
    assert s.fit_static({"max_num_seqs": None}, 5) == {"max_num_seqs": None}
    assert s.fit_static({"max_num_seqs": 66}, 5)["max_num_seqs"] == 5
    assert s.fit_static({"max_num_seqs": 66, "tail": "segment"}, 5, 2)["max_num_seqs"] == 8


@settings(max_examples=200, deadline=None)
@given(s.configs(caps=EVERY))
def test_drawn_1_2_configs_are_valid(config: dict[str, Any]) -> None:
    """seq_align='none' and tail='tokens' only where R-ERR-14 allows them (contiguous or cp =
    1; tokens without max_num_seqs): every drawn config builds."""
    from thd_packing import reference

    reference.PackConfig(**config)


@settings(max_examples=100, deadline=None)
@given(s.configs(caps=RING))
def test_ring_convention_is_always_named(config: dict[str, Any]) -> None:
    """A target that fixes seq_align='none' (ring attention, Ulysses) always gets it, on the
    contiguous layout or cp = 1."""
    assert config["seq_align"] == "none"
    assert config["cp_size"] == 1 or config["cp_layout"] == "contiguous"
    assert s.declined(RING, {"cp_size": 2, "cp_layout": "contiguous"}) == ["seq_align_tp_cp"]


def test_fit_fixed_total() -> None:
    """fixed_total: the smallest total the batch needs plus slack steps of M (R-TOTAL-7);
    never with a bucket."""
    assert s.fit_fixed_total({"cp_size": 2}, (3, 5), 0)["fixed_total"] == 12
    assert s.fit_fixed_total({"cp_size": 2}, (3, 5), 2)["fixed_total"] == 20
    assert s.fit_fixed_total({"bucket": 8}, (3,), 1) == {"bucket": 8}
    assert s.fit_fixed_total({}, (0,), 0)["fixed_total"] == 1


def test_spec_1_2_fields_of_a_target_without_them_are_declined() -> None:
    """A config written once for every target (a spec example) that sets fixed_total or
    ignore_index is declined by a target without those features, valid value or not."""
    plain = declared_capabilities(fake())
    assert s.declined(plain, {"fixed_total": 16}) == ["fixed_total"]
    assert s.unknown_fields(plain, {"fixed_total": 0}) == ["fixed_total"]
    assert s.unknown_fields(plain, {"labels": "ignore", "ignore_index": True}) == [
        "labels_ignore"]
    fixed = declared_capabilities(fake(features=frozenset({"fixed_total"})))
    assert s.declined(fixed, {"fixed_total": 16}) == []
    assert s.unknown_fields(fixed, {"fixed_total": 0}) == []


# A fixed bucket (AReaL pads every micro-batch to its 256-row page whatever the caller asks).
PAGE = declared_capabilities(fake(convention={"tail": "segment", "bucket": 256}))


def test_fixed_bucket_loads_and_is_the_only_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("_fake_bucket_target")
    module.TARGET = fake(convention={"bucket": 256})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_fake_bucket_target", module)
    assert load_target("_fake_bucket_target:TARGET").declared.convention == {"bucket": 256}
    assert "bucket" in PAGE and fixed_bucket(PAGE) == 256
    assert fixed_bucket(SEGMENT) is None
    # a config with another bucket, or none, is declined; the fixed one is not
    assert s.declined(PAGE, {"bucket": 512, "tail": "segment"}) == ["bucket=256"]
    assert s.declined(PAGE, {"tail": "segment"}) == ["bucket=256"]
    assert s.declined(PAGE, {"bucket": 256, "tail": "segment"}) == []
    # the declined name is no capability of the target, so require skips the case
    assert not set(s.declined(PAGE, {"tail": "segment"})) & PAGE


@pytest.mark.parametrize("bucket", [0, -256, True, 256.0, "256", None])
def test_bad_fixed_bucket_is_a_load_error(monkeypatch: pytest.MonkeyPatch, bucket: Any) -> None:
    module = types.ModuleType("_fake_bucket_target")
    module.TARGET = fake(convention={"bucket": bucket})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_fake_bucket_target", module)
    with pytest.raises(TargetLoadError, match="bucket"):
        load_target("_fake_bucket_target:TARGET")


@settings(max_examples=100, deadline=None)
@given(s.configs(caps=PAGE))
def test_fixed_bucket_always_drawn(config: dict[str, Any]) -> None:
    assert config["bucket"] == 256 and config["tail"] == "segment"
