"""Sessions: `nox -s tests` (CI), `nox -s conformance` (main job), gpu, bench, bench_bins,
bins, slow, planner, mutation, lint.

Every session installs what it needs from this file and pyproject.toml; nothing is installed
by hand.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from xml.etree import ElementTree

import nox
from nox.command import CommandFailed

nox.options.sessions = ["tests"]
REPORTS = Path(__file__).resolve().parent / "reports"
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
VERL = "verl==0.9.1"
OPENRLHF = "openrlhf==0.11.2"
# The token-id packers (peers/): transformers is a test dependency already (the
# model tier); TRL, torchtune, VeOmni and torchtitan --no-deps, since the files loaded need
# only torch and transformers.
TRL = "trl==1.16.0"
TORCHTUNE = "torchtune==0.6.1"
VEOMNI = "veomni==0.1.12"
TORCHTITAN = "torchtitan==0.3.0"
# Peers loaded file by file from their wheels (peers/); each pulls a training stack,
# so --no-deps: their files need only torch, numpy and megatron-core, all test dependencies.
AREAL = "areal==1.0.4"
MEGATRON_BRIDGE = "megatron-bridge==0.3.1"
MS_SWIFT = ["ms-swift==4.6.0", "mcore-bridge==1.6.5"]  # mcore-bridge: its CP split
# The bin step's peers (bench/bins.py): LLaMA-Factory --no-deps (its knapsack's file needs only
# the standard library); TRL's _pack_bfd reads pyarrow tables; the binpacking library as is.
LLAMAFACTORY = "llamafactory==0.9.5"
AXOLOTL = "axolotl==0.19.0"  # the newest release the registry serves for Python 3.11
PYARROW = "pyarrow==26.0.1"
BINPACKING = "binpacking==2.0.1"
# Built-in targets -> what `nox -s conformance -- --target NAME` installs on top of `.[test]`
# (megatron-core is already a test dependency). verl's packages pull in a training stack; its
# targets load single files and need only torch + megatron-core, hence --no-deps.
TARGET_REQUIREMENTS: dict[str, list[str]] = {
    "verl": ["--no-deps", VERL],
    "verl-fsdp": ["--no-deps", VERL],
    "megatron-core": [],
    "openrlhf": ["--no-deps", OPENRLHF],
    "transformers": [],
    "trl": ["--no-deps", TRL],
    "torchtune": ["--no-deps", TORCHTUNE],
    "veomni": ["--no-deps", VEOMNI],
    "torchtitan": ["--no-deps", TORCHTITAN],
    "areal": ["--no-deps", AREAL],
    "megatron-bridge": ["--no-deps", MEGATRON_BRIDGE],
    "ms-swift": ["--no-deps", *MS_SWIFT],
    # The binners (thd_packing/peers/*_bins.py; `--target areal-bins:ArealFFD`): the file's
    # wheel, and for the five that read datasets, binpacking or numba the `bins` extra too.
    "verl-bins": ["--no-deps", VERL],
    "areal-bins": ["--no-deps", AREAL],
    "torchtune-bins": ["--no-deps", TORCHTUNE],
    "megatron-bridge-bins": ["--no-deps", MEGATRON_BRIDGE],
    "trl-bins": ["-e", ".[bins]", "&&", "--no-deps", TRL],
    "binpacking-bins": ["-e", ".[bins]"],
    "ms-swift-bins": ["-e", ".[bins]", "&&", "--no-deps", *MS_SWIFT],
    "llamafactory-bins": ["-e", ".[bins]", "&&", "--no-deps", LLAMAFACTORY],
    "axolotl-bins": ["-e", ".[bins]", "&&", "--no-deps", AXOLOTL],
}


def _target_name(args: list[str], env: Mapping[str, str | None]) -> str | None:
    """The --target of the posargs (either spelling), else THD_TARGET."""
    for i, arg in enumerate(args):
        if arg == "--target" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--target="):
            return arg.partition("=")[2]
    return env.get("THD_TARGET") or os.environ.get("THD_TARGET")


def _install_test_deps(session: nox.Session, extra: str = "test") -> None:
    session.install("-e", f".[{extra}]")


# What the suite on the reference proves in CI: the reference meets its own consumer contract,
# invariants and rejection table. Its differential tier would compare it with itself, and its
# model tier repeats on the reference what impl's run shows of the same rows.
REFERENCE_TIERS = [f"thd_packing/conformance/{name}.py" for name in (
    "test_contract", "test_invariants", "test_rejections", "test_plan_shapes", "test_numpy_sizes",
    "test_alignment_limit", "test_caller_arrays", "test_roundtrip")]
# Both cores, whole files per worker: a module's process group or model world (a module-scoped
# fixture) starts once.
PARALLEL = ["-n", "2", "--dist", "loadfile"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """CI: unit, spec and golden-vector tests, the suite's own tests (but the slow ones), and
    the reference's contract and rejection tiers; ends with where the time went. The suite on
    impl is `nox -s conformance`, CI's second session."""
    start = time.monotonic()
    _install_test_deps(session)
    # The peer targets' loader tests (tests/targets, tests/peers) read the peers' real wheels:
    # install them here too (small; --no-deps where a wheel pulls a training stack), so that
    # those tests run in CI instead of skipping.
    session.install("--no-deps", VERL, OPENRLHF, TRL, TORCHTUNE, VEOMNI, TORCHTITAN, AREAL,
                    MEGATRON_BRIDGE, *MS_SWIFT)
    _timed(session, time.monotonic() - start, [
        ("tests/", ["tests", "-m", "not slow", *PARALLEL, *session.posargs]),
        # the reference's own properties are tests/reference's: a smaller draw, one process
        ("suite on reference (contract, rejections)",
         [*REFERENCE_TIERS, "--target", "reference", "--hypothesis-profile=dev",
          *session.posargs])])


@nox.session(python=PYTHON)
def bins(session: nox.Session) -> None:
    """The binner peers' own tests (tests/peers/test_*_bins.py, the wiring of their adapters,
    verl's micro-batches into its THD preprocess) with every binner's wheel and the `bins`
    extra; `nox -s tests` runs those whose wheels it has and skips the rest by name."""
    start = time.monotonic()
    session.install("-e", ".[test,bins]")
    session.install("--no-deps", VERL, AREAL, TORCHTUNE, MEGATRON_BRIDGE, TRL, *MS_SWIFT,
                    LLAMAFACTORY, AXOLOTL)
    _timed(session, time.monotonic() - start, [
        ("tests/peers (binners)", ["tests/peers", "-k", "bins or wiring", *PARALLEL,
                                   *session.posargs])])


@nox.session(python=PYTHON)
def slow(session: nox.Session) -> None:
    """The suite's slow self-tests: the model tier's checks failing on planted bugs, and an
    omitting packer through the model (a few minutes)."""
    start = time.monotonic()
    _install_test_deps(session)
    _timed(session, time.monotonic() - start,
           [("tests/ (slow)", ["tests", "-m", "slow", *PARALLEL, *session.posargs])])


def _timed(session: nox.Session, setup_s: float, runs: list[tuple[str, list[str]]]) -> None:
    """Each pytest run of `runs` (its arguments complete) with its JUnit XML, then the timing
    summary."""
    steps: list[tuple[str, float, Path]] = [("environment", setup_s, Path())]
    for index, (label, args) in enumerate(runs):
        junit = REPORTS / f"timing-{session.name}-{index}.xml"
        began = time.monotonic()
        session.run("pytest", *args, f"--junitxml={junit}")
        steps.append((label, time.monotonic() - began, junit))
    for line in timing_summary(steps):
        session.log(line)


def timing_summary(steps: list[tuple[str, float, Path]], slowest: int = 12) -> list[str]:
    """Wall time per step, summed test time per folder (per module of the suite) and the
    slowest tests, from each step's JUnit XML: drift shows the day it happens."""
    lines = ["timing: " + ", ".join(f"{label} {wall:.0f} s" for label, wall, _ in steps)
             + f"; total {sum(wall for _, wall, _ in steps):.0f} s"]
    folders: dict[str, float] = {}
    tests: list[tuple[float, str]] = []
    for label, _, junit in steps:
        if not junit.is_file():
            continue
        for case in ElementTree.parse(junit).iter("testcase"):
            seconds = float(case.get("time") or 0)
            module = str(case.get("classname") or "")
            parts = module.split(".")
            folder = "/".join(parts[:2]) if parts[0] == "tests" else f"{label}: {parts[-1]}"
            folders[folder] = folders.get(folder, 0.0) + seconds
            tests.append((seconds, f"{module}::{case.get('name')}"))
    lines.append("timing per folder (test time summed over both workers):")
    lines += [f"  {seconds:6.1f} s  {folder}"
              for folder, seconds in sorted(folders.items(), key=lambda kv: -kv[1])[:20]]
    lines.append(f"timing: the {slowest} slowest tests:")
    lines += [f"  {seconds:6.1f} s  {name}"
              for seconds, name in sorted(tests, reverse=True)[:slowest]]
    return lines


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """The conformance suite on impl (ci profile); `nox -s conformance -- --target verl` runs
    it on a peer's packer from its wheel."""
    start = time.monotonic()
    _install_test_deps(session, "suite")
    # `--install=SPEC` (repeatable): the user's own package (a path, a git URL, a requirement)
    # goes into the session too, so `--target mypkg.mod:MyTarget` can import it.
    args = [a for a in session.posargs if not a.startswith("--install=")]
    for spec in (a.partition("=")[2] for a in session.posargs if a.startswith("--install=")):
        session.install(spec)
    name = _target_name(args, session.env) or ""
    requirements = TARGET_REQUIREMENTS.get(name.partition(":")[0], [])
    while requirements:  # "&&" separates installs (one with dependencies, one --no-deps)
        step = requirements[:requirements.index("&&")] if "&&" in requirements else requirements
        session.install(*step)
        requirements = requirements[len(step) + 1:]
    if not any(a.startswith("--hypothesis-profile") for a in args):
        args = ["--hypothesis-profile=ci", *args]
    if not any(a == "-n" or a.startswith(("-n", "--numprocesses", "--dist")) for a in args):
        args = [*PARALLEL, *args]  # `-- -n 0` runs in one process
    try:
        _timed(session, time.monotonic() - start, [(f"suite on {name or 'impl'}",
                                                     ["thd_packing/conformance", *args])])
    except CommandFailed:
        if name and name not in ("impl", "reference"):
            session.log(f"conformance: target {name!r} fails rules, so this session fails by "
                        f"design; its findings lead reports/conformance-*.md "
                        f"(docs/findings/ for the built-in peers)")
        raise


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The benchmark: impl against verl 0.9.1 and the gather floor, idle and busy host (minutes)."""
    _install_test_deps(session)
    session.install("--no-deps", VERL)
    session.run("python", "-m", "bench.run", *session.posargs)  # writes reports/bench.json


@nox.session(python=PYTHON)
def bench_bins(session: nox.Session) -> None:
    """The bin step's benchmark: impl's binners against AReaL, verl, TRL, binpacking and
    LLaMA-Factory from their wheels, 10,000 to 1,000,000 examples and a 4,096-sequence step
    (tens of minutes)."""
    _install_test_deps(session)
    session.install("--no-deps", VERL, AREAL, TRL, LLAMAFACTORY)
    session.install(PYARROW, BINPACKING)
    session.run("python", "-m", "bench.bins", *session.posargs)  # writes reports/bench-bins.json


@nox.session(python=PYTHON)
def planner(session: nox.Session) -> None:
    """The planner's example (table, config to paste, plot), then its measured compile mode."""
    _install_test_deps(session)
    example = ["python", "-m", "bench.plan", "--dist", "lognormal", "--tokens-per-mb", "16384",
               "--cp", "4"]
    session.run(*example, "--plot", "reports/plan.png", "--json", "reports/plan.json",
                *session.posargs)
    # torch.compile of a varlen-attention stand-in on the first micro-batches: graphs compiled
    # without a bucket, with the recommended bucket, and with it plus static metadata.
    session.run(*example, "--micro-batches", "8", "--measure-compile",
                "--compile-micro-batches", "8", "--compile-backend", "aot_eager")


# python=None: the interpreter running nox, i.e. the runner's own Python with its torch and TE.
@nox.session(python=None, venv_params=["--system-site-packages"])
def gpu(session: nox.Session) -> None:
    """GPU tests on the runner's own torch and TransformerEngine (never reinstalled here).

    Without CUDA every test skips and the session exits 0. Posargs go to pytest, e.g.
    `nox -s gpu -- -k fp8 --junitxml=gpu.xml`. One-shot device script: gpu_tests/run_device.sh.
    """
    # torch and TE come from the runner's site-packages (--system-site-packages): installing
    # anything that depends on torch here could pull a different CUDA build, so only pytest.
    session.install("pytest")
    probe = session.run(
        "python",
        "-c",
        "import importlib.util as u\n"
        "try:\n import torch; cuda = torch.cuda.is_available(); v = torch.__version__\n"
        "except Exception as e:\n cuda, v = False, f'not importable ({type(e).__name__})'\n"
        "te = u.find_spec('transformer_engine') is not None\n"
        "print(f'torch {v}; cuda {cuda}; transformer_engine installed {te}')",
        silent=True,
    )
    session.log(f"gpu: {str(probe).strip()}")
    # `python -m`: pytest may be satisfied from the system site, whose script is not the venv's.
    session.run("python", "-m", "pytest", "gpu_tests", *session.posargs)
    if isinstance(probe, str) and "cuda True" not in probe:
        session.log("gpu: skipped - no usable CUDA device here, so every GPU test was skipped")


@nox.session(python=PYTHON)
def mutation(session: nox.Session) -> None:
    """Mutation testing of impl/ against the conformance suite (ci profile); prints kill rate."""
    _install_test_deps(session)
    session.run("python", "mutation/run.py", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff and mypy over the project."""
    session.install("-e", ".[test,lint]")  # mypy sees the real pytest, hypothesis, megatron types
    session.run("ruff", "check", ".")
    session.run("mypy", "thd_packing", "impl", "bench", "gpu_tests", "mutation")
