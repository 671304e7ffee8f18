"""The mask form of a batch (R-IN-7, capability `mask_form`): a padded `[B, S, *trail]` array and
a bool mask `[B, S]` pack exactly as the list of the sequences `values[i][mask[i]]`.

The masks are drawn to hit what a fast packer of this form gets wrong (masks.mask_rows):
runs that start or end at the 8-byte words of the mask's bytes or at column S - 1, one-token
holes, a run plus a stray token, empty and full rows, S a multiple of 8 or not, and masks laid
out column-major or strided. The expected result is the reference's pack of the list that
NumPy's boolean indexing gives, so the mask's meaning comes from the spec, not from the target.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from .compare import check_meta, check_positions, check_rows
from .masks import MaskedBatch, masked_batches
from .running import RankResult, call_target, readable_output, run_reference, valid_input_rules
from .strategies import PackCase, configs, fit_static, pad_values
from .under_test import RuleViolation, assume_declared, caps, needs, prop_settings, target

CAPS = caps()


@dataclass(frozen=True)
class MaskCase:
    """One mask-form pack on every rank."""

    config: dict[str, Any] = field(hash=False)
    batch: MaskedBatch
    need_roll: bool = False
    pad_value: bool | int | float = 0

    @property
    def pack_case(self) -> PackCase:
        """The same call in the list form (what the harness's comparisons take)."""
        return PackCase(self.config, self.batch.batch, self.need_roll, self.pad_value)

    def __repr__(self) -> str:
        return (f"MaskCase(config={self.config!r}, batch={self.batch!r}, "
                f"need_roll={self.need_roll!r}, pad_value={self.pad_value!r})")


@st.composite
def mask_cases(draw: st.DrawFn) -> MaskCase:
    """Within the target's features; no bucket or min_local_rows (the total's stages are the
    list form's, tested there), every convention the target declares."""
    batch = draw(masked_batches(caps=CAPS))
    cfg = draw(configs(caps=CAPS, tp=st.integers(1, 3), cp=st.integers(1, 4),
                       bucket=st.none(), min_local_rows=st.none()))
    cfg = fit_static(cfg, len(batch.runs), draw(st.sampled_from([0, 1])))
    roll = draw(st.booleans()) if "need_roll" in CAPS else False
    pad = draw(pad_values(batch.dtype)) if "pad_value" in CAPS else 0
    return MaskCase(cfg, batch, roll, pad)


def _run(case: MaskCase) -> None:
    pc = case.pack_case
    assume_declared(pc)
    values, mask = case.batch.arrays()
    before = (values.tobytes(), mask.tobytes())
    seqs = [values[i][mask[i]] for i in range(mask.shape[0])]  # R-IN-7: what the mask means
    rules = valid_input_rules(pc) | {"R-IN-7"}
    got = []
    for rank in range(pc.cp_size):
        what = f"pack_masked(rank {rank})"
        result = call_target(what, target().pack_masked, values, mask, dict(case.config),
                             rank, need_roll=case.need_roll, pad_value=case.pad_value,
                             rules=rules)
        got.append(RankResult(*readable_output(result, what)))
    if (values.tobytes(), mask.tobytes()) != before:
        raise RuleViolation("pack_masked wrote into its values or mask", {"R-IN-6", "R-IN-7"})
    want = run_reference(pc, seqs)
    check_meta(got, want, case.config)
    check_rows(pc, got, want)
    check_positions(pc, got, want)


CP2 = {"cp_size": 2}


@needs("mask_form")
@pytest.mark.rules("R-IN-7", "R-IN-1", "R-IN-2", "R-IN-6", "R-ROW-1", "R-ROW-2", "R-POS-2",
                   "R-ROLL-1")
@prop_settings(2.0)  # cheap cases (B <= 6, S <= 48): twice the profile's examples
# One run of 5 and a stray token in a row of 16 (two 8-byte words): span 12, count 6.
@example(MaskCase({"cp_size": 1}, MaskedBatch(16, (((0, 5), (11, 12)),))))
@example(MaskCase(CP2, MaskedBatch(16, (((0, 5), (11, 12)), ((3, 16),)))))
# Runs on word boundaries, ending at S - 1, full and empty rows, S = 24.
@example(MaskCase(CP2, MaskedBatch(24, (((8, 16),), ((16, 24),), ((0, 24),), ()), trail=(2,))))
# Left padding (ends at S - 1), right padding, S not a multiple of 8.
@example(MaskCase({"cp_size": 2, "tp_size": 3}, MaskedBatch(13, (((4, 13),), ((0, 9),)))))
# One-token holes and a stray token before the run, within one word and across words.
@example(MaskCase(CP2, MaskedBatch(16, (((0, 3), (4, 8)), ((2, 3), (8, 16)), ((7, 8), (9, 10))),
                                   dtype="float32"), pad_value=-1))
# The same rows column-major and strided (no word scan over a non-contiguous mask).
@example(MaskCase(CP2, MaskedBatch(16, (((0, 5), (11, 12)), ((8, 16),)), layout="F")))
@example(MaskCase(CP2, MaskedBatch(16, (((0, 5), (11, 12)), ((8, 16),)), layout="strided"),
                  need_roll=True))
# One row column-major (stride 1 on the row dimension): impl's word scan raised RuntimeError on
# it before 4f7e7f8 (and on S = 0 before 1511198: ALL_EMPTY_MASKS).
@example(MaskCase({"cp_size": 1}, MaskedBatch(8, (((0, 3),),), layout="F")))
@example(MaskCase(CP2, MaskedBatch(16, (((0, 5), (11, 12)), ((8, 16),)), layout="window")))
# Rows a word apart, S not a multiple of 8 (S = 9) and S = 8 rows 9 bytes apart.
@example(MaskCase(CP2, MaskedBatch(9, (((0, 9),), ((2, 5),)), layout="window")))
@example(MaskCase(CP2, MaskedBatch(8, (((0, 8),), ((2, 5),)), layout="ragged")))
# Right padding of half the row: its False entries span exactly as many columns as its True
# ones, so a scan that finds the False entries instead passes the count-equals-span check.
@example(MaskCase({"cp_size": 1}, MaskedBatch(10, (((0, 5),),))))
# One row alone, so that no other row sends the batch to the general path: a row with one hole
# in one word, or starting in the second word (S = 24), a run plus a stray token whose first
# word holds its first and last byte (0, 7 | 8, 10), two holes with S not a multiple of 8, and
# a stray token 8 words past the first (S = 72): each is a row whose True entries are not one
# run, while a misplaced first or last byte makes its span equal its count.
@example(MaskCase({"cp_size": 1}, MaskedBatch(16, (((0, 3), (4, 8)),))))
@example(MaskCase({"cp_size": 1}, MaskedBatch(24, (((8, 12), (13, 16)),))))
@example(MaskCase({"cp_size": 1}, MaskedBatch(16, (((0, 1), (7, 9), (10, 11)),))))
@example(MaskCase({"cp_size": 1}, MaskedBatch(10, (((0, 1), (2, 3), (4, 5)),))))
@example(MaskCase({"cp_size": 1}, MaskedBatch(72, (((0, 1), (64, 65)),))))
@given(mask_cases())
def test_mask_form_matches_reference(case: MaskCase) -> None:
    """Every rank's rows, position ids (labels under need_roll) and plan equal the reference's
    pack of `[values[i][mask[i]] for i]`; values and mask unchanged (R-IN-6)."""
    _run(case)


# The batches of only empty rows (valid, R-IN-2), S = 0 among them: never drawn above, judged
# here, so that a target that mishandles them has one finding and blocks no other rule.
ALL_EMPTY_MASKS = {
    "all-empty-S0": MaskedBatch(0, ((), ())),
    "all-empty-S8": MaskedBatch(8, ((),), trail=(2,)),
    "all-empty-S13-F": MaskedBatch(13, ((), (), ()), layout="F"),
}


@needs("mask_form", "zero_length")
@pytest.mark.usefixtures("keeps_zero_length")
@pytest.mark.rules("R-IN-7", "R-IN-2", "R-ROW-3")
@pytest.mark.parametrize("name", list(ALL_EMPTY_MASKS))
@prop_settings(0.3)
@example(config=CP2, need_roll=False, pad=0)
@given(config=configs(caps=CAPS, tp=st.integers(1, 3), cp=st.integers(1, 4), bucket=st.none(),
                      min_local_rows=st.none()), need_roll=st.booleans(),
       pad=pad_values("int64"))
def test_mask_form_all_empty_matches_reference(name: str, config: dict[str, Any],
                                              need_roll: bool, pad: Any) -> None:
    """A mask with no True entry packs as the reference packs its empty sequences: every row
    padding (R-ROW-3), in the target's pad value."""
    batch = ALL_EMPTY_MASKS[name]
    if "trailing_dims" not in CAPS:
        batch = dataclasses.replace(batch, trail=())
    _run(MaskCase(fit_static(config, len(batch.runs)), batch,
                  need_roll and "need_roll" in CAPS,
                  pad if "pad_value" in CAPS else 0))
