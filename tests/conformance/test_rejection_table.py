"""The rejection table (conformance/rejections.py) agrees with the literal reference: each row
with a reference entry point gets the row's class from it (None: accepted), and the reference's
own message names what the row asks of a target's."""

from __future__ import annotations

from typing import Any

import pytest

from thd_packing.conformance.compare import names_field, names_number, names_object, outcome
from thd_packing.conformance.protocol import METHODS
from thd_packing.conformance.rejections import IfCap, Named, Row, base_config, rows
from thd_packing.conformance.targets.reference import ReferenceTarget
from thd_packing.conformance.test_rejections import call

BASE = base_config(frozenset({"zigzag"}))


def _named(item: Any, message: str) -> bool:
    if isinstance(item, IfCap):
        return _named(item.item, message)
    if isinstance(item, Named):
        return names_object(item.obj, message)
    if isinstance(item, int):
        return names_number(item, message)
    return any(names_field(word, message) for word in item.split("|"))


ORACLE = [pytest.param(row, id=f"{rule}-{row.name}") for rule, row in rows()
          if call(row, BASE, ReferenceTarget()).reference is not None]


def test_every_rule_has_rows() -> None:
    """The table is keyed by spec rule IDs, and the oracle covers most of it."""
    keys = {rule for rule, _ in rows()}
    assert all(k.startswith("R-") for k in keys), keys
    assert {"R-ERR-1", "R-ERR-2", "R-ERR-3", "R-ERR-4", "R-ERR-5", "R-ERR-6", "R-ERR-7",
            "R-ERR-8", "R-ERR-9", "R-ERR-10", "R-ERR-11", "R-ERR-12", "R-ERR-13"} <= keys
    assert len(ORACLE) > 0.8 * len(rows())


@pytest.mark.parametrize("row", ORACLE)
def test_row_agrees_with_reference(row: Row) -> None:
    reference_call = call(row, BASE, ReferenceTarget()).reference
    assert reference_call is not None
    got = outcome(reference_call)
    if row.error is None:
        assert got is None, f"{row.name}: the reference raises {got!r}"
        return
    assert type(got) is row.error, f"{row.name}: the reference raises {got!r}"
    missing = [item for item in row.names if not _named(item, str(got))]
    assert not missing, f"{row.name}: the reference's message {str(got)!r} lacks {missing}"


# A row's entry point -> the capability a target has it under (protocol.METHODS, and the
# methods that come with one of them).
_CAPABILITY_OF = {**{method: cap for cap, method in METHODS.items()},
                  "plan_as_is": "api_type_checks", "unpack_as_is": "api_type_checks",
                  "packed_postprocess": "packed_seqs", "packed_gathered": "packed_seqs",
                  "native_pack": "native_scalars"}


@pytest.mark.parametrize(("rule", "row"), [pytest.param(rule, row, id=f"{rule}-{row.name}")
                                           for rule, row in rows()])
def test_row_needs_its_entry_point(rule: str, row: Row) -> None:
    """A row that calls an optional method needs that method's capability: a target without
    the method has the row declined, never failed with an AttributeError charged to `rule`."""
    cap = _CAPABILITY_OF.get(row.api)
    assert row.api == "pack" or cap is not None, f"{row.api}: not a protocol entry point"
    assert cap is None or cap in row.needs, f"{row.name} calls {row.api}, needs {row.needs}"
