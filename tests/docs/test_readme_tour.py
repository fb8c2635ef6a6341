"""The README as a newcomer follows it, so that it cannot drift from what the commands do.

- The five-minute tour: every `$ ` command of it runs, in order, in a copy of the workflows and
  data, and prints what the README shows under it (`...` in a shown line stands for any text).
- The workflow the tour shows is the shipped file; the Mermaid block is what `compile` prints.
- Every command line in a code block of the README and docs/ parses: srpo-dsl's own options, and
  the launchers' (`deepspeed`, `torchrun`) with the srpo-dsl command they start.
- The quickstart's figures the README and docs/cli.md state are those of a recorded run of its command
  (tests/data/quickstart_run/: eval.jsonl, and metrics.jsonl's first and last rows), and the command
  still starts as that run did (its step-0 evaluation and first step, to the digit: a run is
  deterministic for a seed and a thread count). A change that moves them makes the figures stale: run
  `srpo-dsl train workflows/quickstart.srpo --out runs/quickstart` again, copy its eval.jsonl and the first
  and last rows of its metrics.jsonl there, and state its figures.
- constraints/cpu.txt pins the environment that run came from, admits every dependency pyproject.toml
  declares, and CI's environment is installed under it (SRPO_DSL_PINNED_TESTS=required: a version other
  than its pin fails the recorded-run test instead of being let through "to rounding").
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import tomllib
import typer
from packaging.requirements import Requirement

from tests.support.markdown import Shown, agrees, indented_blocks, section, trimmed

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICKSTART_RUN = ROOT / "tests" / "data" / "quickstart_run"
PINS = ROOT / "constraints" / "cpu.txt"
PINNED_REQUIRED = os.environ.get("SRPO_DSL_PINNED_TESTS") == "required"
TOUR = "## A five-minute tour"
LAUNCHED = re.compile(r"(\$ )?(srpo-dsl|deepspeed|torchrun) ")


def tour() -> list[Shown]:
    """The tour's `$ ` commands, each with the lines under it in its code block."""
    shown: list[Shown] = []
    for block in indented_blocks(section(README.read_text(encoding="utf-8"), TOUR)):
        current = None
        for line in block:
            if line.startswith("$ "):
                current = Shown(line[2:], [])
                shown.append(current)
            elif current is not None:
                current.output.append(line)
    return [Shown(s.command, trimmed(s.output)) for s in shown]


def run_shown(command: str, folder: Path) -> list[str]:
    """The command as a user's shell runs it, `srpo-dsl` being this checkout; stdout and stderr in the
    order they were written (unbuffered), srpo-dsl's progress bars off (on a terminal they erase themselves)."""
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}
    env |= {"SRPO_PYTHON": sys.executable}
    script = f'srpo-dsl() {{ "$SRPO_PYTHON" -m srpo_dsl "$@"; }}\n{command}'
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    return trimmed(done.stdout.splitlines())


@pytest.mark.slow
def test_the_tour_prints_what_the_readme_shows(tmp_path: Path) -> None:
    for folder in ("workflows", "data"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    steps = tour()
    assert [s.command.split()[:2] for s in steps][:2] == [["srpo-dsl", "validate"], ["sed", "'s/parallel"]]
    drifted = []
    for step in steps:
        printed = run_shown(step.command, tmp_path)
        same = len(printed) == len(step.output) and all(map(agrees, step.output, printed))
        if not same:
            shown, out = "\n".join(step.output), "\n".join(printed)
            drifted.append(f"$ {step.command}\n--- shown\n{shown}\n--- printed\n{out}")
    assert not drifted, "the README's tour has drifted:\n\n" + "\n\n".join(drifted)
    again = run_shown(steps[0].command, tmp_path)  # the tour left no workflow of its own behind
    assert len(again) == len(steps[0].output) and all(map(agrees, steps[0].output, again)), again


def test_the_tour_shows_the_shipped_workflow_and_its_graph() -> None:
    lines = section(README.read_text(encoding="utf-8"), TOUR)
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    workflow = lines[fences[0] + 1 : fences[1]]
    shipped = (ROOT / "workflows" / "math_routed.srpo").read_text(encoding="utf-8").splitlines()
    assert workflow == shipped[shipped.index("workflow math_routed") :]
    mermaid = lines[fences[2] + 1 : fences[3]]
    (compiled,) = [s for s in tour() if s.command.startswith("srpo-dsl compile")]
    assert lines[fences[2]] == "```mermaid" and mermaid == compiled.output[:-1]


def quickstart_report() -> list[str]:
    """The two lines `srpo-dsl train workflows/quickstart.srpo --out runs/quickstart` ended with, in the
    recorded run: its last step, and the held-out result."""
    from srpo_dsl.api.runs import Run
    from srpo_dsl.cli.train_cmds import report

    with redirect_stdout(io.StringIO()) as printed:
        report(Run(QUICKSTART_RUN, Run.open(QUICKSTART_RUN).metrics[-1:]))
    return printed.getvalue().replace(str(QUICKSTART_RUN), "runs/quickstart").splitlines()


def test_the_docs_state_the_recorded_quickstart_runs_figures() -> None:
    step, heldout = quickstart_report()
    assert step.startswith("step 150: ") and heldout.startswith("held-out Avg@4 ")
    cli_page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert f"    {step}\n    {heldout}\n" in cli_page  # as `train` prints them
    assert f"    {heldout.split(';')[0]}\n" in README.read_text(encoding="utf-8")  # the README's quickstart


def first_rows(run: Path) -> tuple[dict, dict]:
    """The step-0 evaluation and the first step's metrics of a run, without their wall-clock times."""
    rows = [json.loads((run / name).read_text().splitlines()[0]) for name in ("eval.jsonl", "metrics.jsonl")]
    untimed = [{k: v for k, v in row.items() if not k.startswith("time")} for row in rows]
    return untimed[0], untimed[1]


def pins() -> dict[str, str]:
    """{distribution: version} of constraints/cpu.txt."""
    lines = [line.strip() for line in PINS.read_text(encoding="utf-8").splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def off_the_pins() -> list[str]:
    """`name installed (pinned version)` for each pinned distribution installed at another version."""
    off = []
    for name, pinned in pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed.split("+")[0] != pinned:  # torch's CPU build is 2.13.0+cpu
            off.append(f"{name} {installed} (pinned {pinned})")
    return off


def test_the_pins_admit_every_declared_dependency() -> None:
    """A floor raised past its pin, or a dependency added without one, would make the pinned install fail."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    pinned = {name.lower().replace("_", "-"): version for name, version in pins().items()}
    for requirement in map(Requirement, declared):
        name = requirement.name.lower().replace("_", "-")
        if name == "vllm":  # a GPU machine's; it does not install on the CPU these pins are for
            continue
        if requirement.marker and not requirement.marker.evaluate({"python_version": "3.11"}):
            continue  # the pinned environment's Python is 3.11
        assert name in pinned, f"constraints/cpu.txt pins no {name}"
        assert requirement.specifier.contains(pinned[name]), (
            f"{name}=={pinned[name]} is outside {requirement}"
        )


@pytest.mark.slow
def test_the_quickstart_starts_as_the_recorded_run(tmp_path: Path) -> None:
    """One step of the README's command, with the two threads of the 2-core machine it was recorded on; in
    CI under constraints/cpu.txt, whose versions it checks first."""
    from srpo_dsl.sweep.runner import LAUNCHER_VARIABLES

    off = off_the_pins()
    assert not (PINNED_REQUIRED and off), f"not the pinned environment: {', '.join(off)}"

    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env |= {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    command = ["train", "workflows/quickstart.srpo", "--out", str(tmp_path / "q"), "--steps", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "srpo_dsl", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (evaluated, step), (recorded_eval, recorded_step) = first_rows(tmp_path / "q"), first_rows(QUICKSTART_RUN)
    assert evaluated == recorded_eval  # sampled answers: the same to the digit
    assert step == pytest.approx(recorded_step, rel=1e-4, abs=1e-6)  # the gradient's norm to rounding


def doc_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every command line in a code block of the README and docs/*.md; a line's
    description column (after two spaces), its comment and what it pipes into are left out."""
    found = []
    for path in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        lines, fenced = path.read_text(encoding="utf-8").splitlines(), False
        for n, line in enumerate(lines):
            fenced ^= line.lstrip().startswith("```")
            text = line.strip()
            if not (fenced or line.startswith("    ")) or not LAUNCHED.match(text):
                continue
            while text.endswith("\\"):
                text = text[:-1] + lines[n + 1].strip()
                n += 1
            text = re.split(r"\s{2,}(?=[^-#\s])", text.removeprefix("$ "))[0]
            argv = shlex.split(text, comments=True)
            found.append((f"{path.name}:{n + 1}", argv[: argv.index("|")] if "|" in argv else argv))
    return found


def parse_srpo_dsl(args: list[str]) -> None:
    """The arguments as srpo-dsl's command line reads them (options, choices, types); nothing runs."""
    from srpo_dsl.cli.main import app

    group = typer.main.get_command(app)
    at = next(i for i, arg in enumerate(args) if not arg.startswith("-"))  # the command's name
    ctx = group.make_context("srpo-dsl", args[: at + 1])  # the options before it
    command = group.get_command(ctx, args[at])
    assert command is not None, f"no command `{args[at]}`"
    command.make_context(args[at], args[at + 1 :], parent=ctx)


def launched(argv: list[str]) -> list[str]:
    """The srpo-dsl arguments of a command line: its own, or what a launcher runs as `-m srpo_dsl`."""
    if argv[0] == "srpo-dsl":
        return argv[1:]
    if argv[0] == "deepspeed":
        from deepspeed.launcher.runner import parse_args

        args = parse_args(argv[1:])
        assert args.module and args.user_script == "srpo_dsl", "deepspeed runs a module with --module"
        return ["--local_rank=0", *args.user_args]  # the launcher adds it before the command
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(argv[1:])
    assert args.module and args.training_script == "srpo_dsl", "torchrun runs a module with -m"
    return args.training_script_args


def test_every_command_line_in_the_docs_parses() -> None:
    commands = doc_commands()
    assert any(argv[0] == "deepspeed" for _, argv in commands) and len(commands) > 20
    for where, argv in commands:
        try:
            parse_srpo_dsl(launched(argv))
        except (SystemExit, Exception) as exc:  # click's usage errors, argparse's exits, the asserts
            pytest.fail(f"{where}: {shlex.join(argv)}: {type(exc).__name__}: {exc}")


@pytest.mark.slow
def test_the_deepspeed_launcher_starts_a_command_as_the_docs_write_it() -> None:
    """DeepSpeed's own launcher (one local process): `--module srpo_dsl`, `--local_rank=0` put before the command."""
    runner = "from deepspeed.launcher.runner import main; main()"
    argv = [sys.executable, "-c", runner, "--num_gpus", "1", "--module", "srpo_dsl", "validate"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*argv, "workflows/quickstart.srpo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]  # the child saw `--local_rank=0 validate ...`
    assert done.stderr == "1 file(s) checked: 0 error(s), 0 warning(s)\n"
