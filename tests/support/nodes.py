"""Two "nodes" on one Linux machine: network namespaces joined by a veth pair, for multi-node tests.

Each namespace has its own network stack: `lo` and one end of the pair, with an address that exists
only inside it (10.77.0.1/24 and 10.77.0.2/24); a process started with `ip netns exec NODE ...` sees
only its node's interfaces, and reaches the other node over the pair. The file system and the
hostname stay shared (a checkpoint folder is "shared storage"; the hostname cannot tell the nodes
apart). Creating them needs root and `ip` (iproute2): elsewhere the tests that use the fixture
`two_nodes` (import `two_nodes_fixture`) skip, unless SRPO_DSL_MULTINODE_TESTS=required (set by
.ci/run), which makes a missing capability a failure.
The commands are the ones docs/training.md shows ("Many nodes"); a test checks that they agree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

REQUIRED = os.environ.get("SRPO_DSL_MULTINODE_TESTS") == "required"
NODES = ("srpo-node0", "srpo-node1")  # namespaces, for --node_rank 0 and 1
INTERFACES = ("srpo-veth0", "srpo-veth1")
ADDRESSES = ("10.77.0.1", "10.77.0.2")

SETUP = [
    f"ip netns add {NODES[0]}",
    f"ip netns add {NODES[1]}",
    f"ip link add {INTERFACES[0]} netns {NODES[0]} type veth peer name {INTERFACES[1]} netns {NODES[1]}",
    *(f"ip -n {n} addr add {a}/24 dev {i}" for n, a, i in zip(NODES, ADDRESSES, INTERFACES)),
    *(f"ip -n {n} link set lo up" for n in NODES),
    *(f"ip -n {n} link set {i} up" for n, i in zip(NODES, INTERFACES)),
]
TEARDOWN = [f"ip netns del {n}" for n in NODES]  # deleting a namespace deletes its end of the pair


@dataclass(frozen=True)
class Nodes:
    """The two namespaces, ready: their names, the veth ends and the addresses inside them."""

    names: tuple[str, str] = NODES
    interfaces: tuple[str, str] = INTERFACES
    addresses: tuple[str, str] = ADDRESSES


def missing() -> str | None:
    """Why network namespaces cannot be made here (None: they can be tried)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if shutil.which("ip") is None:
        return "no `ip` command (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    return None


def run(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command.split(), capture_output=True, text=True, timeout=30)


def remove() -> None:
    """Delete both namespaces, if there (also those an earlier, killed run left behind)."""
    for command in TEARDOWN:
        run(command)


def create() -> str | None:
    """Make both namespaces afresh; the first failing command and its error (None: done)."""
    remove()
    for command in SETUP:
        done = run(command)
        if done.returncode != 0:
            remove()
            return f"`{command}` failed: {done.stderr.strip() or done.returncode}"
    return None


@pytest.fixture(scope="module", name="two_nodes")
def two_nodes_fixture() -> Iterator[Nodes]:
    """Two network namespaces joined by a veth pair, removed afterwards; skipped (failed when required)
    where they cannot be made."""
    reason = missing() or create()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"{reason}, and SRPO_DSL_MULTINODE_TESTS=required")
        pytest.skip(reason)
    try:
        yield Nodes()
    finally:
        remove()
