"""How a rejection is judged (spec section 11), shared by the test_reject_* modules: the
target raises the reference's error class, before touching data, and leaves its inputs
unchanged; where the reference accepts (valid look-alikes: NumPy integers, np.float64 pad
values), the target must accept too and give the reference's rows. One error's class and
message are judged by `errors.py` (through `h`); this module is the test_reject_* scaffolding
on top, and reads the loaded target at import, so the harness must not import it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import reference

from . import harness as h


def _base_config() -> dict[str, Any]:
    """Two CP ranks in a layout the target has (zigzag, else contiguous), else one rank, under
    the target's fixed convention: a rejection test must not fail on a layout or convention the
    target declines."""
    try:
        caps = h.caps()
    except RuntimeError:  # imported outside a suite run (no target loaded)
        caps = frozenset({"zigzag"})
    layout = "zigzag" if "zigzag" in caps else "contiguous" if "contiguous" in caps else None
    base = {"tp_size": 1, "cp_size": 2 if layout else 1, "cp_layout": layout or "zigzag",
            "fp8": False, "bucket": None, "min_local_rows": None}
    try:
        return h.with_convention(base)  # a target's fixed convention (verl-fsdp: 'segment')
    except RuntimeError:
        return base


BASE_CONFIG: dict[str, Any] = _base_config()


def two_sequences(dtype: str = "int64") -> list[np.ndarray]:
    """The batch every rejection test varies one field against."""
    return [np.arange(5).astype(dtype), np.arange(3).astype(dtype)]


def length_rows(seqlens: Any) -> int:
    """The rows a packer without length checks would build for `seqlens` (their integer sum,
    0 for anything that is not a sequence of integers), to respect a target's `max_rows`."""
    try:
        return sum(max(int(n), 0) for n in seqlens if not isinstance(n, bool | float | str))
    except (TypeError, ValueError):
        return 0


def compare_pack(seqs: Any, config: dict[str, Any], cp_rank: Any = 0, need_roll: Any = False,
                  pad_value: Any = 0, rules: Any = None, field: str | None = None) -> None:
    """Same outcome class as the reference; inputs unchanged; same rows where both accept."""
    what = f"pack(config={config}, cp_rank={cp_rank!r}, need_roll={need_roll!r}, " \
        f"pad_value={pad_value!r})"
    want_holder: list[Any] = []

    def ref() -> None:
        want_holder.append(reference.pack_thd(seqs, reference.PackConfig(**config), cp_rank,
                                              need_roll=need_roll, pad_value=pad_value))

    want = h.outcome(ref)
    before = h.snapshot(seqs)
    got_holder: list[Any] = []
    got = h.outcome(lambda: got_holder.append(
        h.target().pack(seqs, dict(config), cp_rank, need_roll=need_roll, pad_value=pad_value)))
    if h.snapshot(seqs) != before:
        raise h.RuleViolation(f"{what}: the call changed its input arrays", {"R-ERR-1"})
    names: tuple[str, ...] = (field,) if field else ()
    if field == "bucket":
        names = ("bucket", "pad_to_length_bucket")
    h.check_same_rejection(want, got, what, rules(want) if callable(rules) else rules, names)
    if want is None and got is None:
        rows, ref_rows = np.asarray(got_holder[0][0]), want_holder[0][0]
        if not h.same_value(rows, ref_rows):
            # A different row count is a different total (the rows follow from it); the same
            # count with other values is a row fault.
            rule = "R-TOTAL-4" if rows.shape[:1] != ref_rows.shape[:1] else "R-ROW-1"
            raise h.RuleViolation(f"{what}: accepted, but rows {rows.tolist()} differ from the "
                                  f"spec's {ref_rows.tolist()}", {rule})


def by_class(value_rule: str, type_rule: str = "R-ERR-1") -> Any:
    """The rule a mismatch disproves, from the error class the spec expects."""
    def pick(want: BaseException | None) -> set[str]:
        if isinstance(want, TypeError):
            return {type_rule}
        return {value_rule}
    return pick


def names_one_of(names: str, message: str) -> bool:
    """"a|b": the message names either (the batch parameter is `seqs`; messages may say
    "batch")."""
    return any(h._names(name, message) for name in names.split("|"))
