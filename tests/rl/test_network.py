"""`rl/distributed/network.py` on this machine: the address and interface a destination is reached through, gloo's
interface left alone on one machine, and connection failures as one line (real gloo groups and stores).
Across two nodes: tests/rl/test_multinode.py."""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch.distributed as dist

from srpo_dsl.rl.distributed.network import (
    GLOO_IFNAME,
    interface_of,
    launcher_store_reachable,
    reaching_peers,
    source_address,
    use_route_to_master,
)
from srpo_dsl.rl.distributed.process_group import free_port


def test_the_loopback_address_is_reached_from_itself_over_the_loopback_interface() -> None:
    assert source_address("127.0.0.1") == "127.0.0.1"
    assert interface_of("127.0.0.1") in ("lo", "lo0")
    assert source_address("nowhere.invalid") is None
    assert interface_of("192.0.2.254") is None  # TEST-NET-1: held by no interface here


def test_one_machine_keeps_gloos_own_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GLOO_IFNAME, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert use_route_to_master() is None
    assert GLOO_IFNAME not in os.environ
    monkeypatch.setenv(GLOO_IFNAME, "lo")
    assert use_route_to_master() == "lo"


def test_an_interface_that_is_not_there_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GLOO_IFNAME, "srpo-none")
    with pytest.raises(ConnectionError) as caught, reaching_peers():
        dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=5))
    assert (
        str(caught.value) == "GLOO_SOCKET_IFNAME=srpo-none: this node has no network interface of that name"
    )


def test_a_rendezvous_store_out_of_reach_is_one_line() -> None:
    with pytest.raises(ConnectionError) as caught, reaching_peers():
        dist.TCPStore("127.0.0.1", free_port(), 2, False, datetime.timedelta(seconds=1))
    message = str(caught.value)
    assert message.startswith("no connection to the launch's rendezvous store (") and "\n" not in message


def test_a_launcher_store_that_went_away_is_one_line_in_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun the agent's store is up before a rank starts: one that refuses (another node's
    launcher stopped) ends the rank within AGENT_STORE_S, not after torch's 30-minute connect."""
    from srpo_dsl.rl.distributed import network

    monkeypatch.setattr(network, "AGENT_STORE_S", 0.5)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # nothing listens there
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    launcher_store_reachable()  # no agent store (one process, DeepSpeed's launcher): nothing checked
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    started = time.monotonic()
    with pytest.raises(ConnectionError) as caught, reaching_peers():
        launcher_store_reachable()
    assert time.monotonic() - started < 10
    assert str(caught.value).startswith("no connection to the launch's rendezvous store (")
