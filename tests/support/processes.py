"""Real processes for the tests: the service's commands started as `python -m app.cli ...`, the
waits for them to answer, their stopping, and the /proc walk that finds what they started."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.patience import Patience, oversubscription
from tests.support.repo import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_env(data_dir: Path, port: int, **settings: str) -> dict[str, str]:
    """The environment for `privclust serve` on its embedded defaults: this process's environment
    without any PRIVCLUST_* variable (so not the tests' own database and Redis), plus these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVCLUST_")}
    env.update(PRIVCLUST_DATA_DIR=str(data_dir), PRIVCLUST_PORT=str(port), **settings)
    return env


def start_cli(command: str, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """`python -m app.cli <command>` from the repository root, its output into `log_path`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", command],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def run_cli(
    command: str | list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m app.cli <command>` run to its end, its output captured as text (a list is a
    command with its arguments); `timeout` seconds on a quiet machine, stretched by the load."""
    argv = [command] if isinstance(command, str) else command
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout * oversubscription(),
    )


def log_tail(path: Path, chars: int = 3000) -> Callable[[], str]:
    """What a failed wait shows: the end of a process's log, read when the wait fails."""
    return lambda: path.read_text(errors="replace")[-chars:]


def logged(path: Path, text: str) -> Callable[[], bool]:
    """Whether the log at `path` says `text` yet (e.g. a server's start-up banner)."""
    return lambda: text in path.read_text(errors="replace")


def answers(url: str, timeout: float = 1) -> Callable[[], bool]:
    """Whether GET `url` answers 200 now (a refused or timed-out connection is a no)."""

    def check() -> bool:
        try:
            return httpx.get(url, timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def wait_until(
    ready: Callable[[], bool],
    *,
    proc: subprocess.Popen[bytes] | None,
    log: Callable[[], str],
    timeout: float = 60,
    what: str = "not ready in time",
    interval: float = 0.2,
) -> None:
    """Poll `ready` until it is true; fail with the log if `proc` exits or the time runs out
    (`timeout` seconds on a quiet machine, longer while the cores are busy: Patience)."""
    patience = Patience(timeout)
    while True:
        assert proc is None or proc.poll() is None, log()
        if ready():
            return
        assert patience.left(), f"{what}\n{log()}"
        time.sleep(interval)


def stop(
    proc: subprocess.Popen[bytes], timeout: float = 10, sig: signal.Signals = signal.SIGTERM
) -> None:
    """Signal a running process and wait for it; kill it if it outlives `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Served:
    """A running `privclust serve`: its base URL, port, process, log and admin token."""

    base: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    admin: str


@contextlib.contextmanager
def serving(data_dir: Path, log_path: Path, **settings: str) -> Iterator[Served]:
    """`privclust serve` on its embedded defaults (serve_env, plus `settings`) on a free port of
    127.0.0.1 with a new admin token, yielded once /readyz answers; stopped (SIGTERM, then
    SIGKILL) at exit."""
    port = free_port()
    admin = "pck_bench_" + secrets.token_urlsafe(16)
    env = serve_env(
        data_dir, port, PRIVCLUST_HOST="127.0.0.1", PRIVCLUST_ADMIN_TOKEN=admin, **settings
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = start_cli("serve", env, log_path)
    served = Served(f"http://127.0.0.1:{port}", port, proc, log_path, admin)
    try:
        ready = answers(served.base + "/readyz", timeout=2)
        log = log_tail(log_path)
        wait_until(ready, proc=proc, log=log, timeout=90, what="serve not ready", interval=0.3)
        yield served
    finally:
        stop(proc, timeout=20)


# --- the process tree, read from /proc (Linux) ---------------------------------------------------


def children_of(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.update(int(k) for k in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        for kid in children_of(todo.pop()):
            if kid not in out:
                out.add(kid)
                todo.append(kid)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
