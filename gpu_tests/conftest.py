"""Gating and reporting for the GPU tests.

- No torch, or no CUDA device: every test is skipped with the reason (so `nox -s gpu` on a CPU box
  exits 0 and says "skipped").
- `@pytest.mark.te`: skipped when transformer_engine.pytorch cannot be imported (reason shown).
- `@pytest.mark.multigpu`: skipped with fewer than 2 CUDA devices.
- The `gpu_report` fixture collects numbers (graph counts, errors, versions); they are printed at
  the end and written as JSON to `--gpu-report PATH` (run_device.sh uses it for its summary).
"""

from __future__ import annotations

import json
import os
import platform
from typing import Any

import pytest

_REPORT: dict[str, Any] = {}


def _torch_status() -> tuple[Any, str | None]:
    """(torch, None) when CUDA can be used, else (torch or None, reason to skip)."""
    try:
        import torch
    except Exception as e:
        return None, f"torch is not importable ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return torch, f"no CUDA device (torch {torch.__version__}, cuda available: False)"
    return torch, None


def _te_status() -> str | None:
    """None when TE's pytorch API imports, else why not."""
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as e:
        return f"transformer_engine is not importable ({type(e).__name__}: {e})"
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpu-report",
        default=os.environ.get("GPU_TESTS_REPORT"),
        help="write the GPU tests' measured numbers (JSON) to this path",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "rules(*ids): spec rule IDs a test checks",
        "te: needs TransformerEngine (skipped when it cannot be imported)",
        "multigpu: needs 2 or more CUDA devices",
    ):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_dir = os.path.dirname(__file__)
    mine = [it for it in items if str(it.path).startswith(gpu_dir)]
    if not mine:
        return
    torch, no_cuda = _torch_status()
    if no_cuda:
        skip = pytest.mark.skip(reason=no_cuda)
        for it in mine:
            it.add_marker(skip)
        return
    te_reason = _te_status()
    n_gpus = torch.cuda.device_count()
    for it in mine:
        if te_reason and it.get_closest_marker("te"):
            it.add_marker(pytest.mark.skip(reason=te_reason))
        if n_gpus < 2 and it.get_closest_marker("multigpu"):
            it.add_marker(pytest.mark.skip(reason=f"needs 2 or more GPUs, found {n_gpus}"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Without torch every test module skips at import, and pytest would exit 5 ("no tests
    collected"); that is the documented clean skip here, so exit 0."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _torch_status()[0] is None:
        session.exitstatus = pytest.ExitCode.OK


def _environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version()}
    torch, no_cuda = _torch_status()
    env["torch"] = getattr(torch, "__version__", "absent")
    if torch is not None and not no_cuda:
        env["cuda"] = torch.version.cuda
        try:
            env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            env["capability"] = list(torch.cuda.get_device_capability(0))
        except Exception as e:  # the report must not turn a finished run into a crash
            env["gpus"] = f"unreadable: {type(e).__name__}: {e}"
    try:
        import transformer_engine as te_root

        env["transformer_engine"] = str(getattr(te_root, "__version__", "unknown"))
    except Exception:
        env["transformer_engine"] = "absent"
    return env


@pytest.fixture(scope="session")
def gpu_report() -> dict[str, Any]:
    """Session-wide dict of measured numbers; printed and written at the end."""
    return _REPORT


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _REPORT and not config.getoption("--gpu-report"):
        return
    data = {"environment": _environment(), "measured": _REPORT}
    if _REPORT:
        terminalreporter.section("gpu_tests report")
        for key, val in sorted(_REPORT.items()):
            terminalreporter.write_line(f"{key}: {json.dumps(val)}")
    path = config.getoption("--gpu-report")
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
