"""The network interface this process reaches the other nodes of a launch through.

Gloo (every CPU group, and the rollout link's object group on GPU too) binds to the address this
machine's hostname resolves to and tells the other ranks to connect there. Where the hostname resolves
to a loopback address (Debian's `127.0.1.1 HOST` line in /etc/hosts, many containers, a network
namespace), ranks on other nodes cannot connect ("Connection refused"), unless GLOO_SOCKET_IFNAME
names the interface to use. `use_route_to_master` sets it, in that case only, to the interface that
holds the address this process reaches MASTER_ADDR from: the one the launcher's rendezvous already uses.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager

GLOO_IFNAME = "GLOO_SOCKET_IFNAME"
AGENT_STORE_S = 30.0  # torchrun's store is up before its processes start: refused this long, it is gone


def source_address(host: str, port: int = 29500) -> str | None:
    """The local address this machine sends from to reach `host` (a UDP connect: no packet is sent);
    None when `host` does not resolve or no route leads to it."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(address)
            return str(s.getsockname()[0])
    except (OSError, UnicodeError):
        return None


def interface_of(address: str) -> str | None:
    """The name of the network interface that holds `address` (None: none does)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == address for a in addresses):
            return name
    return None


def is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def hostname_is_loopback() -> bool:
    """Whether gloo's default choice, the address the hostname resolves to, is a loopback address (or
    there is none, and gloo falls back to the loopback address)."""
    try:
        return is_loopback(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return True


def use_route_to_master() -> str | None:
    """Under a launcher whose MASTER_ADDR is reached over a real interface, and a hostname that resolves
    to a loopback address, set GLOO_SOCKET_IFNAME to that interface unless it is set; call before the
    first gloo group. The interface gloo uses (None: gloo's own choice, the hostname's address)."""
    chosen = os.environ.get(GLOO_IFNAME)
    if chosen or "MASTER_ADDR" not in os.environ or not hostname_is_loopback():
        return chosen or None
    address = source_address(os.environ["MASTER_ADDR"], int(os.environ.get("MASTER_PORT", 29500)))
    name = None if address is None or is_loopback(address) else interface_of(address)
    if name is not None:
        os.environ[GLOO_IFNAME] = name
    return name


@contextmanager
def reaching_peers() -> Iterator[None]:
    """The failures of connecting a new group's ranks, as one-line ConnectionErrors that say what to do:
    gloo's (no such interface, no connection) and the rendezvous store's (another node's process stopped)."""
    from torch.distributed import DistNetworkError

    try:
        yield
    except DistNetworkError as exc:
        reason = first_line(exc).rstrip(".")
        raise ConnectionError(
            f"no connection to the launch's rendezvous store ({reason}): every process must reach "
            f"MASTER_ADDR until all have joined; if a process on another node stopped, its own error says why"
        ) from None
    except RuntimeError as exc:
        missing = re.search(r"Unable to find address for: (\S+)", str(exc))
        if missing:
            raise ConnectionError(
                f"{GLOO_IFNAME}={missing[1]}: this node has no network interface of that name"
            ) from None
        if "connectFullMesh" not in str(exc):
            raise
        reason = first_line(exc).removeprefix("Gloo ")
        raise ConnectionError(
            f"the ranks cannot connect to each other over gloo ({reason}): set {GLOO_IFNAME} on every node "
            f"to the network interface that reaches the other nodes"
        ) from None


def launcher_store_reachable() -> None:
    """Under torchrun, whose agent hosts the rendezvous store before it starts this process: connect to
    it once within AGENT_STORE_S (a DistNetworkError past that), so a store that went away with another
    node's launcher ends this process in seconds, where the group's own connect would retry for the whole
    process-group timeout (30 minutes). Elsewhere (no agent store) nothing is checked."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return
    from datetime import timedelta

    from torch.distributed import TCPStore

    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    TCPStore(address, port, is_master=False, timeout=timedelta(seconds=AGENT_STORE_S))


def first_line(exc: BaseException) -> str:
    """An error's first line without the library's source location (`[.../pair.cc:152]`)."""
    return re.sub(r"\[[^\]]*\.(cc|h|cpp):\d+\]\s*|\$\d+$", "", str(exc).splitlines()[0]).strip()
