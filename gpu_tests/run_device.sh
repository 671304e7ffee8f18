#!/usr/bin/env bash
# The whole GPU check in one prepared run (well under 8 minutes on one H200).
#
#   bash gpu_tests/run_device.sh [OUT_DIR] [extra pytest args...]
#
# OUT_DIR defaults to $OUT (set on the project's device machine), else /tmp/gpu_tests_out. It receives
# env.txt (date, GPU, driver, python, torch, TE), junit.xml, pytest.log, report.json (measured
# numbers: recompile counts, FP8 errors, CP verdicts, CUDA-graph replays, static-metadata
# bit-identity tallies) and summary.md. Uses the machine's own
# python3/torch/pytest (PYTHON=... to choose another); installs nothing and needs no network.
# Exit status: pytest's (0 when everything passed or skipped).
set -uo pipefail
cd "$(dirname "$0")/.."

out_dir="${OUT:-/tmp/gpu_tests_out}"
if [[ $# -gt 0 && "$1" != -* ]]; then
    out_dir="$1"
    shift
fi
mkdir -p "$out_dir"
py="${PYTHON:-python3}"
budget_s="${GPU_TESTS_BUDGET_S:-420}"   # pytest is killed after this; the summary still runs
export PYTHONUNBUFFERED=1

start=$(date +%s)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader |
            sed 's/^/gpu: /'
    else
        echo "gpu: nvidia-smi not found"
    fi
    "$py" - <<'EOF'
import platform

print("python:", platform.python_version())
try:
    import torch

    print("torch:", torch.__version__, "| cuda:", torch.version.cuda,
          "| devices:", torch.cuda.device_count() if torch.cuda.is_available() else 0)
except Exception as e:
    print("torch: not importable:", type(e).__name__, e)
try:
    import transformer_engine as te

    print("transformer_engine:", getattr(te, "__version__", "unknown"))
except Exception as e:
    print("transformer_engine: absent (", type(e).__name__, ")")
try:
    import pytest

    print("pytest:", pytest.__version__)
except Exception:
    print("pytest: absent")
EOF
} >"$out_dir/env.txt" 2>&1
cat "$out_dir/env.txt"

# Every test file, listed in run order: the static-metadata checks first, so a run cut
# short by the budget still reports them. tests/gpu_harness checks that this list is complete.
test_files=(
    gpu_tests/test_static_metadata.py
    gpu_tests/test_cuda_graph.py
    gpu_tests/test_attention.py
    gpu_tests/test_recompile.py
    gpu_tests/test_fp8.py
    gpu_tests/test_context_parallel.py
)
timeout -k 15 "$budget_s" "$py" -m pytest "${test_files[@]}" -p no:cacheprovider -q -ra \
    --durations=10 --junitxml="$out_dir/junit.xml" --gpu-report="$out_dir/report.json" "$@" \
    2>&1 | tee "$out_dir/pytest.log"
rc=${PIPESTATUS[0]}
wall=$(($(date +%s) - start))

"$py" -m gpu_tests.summarize "$out_dir" "$rc" "$wall" | tee "$out_dir/summary.md"
exit "$rc"
