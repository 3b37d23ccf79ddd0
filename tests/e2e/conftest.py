"""Real processes: the API (uvicorn) and RQ workers started as `python -m app.cli ...`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import pytest

from app.kit.config import Settings
from tests.conftest import make_key

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    base_url: str
    env: dict[str, str]
    log_dir: Path
    api: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    admin_key: str = ""
    handles: list[IO[bytes]] = field(default_factory=list)

    def start_worker(self) -> subprocess.Popen[bytes]:
        n = len(self.workers)
        log = open(self.log_dir / f"worker{n}.log", "wb")  # noqa: SIM115
        self.handles.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker"],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(proc)
        return proc

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, timeout=30, headers={"Authorization": f"Bearer {key}"}
        )

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.log_dir.glob("*.log"))
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    port = free_port()
    env = {
        **os.environ,
        "PRIVCLUST_PORT": str(port),
        "PRIVCLUST_HOST": "127.0.0.1",
        "PRIVCLUST_WORKER_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    api_log = open(log_dir / "api.log", "wb")  # noqa: SIM115
    api = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "api"],
        env=env,
        cwd=ROOT,
        stdout=api_log,
        stderr=subprocess.STDOUT,
    )
    s = Stack(
        base_url=f"http://127.0.0.1:{port}",
        env=env,
        log_dir=log_dir,
        api=api,
        admin_key=make_key(settings.resolved_database_url, "admin", "admin"),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert api.poll() is None, s.logs()
            try:
                if httpx.get(s.base_url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "API did not start\n" + s.logs()
            time.sleep(0.2)
        s.start_worker()
        yield s
    finally:
        for p in [*s.workers, api]:
            _stop(p)
        for handle in [api_log, *s.handles]:
            handle.close()
