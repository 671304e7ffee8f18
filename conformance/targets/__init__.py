"""Target loading: built-in names (impl, reference, verl) or any `module:attr`."""

from __future__ import annotations

import importlib
from typing import Any

from .protocol import BASE_FEATURES, CAPABILITIES, Target, convention_of

BUILTIN = {
    "impl": "conformance.targets.impl:make_target",
    "reference": "conformance.targets.reference:make_target",
    "verl": "conformance.targets.verl:make_target",
    "verl-fsdp": "conformance.targets.verl_fsdp:make_target",
    "megatron-core": "conformance.targets.megatron_core:make_target",
    "openrlhf": "conformance.targets.openrlhf:make_target",
}


class TargetLoadError(Exception):
    """The target could not be loaded; the suite stops with this message."""


def load_target(spec: str) -> Any:
    """A built-in name or `module:attr`; attr is a target object, a class, or a factory."""
    path = BUILTIN.get(spec, spec)
    if ":" not in path:
        raise TargetLoadError(
            f"unknown target {spec!r}: use one of {sorted(BUILTIN)} or 'module:attr'"
        )
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # surfaced verbatim: a missing dependency must fail loudly
        raise TargetLoadError(f"target {spec!r}: cannot import {module_name!r}: {exc!r}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        raise TargetLoadError(
            f"target {spec!r}: {module_name!r} has no attribute {attr!r}"
        ) from exc
    if not hasattr(obj, "pack") or isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise TargetLoadError(f"target {spec!r}: creating the target failed: {exc!r}") from exc
    for needed in ("name", "capabilities", "pack"):
        if not hasattr(obj, needed):
            raise TargetLoadError(f"target {spec!r} does not follow the protocol: no {needed!r}")
    unknown = set(obj.capabilities) - set(CAPABILITIES)
    if unknown:
        raise TargetLoadError(f"target {spec!r} declares unknown capabilities {sorted(unknown)}")
    unknown = set(getattr(obj, "declines", ()) or ()) - set(BASE_FEATURES)
    if unknown:
        raise TargetLoadError(f"target {spec!r} declines unknown base features {sorted(unknown)}")
    try:
        convention_of(obj)
    except ValueError as exc:
        raise TargetLoadError(f"target {spec!r}: {exc}") from exc
    if not isinstance(obj, Target):
        raise TargetLoadError(f"target {spec!r} does not follow the protocol")
    return obj
