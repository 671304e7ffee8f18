"""The suite installed on its own (numpy, hypothesis, pytest; no megatron-core) still collects:
a user's packer needs no Megatron to be judged, and the Megatron tests are declined for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `sys.modules["megatron"] = None` makes every `import megatron...` raise ImportError, as in an
# environment without megatron-core.
COLLECT = (
    "import sys; sys.modules['megatron'] = None; import pytest; "
    "sys.exit(pytest.main(['thd_packing/conformance', '--collect-only', '-q', '-p', "
    "'no:cacheprovider', '--target', 'impl']))"
)


def test_suite_collects_without_megatron_core() -> None:
    proc = subprocess.run([sys.executable, "-c", COLLECT], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "thd_packing/conformance/test_megatron.py::" in proc.stdout
