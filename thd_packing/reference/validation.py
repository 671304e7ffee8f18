"""Type and value checks shared by every entry point (spec §11, R-ERR-*).

Each check raises before any data is read, and names the field and the offending value.
"""

from __future__ import annotations

import math
import operator
from typing import Any

INT32_MAX = 2**31 - 1


def as_integer(name: str, value: Any) -> int:
    """R-ERR-1: an integer is anything `operator.index` accepts, except bool and anything with
    a bool dtype (spec §0)."""
    if (
        isinstance(value, bool)
        or type(value).__name__ == "bool_"
        or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")
    ):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, got {type(value).__name__} {value!r}"
        ) from None


def as_size(name: str, value: Any) -> int:
    """R-ERR-1, R-ERR-2: an integer >= 1."""
    number = as_integer(name, value)
    if number < 1:
        raise ValueError(f"{name} must be >= 1, got {number}")
    return number


def as_optional_size(name: str, value: Any) -> int | None:
    """R-ERR-2, R-ERR-3: None, or an integer >= 1."""
    if value is None:
        return None
    return as_size(name, value)


def as_bool(name: str, value: Any) -> bool:
    """R-ERR-1: flags are real bools, not truthy values."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def as_layout(value: Any) -> str:
    """R-ERR-1, R-ERR-4."""
    if not isinstance(value, str):
        raise TypeError(f"cp_layout must be a str, got {type(value).__name__} {value!r}")
    if value not in ("zigzag", "contiguous"):
        raise ValueError(f"cp_layout must be 'zigzag' or 'contiguous', got {value!r}")
    return value


def as_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """R-ERR-1 (not a str), R-ERR-12 (a str that names no convention of the field)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    if value not in choices:
        allowed = " or ".join(repr(choice) for choice in choices)
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return value


def as_fp8(value: Any, recipes: tuple[str, ...]) -> bool | str:
    """R-ERR-1, R-ERR-12: a bool (verl's use_fp8_padding) or the name of a recipe (R-FP8-1)."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"fp8 must be a bool or a recipe name (str), got {type(value).__name__} {value!r}"
        )
    if value not in recipes:
        allowed = ", ".join(repr(recipe) for recipe in recipes)
        raise ValueError(f"fp8 must be a bool or one of the recipes {allowed}, got {value!r}")
    return value


def as_max_num_seqs(value: Any) -> int | None:
    """R-ERR-1 (not an integer, bool included), R-ERR-12 (an integer < 1 or > INT32_MAX)."""
    if value is None:
        return None
    number = as_integer("max_num_seqs", value)
    if number < 1:
        raise ValueError(f"max_num_seqs must be None or >= 1, got {number}")
    if number > INT32_MAX:
        raise ValueError(f"max_num_seqs must be <= {INT32_MAX} (INT32_MAX), got {number}")
    return number


def as_cp_rank(value: Any, cp_size: int) -> int:
    """R-ERR-1, R-ERR-5."""
    rank = as_integer("cp_rank", value)
    if not 0 <= rank < cp_size:
        raise ValueError(f"cp_rank must be in [0, {cp_size}), got {rank}")
    return rank


def as_length(index: int, value: Any) -> int:
    """R-ERR-1, R-ERR-6, R-ERR-8."""
    length = as_integer(f"seqlens[{index}]", value)
    if length < 0:
        raise ValueError(f"seqlens[{index}] must be >= 0, got {length}")
    if length > INT32_MAX:
        raise ValueError(f"seqlens[{index}] must be <= {INT32_MAX}, got {length}")
    return length


def as_fixed_total(value: Any) -> int | None:
    """R-ERR-1 (not an integer, bool included), R-ERR-14 (an integer < 1 or > INT32_MAX)."""
    if value is None:
        return None
    number = as_integer("fixed_total", value)
    if number < 1:
        raise ValueError(f"fixed_total must be None or >= 1, got {number}")
    if number > INT32_MAX:
        raise ValueError(f"fixed_total must be <= {INT32_MAX} (INT32_MAX), got {number}")
    return number


def check_pad_value(
    value: Any, kind: str, limit: tuple[int, int] | float | None, name: str = "pad_value"
) -> None:
    """R-IN-5, R-ERR-1, R-ERR-10 (R-ERR-16 for `ignore_index`, checked the same way).

    `kind` is the dtype family: "b" (bool), "i"/"u" (integer), "f"/"c" (floating or complex).
    `limit` is the (low, high) integer range for integer dtypes and the largest finite value for
    floating ones (`None` for bool).
    """
    if not isinstance(value, bool | int | float):
        raise TypeError(
            f"{name} must be a bool, int or float, got {type(value).__name__} {value!r}"
        )
    if kind == "b":
        if value != 0 and value != 1:
            raise ValueError(f"{name} {value!r} is not representable in a bool dtype")
        return
    if kind in ("i", "u"):
        if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
            raise ValueError(f"{name} {value!r} is not representable in an integer dtype")
        assert isinstance(limit, tuple)
        low, high = limit
        if not low <= int(value) <= high:
            raise ValueError(f"{name} {value!r} is outside the dtype range [{low}, {high}]")
        return
    # Floating: NaN and infinities stand for themselves; finite values must not overflow.
    assert limit is not None and not isinstance(limit, tuple)
    if value == value and abs(value) != float("inf") and abs(value) > limit:
        raise ValueError(f"{name} {value!r} overflows the dtype (largest finite {limit})")
