"""Test hosts on one machine: Linux network namespaces joined by a bridge, each with its own
address, so that a test can run the service's parts as if on separate machines (root only).

Every name and address is the test run's own: namespaces `pc<id><host>`, a bridge `pcbr<id>`,
addresses 10.213.<n>.0/24 (the bridge, in this namespace, is .254). Everything is removed at
exit, also when the test fails: the processes started on the hosts (`processes_on`, each in a
session of its own, stopped with everything it started) before the namespaces.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.repo import ROOT


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


def hosts_or_skip() -> None:
    """Skip the test unless PRIVCLUST_TEST_HOSTS=1 (`.ci/run` sets it) and this process is root;
    fail it where both hold and the hosts still cannot be made (CI asked for them)."""
    if os.environ.get("PRIVCLUST_TEST_HOSTS") != "1":
        pytest.skip("needs root and its own network: PRIVCLUST_TEST_HOSTS=1 runs it (.ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("PRIVCLUST_TEST_HOSTS=1, but network namespaces need root")
    why = can_make_hosts()
    if why is not None:
        pytest.fail(f"PRIVCLUST_TEST_HOSTS=1, but this machine cannot make test hosts: {why}")


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


@dataclass
class HostProcesses:
    """Processes started on the hosts of `network`, by name, each logging into `logs_dir`."""

    network: Network
    logs_dir: Path
    logs: dict[str, Path] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(
        self, host: str, name: str, argv: Sequence[str], env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """`argv` on `host` from the repository root, in a session of its own, with `env`
        (whole: nothing of this process's environment is added)."""
        self.logs[name] = self.logs_dir / f"{name}.log"
        with open(self.logs[name], "wb") as out:
            proc = subprocess.Popen(
                self.network.hosts[host].command(argv),
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._started.append(proc)
        self.processes[name] = proc
        return proc

    def stop(self, name: str, timeout: float = 60) -> None:
        """Stop one process and everything it started (its session)."""
        _stop_sessions([self.processes[name]], timeout)

    def all_logs(self) -> str:
        return "\n".join(
            f"--- {n}\n{p.read_text(errors='replace')[-3000:]}" for n, p in self.logs.items()
        )

    def stop_all(self) -> None:
        _stop_sessions(list(reversed(self._started)), 30)


def _stop_sessions(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM to each process's session, then SIGKILL to any that outlives `timeout` s. The
    session is signalled even where its leader has exited: what it started may live on."""
    for proc in procs:
        _signal_session(proc, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_session(proc, signal.SIGKILL)
            proc.wait()


def _signal_session(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):  # the session has ended
        os.killpg(proc.pid, sig)


@contextmanager
def processes_on(network: Network, logs_dir: Path) -> Iterator[HostProcesses]:
    """Processes to start on the network's hosts; all stopped at exit, also on failure."""
    started = HostProcesses(network, logs_dir)
    try:
        yield started
    finally:
        started.stop_all()
