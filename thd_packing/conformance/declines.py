"""What a case asks of a target: the capabilities a config, batch or call uses that a target
does not declare (`declined`, `unknown_fields`), and a drawn config fitted to a convention the
target fixes per layout (`fit_layout`)."""

from __future__ import annotations

from typing import Any

from .protocol import (
    ALL_EMPTY,
    CONVENTION_DEFAULTS,
    CONVENTION_VALUES,
    FP8_RECIPES,
    OMITS_ZERO_LENGTH,
    fixed_bucket,
    layout_conventions,
)

# Features a config may draw, each behind the capability of the same name.
CONFIG_FEATURES = ("bucket", "min_local_rows")


def supported(field_values: dict[Any, str | None], has: Any) -> list[Any]:
    """The values of a convention field whose capability `has` holds (None: every target)."""
    return [value for value, cap in field_values.items() if cap is None or has(cap)]


def fit_layout(config: dict[str, Any], caps: frozenset[str], contiguous: bool, *,
               keep_layout: bool = False) -> None:
    """A convention fixed per layout (protocol.LAYOUTS): the drawn value kept, on a layout whose
    convention it is where the target has that layout (not with `keep_layout`); else the drawn
    layout's value."""
    for key, by_layout in layout_conventions(caps).items():
        value = config.get(key, CONVENTION_DEFAULTS[key])
        if by_layout.get(config["cp_layout"]) == value:
            continue
        usable = {"zigzag": config["cp_size"] == 1 or "zigzag" in caps,
                  "contiguous": config["cp_size"] == 1 or contiguous}
        layouts = [layout for layout, v in by_layout.items()
                   if v == value and usable[layout] and not keep_layout]
        if layouts:
            config["cp_layout"] = layouts[0]
        else:
            config[key] = by_layout[config["cp_layout"]]


def declined(caps: frozenset[str], config: dict[str, Any] | None = None,
             lengths: Any = None, trail: tuple[int, ...] = ()) -> list[str]:
    """The capabilities a case uses that `caps` lacks (a pinned @example, written once for every
    target, is declined by a target without one of its features); invalid values are left to
    the rejection tests."""
    config = config or {}
    out = []
    fp8 = config.get("fp8", False)
    if isinstance(fp8, str):
        if fp8 in FP8_RECIPES and "fp8_recipes" not in caps:
            out.append("fp8_recipes")
    elif fp8 not in (None, False) and "fp8" not in caps:
        out.append("fp8")
    for key, values in CONVENTION_VALUES.items():
        value = config.get(key, CONVENTION_DEFAULTS[key])
        if not isinstance(value, str) or not supported(values, caps.__contains__):
            continue  # no value of the field at all: a capability set written before 1.1
        cap = values.get(value)
        if cap is not None and cap not in caps:
            out.append(cap)
    mns = config.get("max_num_seqs")
    if mns is not None and "static_metadata" not in caps and "static_metadata" not in out:
        out.append("static_metadata")
    if config.get("fixed_total") is not None and "fixed_total" not in caps:
        out.append("fixed_total")
    for key, by_layout in layout_conventions(caps).items():  # a convention per layout
        layout = str(config.get("cp_layout", "zigzag"))
        value = config.get(key, CONVENTION_DEFAULTS[key])
        if layout in by_layout and value != by_layout[layout]:
            out.append(f"{key}={value}@{layout}")
    fixed = fixed_bucket(caps)  # a target that always pads to one bucket: no other one
    if fixed is not None and config.get("bucket") != fixed:
        out.append(f"bucket={fixed}")
    for feature in CONFIG_FEATURES:
        if config.get(feature) not in (None, False) and feature not in caps:
            out.append(feature)
    if (config.get("cp_layout") == "contiguous" and int(config.get("cp_size", 1)) > 1
            and "contiguous" not in caps):
        out.append("contiguous")
    if int(config.get("tp_size", 1)) > 1 and "tensor_parallel" not in caps:
        out.append("tensor_parallel")
    if (config.get("cp_layout", "zigzag") == "zigzag" and int(config.get("cp_size", 1)) > 1
            and "zigzag" not in caps):
        out.append("zigzag")
    if lengths is not None and "zero_length" not in caps and any(int(n) == 0 for n in lengths):
        out.append("zero_length")
    if lengths is not None and OMITS_ZERO_LENGTH in caps and len(lengths) and \
            not any(int(n) for n in lengths):
        out.append(ALL_EMPTY)
    if trail and "trailing_dims" not in caps:
        out.append("trailing_dims")
    return out


def unknown_fields(caps: frozenset[str], config: dict[str, Any]) -> list[str]:
    """For a config invalid on purpose: the capabilities of the convention fields it sets that
    the target does not implement at all (it cannot be asked to reject their values)."""
    out = []
    for key, values in CONVENTION_VALUES.items():
        if key in config and config[key] not in values:
            caps_of = [cap for cap in values.values() if cap is not None]
            implements = any(cap in caps for v, cap in values.items()
                             if cap is not None and v != CONVENTION_DEFAULTS[key])
            if not implements:
                out.append(caps_of[-1])
    fp8 = config.get("fp8", False)
    if isinstance(fp8, str) and fp8 not in FP8_RECIPES and "fp8_recipes" not in caps:
        out.append("fp8_recipes")
    if "max_num_seqs" in config and config["max_num_seqs"] is not None \
            and "static_metadata" not in caps:
        out.append("static_metadata")
    if config.get("fixed_total") is not None and "fixed_total" not in caps:
        out.append("fixed_total")
    if "ignore_index" in config and "labels_ignore" not in caps:
        out.append("labels_ignore")
    return sorted(set(out))
