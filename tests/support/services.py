"""The service as real processes on the test's database and Redis (from the environment the
`settings` fixture exports): `privclust api` alone, or the API with RQ workers."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.api import bearer_client, new_keys
from tests.support.db import make_key
from tests.support.processes import answers, free_port, log_tail, start_cli, stop, wait_until


@dataclass
class ApiProcess:
    base_url: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes]


@contextlib.contextmanager
def running_api(log_dir: Path, **env_extra: str) -> Iterator[ApiProcess]:
    """`privclust api` (uvicorn) on a free port with `env_extra` added to this process's
    environment, its log in `log_dir/api.log`; stopped at exit."""
    port = free_port()
    env = {**os.environ, "PRIVCLUST_PORT": str(port), "PRIVCLUST_HOST": "127.0.0.1", **env_extra}
    log_path = log_dir / "api.log"
    proc = start_cli("api", env, log_path)
    api = ApiProcess(f"http://127.0.0.1:{port}", env, proc)
    try:
        wait_until(
            answers(api.base_url + "/healthz"),
            proc=proc,
            log=log_tail(log_path),
            what="API did not start",
        )
        yield api
    finally:
        stop(proc, timeout=15)


@dataclass
class Stack:
    """A running API and the workers started beside it; each process logs into `log_dir`."""

    base_url: str
    env: dict[str, str]
    log_dir: Path
    api: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    admin_key: str = ""

    def start_worker(self) -> subprocess.Popen[bytes]:
        log_path = self.log_dir / f"worker{len(self.workers)}.log"
        proc = start_cli("worker", self.env, log_path)
        self.workers.append(proc)
        return proc

    def client(self, key: str) -> httpx.Client:
        return bearer_client(self.base_url, key)

    def new_keys(self) -> tuple[str, str]:
        """An owner's and an analyst's secret for tenant acme, made by the admin via the API."""
        with self.client(self.admin_key) as admin:
            return new_keys(admin)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.log_dir.glob("*.log"))
        )


@contextlib.contextmanager
def running_stack(
    log_dir: Path, database_url: str, *, workers: int = 1, **env_extra: str
) -> Iterator[Stack]:
    """`running_api` (with `env_extra`) and `workers` RQ workers beside it, with an admin key
    made in `database_url`; every worker the test started is stopped at exit too."""
    with running_api(log_dir, **env_extra) as api:
        stack = Stack(
            base_url=api.base_url,
            env=api.env,
            log_dir=log_dir,
            api=api.proc,
            admin_key=make_key(database_url, "admin", "admin"),
        )
        try:
            for _ in range(workers):
                stack.start_worker()
            yield stack
        finally:
            for worker in stack.workers:
                stop(worker)
