"""`srpo-dsl train --dry-run`: each process's role, node and device, before anything loads; without a
launcher the processes the command would start, under one each rank as the launch placed it. (Across
two nodes: tests/rl/test_multinode.py.)"""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from srpo_dsl.rl.distributed.process_group import free_port
from srpo_dsl.rl.loop.plan import read_ds_config
from tests.support.clitools import ROOT, cli
from tests.support.compiles.count import compiling_processes, counting
from tests.support.markdown import Shown, indented_blocks, trimmed
from tests.support.runs import QUICKSTART, env_threads

HOST = socket.gethostname()

NOTHING_LOADED = """
import gc, sys
from srpo_dsl.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
import torch
modules = [m for m in ("deepspeed", "vllm") if m in sys.modules]
weights = [o for o in gc.get_objects() if isinstance(o, torch.nn.Parameter)]
print("exit", code or 0, "modules", modules, "parameters", len(weights), file=sys.stderr)
"""


def user_code_team(folder: Path) -> Path:
    """The quickstart with a Python reward whose module, once imported, leaves a file."""
    shutil.copytree(ROOT / "workflows" / "quickstart", folder / "quickstart")
    (folder / "r.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('imported').touch()\n\n"
        "def score(answer, row):\n    return 0.0\n"
    )
    team = folder / "team.srpo"
    reward = 'reward "r.py:score"(aggregator)'
    team.write_text(QUICKSTART.read_text().replace("reward exact_match(aggregator, task.answer)", reward))
    return team


def test_without_a_launcher_it_lists_the_processes_it_would_start_and_loads_nothing(tmp_path: Path) -> None:
    team = user_code_team(tmp_path)
    argv = ["train", str(team), "--out", str(tmp_path / "run"), "--option", "rollout_workers=2", "--dry-run"]
    done = subprocess.run(
        [sys.executable, "-c", NOTHING_LOADED, *argv],
        cwd=ROOT,
        env=env_threads(1),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stderr.splitlines()[-1] == "exit 0 modules [] parameters 0", done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "dry run: without a launcher this command runs 3 processes on this machine (1 trainer rank, "
        "2 rollout workers); none was started",
        f"rank 0/3  trainer rank 0    this machine ({HOST})  cpu",
        f"rank 1/3  rollout worker 0  this machine ({HOST})  cpu",
        f"rank 2/3  rollout worker 1  this machine ({HOST})  cpu",
    ]
    assert not (tmp_path / "imported").exists() and not (tmp_path / "run").exists()


def test_a_synchronous_run_without_a_launcher_is_one_trainer_process() -> None:
    done = cli("train", QUICKSTART, "--device", "cpu", "--dry-run", env=env_threads(1))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "dry run: without a launcher this command runs 1 process on this machine (1 trainer rank); "
        "none was started",
        f"rank 0/1  trainer rank 0  this machine ({HOST})  cpu",
    ]


def cli_examples() -> list[Shown]:
    """docs/cli.md's `$ ... --dry-run` examples, each with the lines shown under it."""
    blocks = indented_blocks((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").splitlines())
    return [Shown(b[0][2:], trimmed(b[1:])) for b in blocks if b[0].startswith("$ ") and "--dry-run" in b[0]]


def test_the_cli_pages_dry_runs_print_what_it_shows(tmp_path: Path) -> None:
    """Without a launcher and under torchrun (two processes on this machine), as docs/cli.md shows them
    (HOST: this machine's hostname)."""
    examples = cli_examples()
    assert [e.command.split()[0] for e in examples] == ["srpo-dsl", "torchrun"]
    swap = {
        "torchrun": [sys.executable, "-m", "torch.distributed.run"],
        "srpo-dsl": [sys.executable, "-m", "srpo_dsl"],
    }
    for n, example in enumerate(examples):
        argv = [part for arg in shlex.split(example.command) for part in swap.get(arg, [arg])]
        env = counting(env_threads(1), tmp_path / f"compiles-{n}")
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.splitlines() == [line.replace("HOST", HOST) for line in example.output], (
            example.command
        )
        assert compiling_processes(tmp_path / f"compiles-{n}") == 1  # under torchrun: rank 0, which hands
        # its plan to the other ranks


def test_as_deepspeed_launches_them_rank_0_hosts_the_store_and_hands_its_plan_on(tmp_path: Path) -> None:
    """The `deepspeed` launcher (and `srpo-dsl`'s own) starts the ranks with RANK, WORLD_SIZE, MASTER_ADDR
    and MASTER_PORT only: rank 0 hosts the rendezvous store after it planned; the other rank waits there for
    the plan, and both join the dry run's group on that one store."""
    port, compiles = str(free_port()), tmp_path / "compiles"
    command = [sys.executable, "-m", "srpo_dsl", "train", str(QUICKSTART), "--zero", "2", "--dry-run"]
    ranks = [
        subprocess.Popen(
            command,
            cwd=ROOT,
            env=counting(env_threads(1), compiles) | launch(rank, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (1, 0)  # the other rank first: it waits for rank 0's store
    ]
    (out1, err1), (out0, err0) = (r.communicate(timeout=120) for r in ranks)
    assert [r.returncode for r in ranks] == [0, 0], err0[-2000:] + err1[-2000:]
    assert out0.splitlines()[0].startswith("dry run: 2 processes on 1 node (2 trainer ranks), connected")
    assert out1 == ""
    assert compiling_processes(compiles) == 1


def launch(rank: int, port: str) -> dict[str, str]:
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port}  # fmt: skip


def test_under_torchrun_a_workflow_error_is_said_once_by_rank_0(tmp_path: Path) -> None:
    """The other rank parses nothing: it waits for rank 0's plan, and ends in silence when none comes."""
    team = tmp_path / "team.srpo"
    team.write_text(QUICKSTART.read_text().replace("agent ", "agnet ", 1))
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    argv = [*torchrun, "--master_port", str(free_port()), "-m", "srpo_dsl", "train", str(team), "--dry-run"]
    done = subprocess.run(argv, cwd=ROOT, env=env_threads(1), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.count(f"{team}:") == 1, done.stderr[-2000:]
    assert "srpo_dsl/" not in done.stderr  # no traceback of ours (torchrun prints its own)


def test_a_launch_too_small_for_its_workers_is_one_line() -> None:
    env = env_threads(1) | {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    done = cli("train", QUICKSTART, "--option", "rollout_workers=2", "--dry-run", env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "error: rollout_workers = 2 needs at least 3 processes (one trainer), the launcher started 2\n"
    )


def test_a_deepspeed_config_that_is_not_json_is_one_line_naming_its_place(tmp_path: Path) -> None:
    """The dry run reads `--ds-config` as the run does: a file that is not JSON (here YAML) stops it with
    the file and the JSON error's line:column, before anything is printed; one that is not text, with
    the byte."""
    (tmp_path / "ds.yaml").write_text("{\n  zero_optimization:\n    stage: 2\n")
    done = cli("train", QUICKSTART, "--ds-config", "ds.yaml", "--dry-run", cwd=tmp_path, env=env_threads(1))
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr == "error: ds.yaml:2:3: invalid JSON: Expecting property name enclosed in double quotes\n"
    )
    (tmp_path / "ds.bin").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError) as err:
        read_ds_config(tmp_path / "ds.bin")
    assert str(err.value) == f"cannot read {tmp_path / 'ds.bin'}: not UTF-8 text (byte 0xff at offset 7)"
