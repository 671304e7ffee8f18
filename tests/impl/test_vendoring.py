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
from spec.examples import SPEC_VERSION

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
