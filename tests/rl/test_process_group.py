"""The process group's teardown: at exit, the groups `init_distributed` created are destroyed and their
gloo worker threads joined while the interpreter is whole.

Run as a script under torchrun (2 ranks), this file is the worker of the test:
    python tests/rl/test_process_group.py OUT_DIR
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
PENDING: list[object] = []  # the worker's unfinished callbacks, referenced to the end


def native_threads() -> list[str]:
    """The names of this process's OS threads (gloo's are `gloo_tcp_loop` and `pt_gloo_runloop`)."""
    names = []
    for task in sorted(os.listdir("/proc/self/task")):
        try:
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
        except OSError:  # a thread that ended meanwhile
            continue
    return names


def worker(out: str) -> None:
    """Join the group, start a collective whose completion callback runs on a gloo worker thread and needs
    the GIL again after a sleep, and exit while it sleeps. Records the threads left after the teardown
    (this handler is registered first, so it runs after `init_distributed`'s)."""
    import time

    import torch

    from srpo_dsl.rl.distributed.process_group import init_distributed

    rank = os.environ["RANK"]
    atexit.register(lambda: Path(out, f"threads-{rank}").write_text(" ".join(native_threads())))
    init_distributed("cpu")
    pending = torch.distributed.all_reduce(torch.ones(4), async_op=True).get_future()
    PENDING.append(pending.then(lambda _: time.sleep(0.5)))  # still running when the main thread ends
    time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from /proc")
def test_the_groups_are_destroyed_and_their_threads_joined_before_the_interpreter_ends(tmp_path):
    """Without the teardown both ranks abort with "terminate called without an active exception" (the
    worker thread is ended mid-destructor when it takes the GIL during interpreter finalization)."""
    from srpo_dsl.rl.distributed.process_group import free_port

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port"]
    done = subprocess.run(
        [*launcher, str(free_port()), str(HERE), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "terminate called" not in done.stderr
    for rank in (0, 1):
        left = (tmp_path / f"threads-{rank}").read_text().split()
        assert not [name for name in left if "gloo" in name], left


if __name__ == "__main__":
    worker(*sys.argv[1:])
