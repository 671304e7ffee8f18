"""Target loading: built-in names are files with a `TARGET`, anything else is `module:attr`,
and a target that does not follow the protocol is a load error naming what is wrong."""

from __future__ import annotations

import sys
import types

import pytest

from thd_packing.conformance.protocol import Declared, capabilities
from thd_packing.conformance.targets import TargetLoadError, builtin_names, load_target


def test_builtin_names_are_the_files_with_a_target() -> None:
    names = builtin_names()
    assert {"impl", "reference", "verl", "verl-fsdp", "megatron-core", "openrlhf"} <= set(names)
    assert not any(name.startswith("-") for name in names)  # private helpers (_wheel) left out


def test_unknown_name_lists_the_builtins() -> None:
    with pytest.raises(TargetLoadError, match="megatron-core"):
        load_target("no-such-packer")


def fake_module(monkeypatch: pytest.MonkeyPatch, **attrs: object) -> str:
    module = types.ModuleType("_fake_loading_target")
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_declared_must_be_a_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    target = types.SimpleNamespace(name="x", pack=lambda *a, **k: None,
                                   declared={"features": {"bucket"}})
    name = fake_module(monkeypatch, T=target)
    with pytest.raises(TargetLoadError, match="not conformance.protocol.Declared"):
        load_target(f"{name}:T")


def test_unknown_feature_is_a_load_error(monkeypatch: pytest.MonkeyPatch) -> None:
    target = types.SimpleNamespace(name="x", pack=lambda *a, **k: None,
                                   declared=Declared(features=frozenset({"warp_drive"})))
    name = fake_module(monkeypatch, T=target)
    with pytest.raises(TargetLoadError, match="warp_drive"):
        load_target(f"{name}:T")


def test_methods_are_found_by_presence() -> None:
    class Minimal:
        name = "minimal"

        def pack(self, *args: object, **kwargs: object) -> None: ...

    class WithPlan(Minimal):
        def plan(self, seqlens: object, config: object) -> dict[str, object]:
            return {}

    class PlanRemoved(WithPlan):
        plan = None  # type: ignore[assignment]

    assert "plan" not in capabilities(Minimal())
    assert "plan" in capabilities(WithPlan())
    assert "plan" not in capabilities(PlanRemoved())
    # the defaults: every base feature and every validation, no optional feature
    plain = capabilities(Minimal())
    assert {"zigzag", "contiguous", "zero_length", "config_checks",
            "need_roll_type_checks"} <= plain
    assert not {"bucket", "fp8", "need_roll", "pad_value"} & plain


def test_a_builtin_file_names_one_of_its_targets() -> None:
    """`--target areal-bins:ArealFFD`: a file of several binners, one by name; a binner with no
    `pack` loads (its roles pick its tiers)."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("areal")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("areal is not installed (pip install --no-deps areal==1.0.4)")
    target = load_target("areal-bins:ArealFFD")
    assert target.name == "areal-ffd" and not hasattr(target, "pack")


def test_a_target_with_no_role_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    name = fake_module(monkeypatch, T=types.SimpleNamespace(name="x"))
    with pytest.raises(TargetLoadError, match="'bin' \\(a binner\\)"):
        load_target(f"{name}:T")
