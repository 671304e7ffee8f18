"""The shared machinery of the conformance tests, as one namespace: tests use
`from . import harness as h` and `h.check_rows(...)`, wherever a piece lives. The oracle is
always `reference/`; only specified slots are compared (`reference.specified_slots`, spec
section 0 "slot").

The pieces, one concept a module:

- `under_test.py`: the target under test (the suite's only mutable state, set by conftest.py)
  and what it declares: capabilities, declined features and how a test skips them.
- `running.py`: the reference's and the target's pack on every rank, calling the target as on
  valid input and reading its outputs.
- `compare.py`: results against the reference (rows, positions, meta, plan stages), and unpack
  against the input batch.
- `errors.py`: a raised error against the reference's (class, the message naming the field).
- `gradients.py`: the local rows' gradient through the Megatron adapter.
- `verdicts.py`: how a failed check ends (RuleViolation, TargetError).
"""

from __future__ import annotations

import reference  # h.reference: test_differential reaches the oracle through the harness

from .compare import (
    META_RULES,
    check_meta,
    check_positions,
    check_rows,
    check_unpack_returns_batch,
    describe_row,
    meta_mismatches,
    meta_rules,
    num_seqs,
    plan_stage,
    same_bits,
    same_value,
    segment_count_problems,
)
from .errors import (
    FIELD_NAMES,
    _names,
    check_same_rejection,
    names_number,
    names_object,
    outcome,
    snapshot,
)
from .gradients import check_local_grad
from .running import (
    META_ARRAYS,
    META_INTS,
    REJECTIONS,
    RankResult,
    call_target,
    readable_output,
    ref_config,
    run_reference,
    run_target,
    run_target_packed,
    valid_input_rules,
)
from .under_test import (
    DECLINED,
    assume_declared,
    caps,
    declined_by,
    max_rows,
    needs,
    prop_settings,
    require,
    require_config,
    require_rows,
    set_target,
    skip_reason,
    target,
    target_spec,
    with_convention,
    within_rows,
)
from .verdicts import RuleViolation, TargetError

__all__ = [
    # under_test
    "DECLINED", "assume_declared", "caps", "declined_by", "max_rows", "needs", "prop_settings",
    "require", "require_config", "require_rows", "set_target", "skip_reason", "target",
    "target_spec", "with_convention", "within_rows",
    # running
    "META_ARRAYS", "META_INTS", "REJECTIONS", "RankResult", "call_target", "readable_output",
    "ref_config", "run_reference", "run_target", "run_target_packed",
    "valid_input_rules",
    # compare
    "META_RULES", "check_meta", "check_positions", "check_rows", "check_unpack_returns_batch",
    "describe_row", "meta_mismatches", "meta_rules", "num_seqs", "plan_stage", "same_bits",
    "same_value", "segment_count_problems",
    # errors (`_names` too: test modules call `h._names`)
    "FIELD_NAMES", "_names", "check_same_rejection", "names_number", "names_object", "outcome",
    "snapshot",
    # gradients, verdicts, the oracle
    "check_local_grad", "RuleViolation", "TargetError", "reference",
]
