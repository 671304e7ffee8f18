"""impl/ is vendorable: copied under another package name it still works, it imports nothing
beyond torch and the standard library, and every file carries its license and spec version."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import impl
from thd_packing.spec.examples import SPEC_VERSION

IMPL_DIR = Path(impl.__file__).resolve().parent
FILES = sorted(IMPL_DIR.glob("*.py"))


def test_every_file_is_stamped() -> None:
    """SPDX line and the spec version each file implements, in its first two lines."""
    assert FILES
    for path in FILES:
        head = path.read_text().splitlines()[:2]
        assert head == [
            "# SPDX-License-Identifier: Apache-2.0",
            f"# Implements THD packing spec {SPEC_VERSION}",
        ], path.name
    assert impl.SPEC_VERSION == SPEC_VERSION


def test_relative_imports_only() -> None:
    """No module names its own package: `from impl...`/`import impl` would break a vendored copy."""
    allowed_roots = {"torch", "megatron", "__future__"} | set(sys.stdlib_module_names)
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module is not None
                assert node.module.split(".")[0] in allowed_roots, (path.name, node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in allowed_roots, (path.name, alias.name)
        assert "impl." not in path.read_text().replace("impl/", ""), path.name


SMOKE = textwrap.dedent(
    """
    import json, sys, torch
    import my_trainer._thd as thd
    cfg = thd.PackConfig(cp_size=2)
    seqs = [torch.tensor([1000, 1001, 1002]), torch.tensor([2000, 2001, 2002, 2003, 2004])]
    shards = [thd.pack_thd(seqs, cfg, r)[0] for r in range(2)]
    plan = thd.plan_thd([3, 5], cfg)
    back = thd.unpack_thd(shards, plan, cfg)
    print(json.dumps({"rows": [s.tolist() for s in shards], "back": [b.tolist() for b in back],
                      "version": thd.SPEC_VERSION, "module": thd.pack_thd.__module__}))
    """
)


def test_vendored_copy_runs_under_another_name(tmp_path: Path) -> None:
    """Copy impl/ to my_trainer/_thd/ and run the zigzag-cp2 example from there (R-SHARD-2)."""
    pkg = tmp_path / "my_trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copytree(IMPL_DIR, pkg / "_thd", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-c", SMOKE],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # spec §13.2: rank 0 [1000, 0, 2000, 2001, 0, 0], rank 1 [1001, 1002, 2002, 2003, 2004, 0]
    assert out["rows"] == [[1000, 0, 2000, 2001, 0, 0], [1001, 1002, 2002, 2003, 2004, 0]]
    assert out["back"] == [[1000, 1001, 1002], [2000, 2001, 2002, 2003, 2004]]
    assert out["version"] == SPEC_VERSION
    assert out["module"] == "my_trainer._thd.pack"


ISOLATION = textwrap.dedent(
    """
    import json, sys
    before = set(sys.modules)
    import impl
    new = sorted({m.split(".")[0] for m in set(sys.modules) - before})
    print(json.dumps(new))
    """
)


def test_import_pulls_in_only_torch_and_stdlib() -> None:
    """`import impl` in a fresh interpreter loads torch, the stdlib and impl, nothing else.

    (torch's own optional imports are attributed to torch: we list top-level names only and
    allow the ones torch itself always loads.)
    """
    root = IMPL_DIR.parent
    proc = subprocess.run(
        [sys.executable, "-c", ISOLATION],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    new = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    baseline = subprocess.run(
        [sys.executable, "-c", ISOLATION.replace("import impl", "import torch")],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin"},
    )
    torch_pulls = set(json.loads(baseline.stdout.strip().splitlines()[-1]))
    extra = new - torch_pulls - set(sys.stdlib_module_names) - {"impl"}
    assert not extra, f"import impl pulled in {sorted(extra)}"
    assert "megatron" not in new and "numpy" not in new - torch_pulls


PLANTED_BUG = textwrap.dedent(
    """

    _pack_thd = pack_thd


    def pack_thd(*args, **kwargs):  # planted: each rank's rows reversed
        rows, positions, plan = _pack_thd(*args, **kwargs)
        return rows.flip(0), positions, plan
    """
)


def _vendor(tmp_path: Path) -> Path:
    """impl/ copied to tmp_path/my_trainer/_thd/, as the README's copy command leaves it."""
    pkg = tmp_path / "my_trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copytree(IMPL_DIR, pkg / "_thd", ignore=shutil.ignore_patterns("__pycache__"))
    return pkg / "_thd"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )


def test_shipped_check_passes_on_a_copy(tmp_path: Path) -> None:
    """impl/check_vendored.py, run by the copy's new name, both ways the file says."""
    _vendor(tmp_path)
    by_module = _run(tmp_path, "-m", "my_trainer._thd.check_vendored")
    assert by_module.returncode == 0, by_module.stderr
    assert by_module.stdout.startswith("ok: my_trainer._thd packs and unpacks")
    by_pytest = _run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "my_trainer/_thd/check_vendored.py")
    assert by_pytest.returncode == 0, by_pytest.stdout + by_pytest.stderr
    assert "2 passed" in by_pytest.stdout


def test_shipped_check_fails_on_a_broken_copy(tmp_path: Path) -> None:
    """The same check on a copy whose pack_thd reverses its rows exits non-zero, naming them."""
    copy = _vendor(tmp_path)
    init = copy / "__init__.py"
    init.write_text(init.read_text() + PLANTED_BUG)
    proc = _run(tmp_path, "-m", "my_trainer._thd.check_vendored")
    assert proc.returncode != 0
    assert "rank 0 rows: got [0, 0, 2001, 2000, 0, 1000]" in proc.stderr


def test_readme_binning_block_runs_on_a_copy(tmp_path: Path) -> None:
    """The README's binning example, as printed, on a vendored copy (R-BIN-5: every pack
    within the capacity, asserted by the block itself)."""
    readme = (IMPL_DIR.parent / "README.md").read_text()
    blocks = [b.split("```")[0] for b in readme.split("```python\n")[1:]]
    block = next(b for b in blocks if "bin_lengths(step_lengths" in b)
    _vendor(tmp_path)
    (tmp_path / "readme_bins.py").write_text(block + "\nprint('ok', len(bins.bins), mine)\n")
    run = _run(tmp_path, "readme_bins.py")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok ")
