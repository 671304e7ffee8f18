"""The planner's choice as text to paste: `PackConfig(...)`, `resolve_engine_config(...)` and
verl's engine YAML keys, with the fields verl has no key for named rather than dropped.

The YAML keys are verl 0.9.1's `McoreEngineConfig` (`verl/trainer/config/engine/megatron.yaml`):
a trainer sets them under its engine section, e.g. `actor_rollout_ref.actor.megatron`.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import impl

from .settings import PackSettings

# PackConfig field -> verl engine key, where the value carries over unchanged.
VERL_KEYS = {"tp_size": "tensor_model_parallel_size", "cp_size": "context_parallel_size"}
# Why a PackConfig field has no verl engine key (printed when the value is not the default).
NO_VERL_KEY = {
    "cp_layout": "verl picks the layout from the model (contiguous for dsv4_hybrid attention)",
    "fp8": "verl pads for FP8 when the Megatron model's fp8 is 'e4m3' or 'hybrid'; no recipes",
    "min_local_rows": "no engine key",
    "tail": "verl puts T - S on the last sequence ('last')",
    "seq_align": "verl aligns each sequence to tp * cp * 2 ('tp_cp')",
    "max_num_seqs": "static metadata: no engine key",
    "max_seqlen": "static metadata: no engine key",
    "fixed_total": "verl's bucket is a multiple, not one fixed total",
}


def _defaults() -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(impl.PackConfig)}


def recommended_config(settings: PackSettings, bucket: int | None,
                       max_num_seqs: int) -> dict[str, Any]:
    """PackConfig keyword arguments for the choice: with a bucket or a fixed total, static
    metadata too (R-STATIC-3: then every graph key is fixed); without, the totals vary anyway."""
    kwargs = settings.config_kwargs(bucket)
    if bucket is not None or settings.fixed_total is not None:
        kwargs.update(max_num_seqs=max_num_seqs, max_seqlen="total")
    return kwargs


def _changed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The fields that differ from PackConfig's defaults, in PackConfig's field order."""
    defaults = _defaults()
    return {name: kwargs[name] for name in defaults
            if name in kwargs and (kwargs[name] != defaults[name]
                                   or type(kwargs[name]) is not type(defaults[name]))}


def _call(name: str, kwargs: dict[str, Any]) -> str:
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


def packconfig_text(kwargs: dict[str, Any]) -> str:
    """`PackConfig(...)` naming the non-default fields; `eval` of it gives the same config."""
    return _call("PackConfig", _changed(kwargs))


def engine_call_text(kwargs: dict[str, Any]) -> str | None:
    """`resolve_engine_config(...)` for the same config, or None where it has no flag for a
    field (an FP8 recipe name, `tail`, `seq_align`, ...)."""
    accepted = set(inspect.signature(impl.resolve_engine_config).parameters)
    flags: dict[str, Any] = {}
    for name, value in _changed(kwargs).items():
        if name == "bucket":
            flags.update(pad_to_length=True, pad_to_length_bucket=value)
        elif name == "fp8" and isinstance(value, bool):
            flags["use_fp8_padding"] = value
        elif name in accepted and name != "fp8":
            flags[name] = value
        else:
            return None
    return _call("resolve_engine_config", flags)


def verl_engine_keys(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """verl's engine keys for the config, and each non-default field verl has no key for, with
    why."""
    keys: dict[str, Any] = {VERL_KEYS[name]: kwargs.get(name, 1) for name in VERL_KEYS}
    bucket = kwargs.get("bucket")
    keys["use_remove_padding"] = True  # THD packing is verl's remove-padding path
    keys["pad_to_length"] = bucket is not None
    if bucket is not None:
        keys["pad_to_length_bucket"] = bucket
    missing = {name: NO_VERL_KEY.get(name, "no engine key") for name in _changed(kwargs)
               if name not in VERL_KEYS and name != "bucket"}
    return keys, missing


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_recommendation(kwargs: dict[str, Any]) -> str:
    """The block the planner prints: Python to paste, then YAML to paste (comments for the
    fields verl has no key for)."""
    engine = engine_call_text(kwargs)
    keys, missing = verl_engine_keys(kwargs)
    lines = ["config to paste (Python; `from <your copy> import PackConfig, "
             "resolve_engine_config`):", f"    {packconfig_text(kwargs)}"]
    lines.append(f"    {engine}" if engine is not None else
                 "    (resolve_engine_config has no flag for some of these fields: use "
                 "PackConfig)")
    lines.append("verl engine YAML (McoreEngineConfig keys, e.g. under "
                 "actor_rollout_ref.actor.megatron):")
    lines += [f"    {key}: {_yaml_scalar(value)}" for key, value in keys.items()]
    lines += [f"    # no verl key: {name}={kwargs[name]!r} ({why})"
              for name, why in missing.items()]
    return "\n".join(lines)
