"""bench/stages.py mirrors `pack_batch`: its stages dispatch exactly the whole call's ops, so a
step added to the pack and not to the stages shows here (op counts only, no timing)."""

from __future__ import annotations

import pytest

import impl
from bench import stages


@pytest.mark.parametrize("rows", [1, 5, 300])
@pytest.mark.parametrize(("tp", "cp", "bucket"), [(2, 4, 512), (1, 4, None), (1, 1, None),
                                                  (2, 2, 64)])
def test_stages_add_up_to_the_whole_call(rows: int, tp: int, cp: int, bucket: int | None) -> None:
    nested = stages.fixed_batch(64, rows)  # 64 x 16 aligned rows: a multiple of the bucket
    config = impl.PackConfig(tp_size=tp, cp_size=cp, bucket=bucket)
    parts = stages.stages(nested, config)
    whole = stages.ops(lambda: impl.pack_thd(nested, config, 0))
    assert sum(stages.ops(fn) for fn in parts.values()) == whole


def test_stages_refuse_a_path_they_do_not_mirror() -> None:
    """max_num_seqs adds segments past B, which `pack_batch` pads and the stages do not."""
    nested = stages.fixed_batch(4, 2)
    with pytest.raises(ValueError, match="one segment per sequence"):
        stages.stages(nested, impl.PackConfig(cp_size=2, max_num_seqs=8))


def test_stages_refuse_a_padding_run_longer_than_the_source() -> None:
    """A bucket far above a tiny batch takes the index on its own, which the stages skip."""
    with pytest.raises(ValueError, match="shared row-map buffer"):
        stages.stages(stages.fixed_batch(4, 3), impl.PackConfig(tp_size=2, cp_size=4, bucket=512))


def test_stages_print_every_stage(capsys: pytest.CaptureFixture[str]) -> None:
    assert stages.main(["--batch", "64", "--calls", "3"]) == 0
    out = capsys.readouterr().out
    assert "whole pack_thd call" in out and "padding rows' index and fill" in out
    assert out.count(" ops") == 9  # the whole call, the stages in a row, and each of the seven
