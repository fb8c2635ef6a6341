"""One process of a Ray launch (`api.ray_launch`): the body of its Ray actor.

The actor starts `srpo-dsl train` as a child process with the variables a launcher sets and streams
the child's stdout and stderr back to the driver as they come (a Ray generator), then its exit code.
A child process rather than the command run inside the actor: CUDA_VISIBLE_DEVICES and LOCAL_RANK must
be set before CUDA starts; the trainer's signal handlers and time limits need a main thread of their
own; what native libraries write to the file descriptors reaches the user with the rest; and the exit
code is the command's own, a signal's too (128 + N, as a shell reports it). The child dies with its
actor (PR_SET_PDEATHSIG, Linux): an actor that is killed (`ray.kill`, its process or its node gone)
takes its process with it, and its peers see a closed connection, as when a process of any launcher
dies. The child marks in a folder of the actor's when it joined the launch (`launched.mark_joined`): a
worker that ends before that ends the launch. Imports nothing of Ray at module level: the driver
imports this module without starting Ray.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence

from srpo_dsl.launched import JOINED, joined_count

CHUNK = 1 << 16  # bytes read from the child at a time
PR_SET_PDEATHSIG = 1  # prctl(2)
SIGKILL = int(signal.SIGKILL)


class RankProcess:
    """A Ray actor's body: where it runs, a free port there, and the one process it runs."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.marks = tempfile.mkdtemp(prefix="srpo-dsl-joined-")  # the child's, once it joined the launch

    def place(self) -> tuple[str, str, list[str]]:
        """This actor's node (Ray's id), the node's address, and the GPUs Ray gave the actor."""
        import ray

        context = ray.get_runtime_context()
        gpus = [str(g) for g in context.get_accelerator_ids().get("GPU", [])]
        return context.get_node_id(), ray.util.get_node_ip_address(), gpus

    def free_port(self) -> int:
        """A port free on this node now (rank 0's process binds it for the rendezvous store)."""
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str) -> Iterator[tuple[str, bytes | int]]:
        """`python -m srpo_dsl ARGV` in `cwd`, this actor's environment with `env` over it: ("out" or "err",
        bytes) as the child writes them, then ("exit", its exit code)."""
        command = [sys.executable, "-m", "srpo_dsl", *argv]
        try:
            self.process = subprocess.Popen(
                command,
                cwd=cwd,
                env=os.environ | dict(env) | {JOINED: self.marks},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=dying_with(os.getpid()),
            )
        except OSError as exc:
            where = ray_node_address()
            yield "err", f"error: cannot start srpo-dsl on the Ray node {where} in {cwd}: {exc}\n".encode()
            yield "exit", 1
            return
        yield from streamed(self.process)
        code = self.process.wait()
        shutil.rmtree(self.marks, ignore_errors=True)
        yield "exit", code if code >= 0 else 128 - code

    def joined(self) -> bool:
        """The process joined the launch (and so every process did: they connect as one)."""
        return os.path.isdir(self.marks) and joined_count(self.marks) > 0

    def signal(self, number: int) -> None:
        """Pass a signal on to the process (the driver's Ctrl-C)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(number)


def streamed(process: subprocess.Popen[bytes]) -> Iterator[tuple[str, bytes]]:
    """The process's stdout ("out") and stderr ("err") chunks, as they come, until both are closed."""
    assert process.stdout is not None and process.stderr is not None  # started with both piped
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "out")
        selector.register(process.stderr, selectors.EVENT_READ, "err")
        while selector.get_map():
            for key, _ in selector.select():
                if chunk := os.read(key.fd, CHUNK):
                    yield key.data, chunk
                else:
                    selector.unregister(key.fileobj)


def dying_with(parent: int) -> Callable[[], None]:
    """What the child runs before `exec`: take signals again (a Ray worker blocks SIGINT, and a blocked
    signal stays blocked across `exec`: the driver's Ctrl-C would never arrive), and on Linux be killed
    when `parent` (the actor) dies."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None  # looked up here

    def child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, SIGKILL)
            if os.getppid() != parent:  # the actor died before the call
                os._exit(1)

    return child


def ray_node_address() -> str:
    import ray

    return ray.util.get_node_ip_address()
