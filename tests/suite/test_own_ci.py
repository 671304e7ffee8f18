"""The suite run as a trainer team runs it in its own CI: installed with pip (outside this
checkout), its options from the pytest plugin, against an adapter that lives outside the
repository (the worked example of conformance/README.md, copied out of the README)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from thd_packing.conformance.plugin import MODEL_TIER_NEEDS

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("pyproject.toml", "README.md", "thd_packing")


def readme_example() -> str:
    """The first Python block of conformance/README.md: the worked example's module."""
    text = (ROOT / "thd_packing" / "conformance" / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert block, "thd_packing/conformance/README.md has no python block"
    return block.group(1)


def test_worked_example_adapter_fits_forty_lines() -> None:
    assert len(readme_example().splitlines()) <= 40


def test_protocol_section_fits_sixty_lines() -> None:
    """thd_packing/conformance/README.md's protocol, on one screen: its section at most 60 lines."""
    text = (ROOT / "thd_packing" / "conformance" / "README.md").read_text()
    section = re.search(r"^## The protocol.*?(?=^## )", text, re.DOTALL | re.MULTILINE)
    assert section, "thd_packing/conformance/README.md has no protocol section"
    assert len(section.group(0).splitlines()) <= 60


# A user environment without torch: the interpreter refuses to import it or transformers.
NO_TORCH = "import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"


def test_installed_suite_runs_an_outside_adapter(tmp_path: Path) -> None:
    """pip install adds one top-level package, so the trainer's own packages named `peers` and
    `reference` stay theirs: the README's adapter runs as `peers.thd`, loaded through the
    trainer's `reference` module; without torch the model tier is skipped in one line."""
    src, site, user = tmp_path / "src", tmp_path / "site", tmp_path / "user"
    for name in SHIPPED:  # a fresh copy: no build output lands in the checkout
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy(path, src / name)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(src)],
                   check=True, capture_output=True, timeout=300)
    top = sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info"))
    assert top == ["thd_packing"], top
    for package, body in (("peers", ""), ("reference", "from peers.thd import Target\n")):
        (user / package).mkdir(parents=True)
        (user / package / "__init__.py").write_text(body)
    (user / "peers" / "thd.py").write_text(readme_example())
    (user / "no_torch").mkdir()
    (user / "no_torch" / "sitecustomize.py").write_text(NO_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(user)])}
    where = subprocess.run(
        [sys.executable, "-c", "import thd_packing, peers, reference; "
         "print(thd_packing.__file__); print(peers.__file__); print(reference.__file__)"],
        cwd=user, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert Path(where[0]).is_relative_to(site), where
    assert all(Path(w).is_relative_to(user) for w in where[1:]), where
    names = subprocess.run(  # the field's adapters are shipped beside the suite: --target verl
        [sys.executable, "-c", "from thd_packing.conformance.targets import HOMES, "
         "builtin_names; print(builtin_names()); print(HOMES[1][1])"],
        cwd=user, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert "'verl'" in names[0] and "'reference'" in names[0], names
    assert Path(names[1]).is_relative_to(site), names
    env["PYTHONPATH"] = os.pathsep.join([str(user / "no_torch"), env["PYTHONPATH"]])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs",
         *(f"thd_packing.conformance.{tier}" for tier in (
             "test_invariants", "test_caller_arrays", "test_rejections", "test_model")),
         "--target", "reference:Target", "--hypothesis-profile=ci", "-q",
         "-p", "no:cacheprovider"],
        cwd=user, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # the example's bug fails the run
    doc = json.loads((user / "reports" / "conformance-mypacker.json").read_text())
    assert doc["hypothesis_profile"] == "ci"
    # the README: every finding is the planted bug, R-TOTAL-4 first
    rules = [f["rules"] for f in doc["findings"]]
    assert rules and rules[0] == ["R-TOTAL-4"], doc["findings"]
    assert all(r in (["R-TOTAL-4"], ["R-ALIGN-3"], ["R-ALIGN-3", "R-TOTAL-5"]) for r in rules), \
        doc["findings"]
    assert "'cp_size'" in doc["findings"][0]["input"], doc["findings"]
    assert not doc["target_errors"], doc["target_errors"]
    assert "FINDING R-TOTAL-4" in out
    skipped = [line for line in out.splitlines() if line.startswith("skipped: ")]
    assert skipped == ["skipped: test_model.py: " + MODEL_TIER_NEEDS], out[-3000:]
    assert doc["skipped_modules"] == {"test_model.py": MODEL_TIER_NEEDS}
