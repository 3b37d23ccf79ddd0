"""Test hosts on one machine: Linux network namespaces joined by a bridge, each with its own
address, so that a test can run the service's parts as if on separate machines (root only).

Every name and address is the test run's own: namespaces `pc<id><host>`, a bridge `pcbr<id>`,
addresses 10.213.<n>.0/24 (the bridge, in this namespace, is .254). Everything is removed at
exit, also when the test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


def can_make_hosts() -> str | None:
    """Why this machine cannot make test hosts, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class Host:
    name: str  # the namespace
    address: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *argv]


@dataclass(frozen=True)
class Network:
    hosts: dict[str, Host]
    gateway: str  # this namespace's address on the bridge


@contextmanager
def network_of_hosts(names: Sequence[str]) -> Iterator[Network]:
    """One namespace per name, each with an address on a shared bridge; removed at exit."""
    run_id = os.getpid() % 10_000
    subnet = f"10.213.{os.getpid() % 200}"
    bridge = f"pcbr{run_id}"
    made: list[str] = []
    accept: list[str] = []
    hosts: dict[str, Host] = {}
    try:
        _ip("link", "add", bridge, "type", "bridge")
        # Where bridged frames go through the host's iptables (br_netfilter) and FORWARD drops
        # them (Docker sets that policy), let the test hosts' traffic on this bridge pass.
        accept = ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]
        if shutil.which("iptables"):
            subprocess.run(["iptables", "-I", *accept], capture_output=True)
        _ip("addr", "add", f"{subnet}.254/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, name in enumerate(names, start=1):
            ns, veth = f"pc{run_id}{name}"[:15], f"pcv{run_id}n{i}"[:15]
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", bridge)
            _ip("link", "set", veth, "up")
            address = f"{subnet}.{i}"
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            hosts[name] = Host(ns, address)
        yield Network(hosts, f"{subnet}.254")
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
        if accept and shutil.which("iptables"):
            subprocess.run(["iptables", "-D", *accept], capture_output=True)
