"""Every peer adapter's wiring inventory against the installed wheel's signatures.

Each adapter's `WIRING` (thd_packing/peers/_wiring.py) maps every parameter of every packing
entry point of its peer to the protocol key that drives it, or says why it is not driven. The
signatures are read from the installed files (most peers' packages cannot be imported without
their training stacks), so a new release's new parameter, or a removed one, fails here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import textwrap
from pathlib import Path
from typing import Any

import pytest

from thd_packing.peers import _wiring

# adapter module -> the distributions whose files its entry points are in
PEERS = {
    "areal": ("areal",),
    "megatron_bridge": ("megatron-bridge",),
    "megatron_core": ("megatron-core",),
    "ms_swift": ("ms-swift", "mcore-bridge"),
    "openrlhf": ("openrlhf",),
    "torchtitan": ("torchtitan",),
    "torchtune": ("torchtune",),
    "transformers": ("transformers",),
    "trl": ("trl",),
    "veomni": ("veomni",),
    "verl": ("verl",),
    "verl_fsdp": ("verl",),
    "areal_bins": ("areal",),
    "megatron_bridge_bins": ("megatron-bridge",),
    "torchtune_bins": ("torchtune",),
    "verl_bins": ("verl",),
    "trl_bins": ("trl", "datasets"),
    "binpacking_bins": ("binpacking",),
    "ms_swift_bins": ("ms-swift", "binpacking"),
    "llamafactory_bins": ("llamafactory",),
    "axolotl_bins": ("axolotl",),
}


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_wiring_matches_the_installed_signatures(peer: str) -> None:
    missing = [d for d in PEERS[peer] if not _installed(d)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (`nox -s conformance -- --target "
                    f"{peer.replace('_', '-')}` installs it)")
    module = importlib.import_module(f"thd_packing.peers.{peer}")
    wiring = module.WIRING
    assert wiring, f"{peer}: empty WIRING"
    assert _wiring.problems(wiring) == []
    judged, paths = _wiring.counts(wiring)
    assert 0 <= judged <= paths


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_the_findings_page_opens_with_the_wiring(peer: str) -> None:
    """The page's wiring section is the adapter's WIRING, right after the verdict
    (`python -m thd_packing.peers._wiring` rewrites it)."""
    page = Path(__file__).parents[2] / "docs" / "findings" / f"{_wiring.PAGES[peer]}.md"
    text = page.read_text(encoding="utf-8")
    wiring = importlib.import_module(f"thd_packing.peers.{peer}").WIRING
    assert _wiring.table(wiring) in text
    verdict = text.index("**Verdict.**")
    assert text.index(_wiring.PAGE_START) == text.index("\n\n", verdict) + 2


def test_the_findings_table_counts_the_judged_paths() -> None:
    """The findings README's row of each peer gives its "X of Y" judged paths."""
    readme = (Path(__file__).parents[2] / "docs" / "findings" / "README.md").read_text()
    for peer, page in _wiring.PAGES.items():
        judged, paths = _wiring.counts(importlib.import_module(f"thd_packing.peers.{peer}").WIRING)
        row = next(line for line in readme.splitlines() if line.startswith(f"| [{page}]("))
        assert f"| {judged} of {paths}" in row, (peer, judged, paths)


def test_the_page_section_goes_after_the_verdict_once(tmp_path: Path) -> None:
    w = _wiring
    page = tmp_path / "peer.md"
    page.write_text("# Peer\n\n**Verdict.** Clean.\nStill the verdict.\n\n## What runs\n")
    wiring = {"fakepeer.pack.pack": {"seqs": w.wired("seqs"), "bucket": w.not_wired("no")}}
    w.write_page(page, wiring)
    first = page.read_text()
    assert first.startswith("# Peer\n\n**Verdict.** Clean.\nStill the verdict.\n\n"
                            f"{w.PAGE_START}\n## Wiring\n\njudged: 1 of 2 paths")
    assert first.endswith(f"{w.PAGE_END}\n\n## What runs\n")
    wiring["fakepeer.pack.pack"]["bucket"] = w.wired("bucket")
    w.write_page(page, wiring)
    second = page.read_text()
    assert second.count(w.PAGE_START) == 1 and "judged: 2 of 2 paths" in second
    assert second.replace("2 of 2", "1 of 2").replace("wired: bucket", "not wired: no") == first


def test_every_peer_has_an_inventory() -> None:
    peers = {p.stem for p in Path(_wiring.__file__).parent.glob("*.py")
             if not p.stem.startswith("_")}
    assert peers == set(PEERS) == set(_wiring.PAGES)


@pytest.fixture
def fake_peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A planted installed package with a packer, a dataclass collator and a class."""
    pkg = tmp_path / "fakepeer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('a training stack')\n")
    (pkg / "pack.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass

        def pack(seqs, bucket=None, *, fp8=False, new_knob=3, **kwargs):
            pass

        @dataclass
        class Collator:
            pad_token_id: int
            pad_to_multiple_of: int | None = None

            def __call__(self, features):
                pass

        class Packer:
            def __init__(self, tp, cp=1):
                pass

        @dataclass
        class PaddedCollator(Collator):
            bucket: int = 8
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "fakepeer.pack"


def test_the_signatures_come_from_the_files(fake_peer: str) -> None:
    assert _wiring.parameters(f"{fake_peer}.pack") == ["seqs", "bucket", "fp8", "new_knob",
                                                      "kwargs"]
    assert _wiring.parameters(f"{fake_peer}.Collator") == ["pad_token_id",
                                                          "pad_to_multiple_of"]
    assert _wiring.parameters(f"{fake_peer}.Collator.__call__") == ["features"]
    assert _wiring.parameters(f"{fake_peer}.Packer") == ["tp", "cp"]
    assert _wiring.parameters(f"{fake_peer}.PaddedCollator") == [
        "pad_token_id", "pad_to_multiple_of", "bucket"]


def test_an_unlisted_parameter_fails(fake_peer: str) -> None:
    w = _wiring
    wiring = {f"{fake_peer}.pack": {
        "seqs": w.wired("seqs"), "bucket": w.wired("bucket"), "fp8": w.wired("fp8"),
        "kwargs": w.no_effect("unused")}}
    assert w.problems(wiring) == [
        f"{fake_peer}.pack: parameter 'new_knob' neither mapped nor listed"]
    wiring[f"{fake_peer}.pack"]["new_knob"] = w.not_wired("no rule for it")
    assert w.problems(wiring) == []
    assert w.counts(wiring) == (3, 4)


def test_a_listed_parameter_that_is_gone_fails(fake_peer: str) -> None:
    w = _wiring
    wiring = {f"{fake_peer}.Collator": {
        "pad_token_id": w.wired("pad_value"), "pad_to_multiple_of": w.wired("bucket"),
        "padding_free": w.fixed("True")}}
    assert w.problems(wiring) == [
        f"{fake_peer}.Collator: listed parameter 'padding_free' no longer exists"]


def test_a_field_row_covers_its_parameter(fake_peer: str) -> None:
    w = _wiring
    wiring = {f"{fake_peer}.Collator.__call__": {
        "features.input_ids": w.wired("seqs"), "features.labels": w.not_wired("no input")}}
    assert w.problems(wiring) == []
    assert w.counts(wiring) == (1, 2)


def test_a_missing_entry_point_or_a_bad_row_fails(fake_peer: str) -> None:
    w = _wiring
    bad: Any = ("key", "cp_size")  # a plain tuple, not a Wire
    problems = w.problems({f"{fake_peer}.unpack": {"x": w.wired("y")},
                           f"{fake_peer}.Packer": {"tp": w.wired("tp_size"), "cp": bad}})
    assert len(problems) == 2
    assert "has no unpack" in problems[0]
    assert "is not a Wire" in problems[1]
