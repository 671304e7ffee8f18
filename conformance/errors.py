"""An error the target raises against the reference's (spec section 11): the outcome of a call,
the same class, a message that names the field and the offending value, inputs left unchanged.
Used by every tier and by test_rejections.py.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .verdicts import RuleViolation


def snapshot(seqs: Any) -> list[bytes] | None:
    """Bytes of every array of a batch, to prove a rejected call left its inputs unchanged."""
    if not isinstance(seqs, list | tuple):
        return None
    return [np.asarray(s).tobytes() if isinstance(s, np.ndarray) else repr(s).encode()
            for s in seqs]


def outcome(fn: Any) -> BaseException | None:
    try:
        fn()
    except Exception as exc:  # the exception is the result under test
        return exc
    return None


def check_same_rejection(want: BaseException | None, got: BaseException | None,
                         what: str, rules: set[str] | None = None,
                         names: tuple[str, ...] = ()) -> None:
    """R-ERR-*: the target raises the reference's error class (a subclass is fine), or accepts
    what the reference accepts. With `rules`, a failure names exactly those rules."""
    def fail(message: str) -> None:
        if rules:
            raise RuleViolation(message, rules)
        raise AssertionError(message)

    if want is None:
        if got is not None:
            fail(f"{what}: the spec accepts this, the target raised {got!r}")
        return
    if got is None:
        fail(f"{what}: the spec raises {type(want).__name__} ({want}), the target accepted it")
    elif not isinstance(got, type(want)):
        fail(f"{what}: the spec raises {type(want).__name__} ({want}), the target raised "
             f"{type(got).__name__} ({got})")
    elif (names and any(_names(n, str(want)) for n in names)
          and not any(_names(n, str(got)) for n in names)):
        # Spec section 11: the message names the field (and the offending value).
        fail(f"{what}: the message {str(got)!r} does not name the field {names[0]!r}")
    else:
        missing = [n for n in FIELD_NAMES if _names(n, str(want)) and not _names(n, str(got))]
        if missing:
            fail(f"{what}: the spec's message names {missing}, the target's {str(got)!r} "
                 "does not (spec section 11: the message names the field)")


def _names(name: str, message: str) -> bool:
    """The message names the field as a word (not inside another identifier)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


def names_number(number: int, message: str) -> bool:
    """The message shows `number` as a whole number (not inside a longer one)."""
    return re.search(rf"(?<![0-9.]){number}(?![0-9])", message) is not None


def names_object(obj: Any, message: str) -> bool:
    """The message names an offending object that has no short value (a container, an array,
    an object of the wrong type) by its type name or its repr (spec section 11)."""
    return _names(type(obj).__name__, message) or repr(obj) in message


# Names an error message must repeat when the reference's message uses them (spec section 11).
FIELD_NAMES = ("tp_size", "cp_size", "cp_layout", "fp8", "bucket", "min_local_rows", "cp_rank",
               "need_roll", "pad_value", "seqlens", "pad_to_length", "pad_to_length_bucket",
               "use_remove_padding", "dynamic_context_parallel", "distillation_use_topk",
               "router_replay", "use_fp8_padding", "shards", "local_rows", "total", "tail",
               "seq_align", "max_num_seqs", "max_seqlen")
