"""`privclust serve` on embedded defaults, driven by the README's walk-through verbatim."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ROOT, free_port

pytestmark = [pytest.mark.e2e]


def walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Walk-through", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def summaries_example() -> str:
    """The README's follow-on example (sweeps, summaries, labels), run after the walk-through."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Sizes, quality, choosing k", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def run_walkthrough(
    tmp_path: Path, env: dict[str, str], base: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    """The README's block under `bash -euo pipefail`, from an empty working directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", walkthrough() + "\n" + summaries_example()],
        env={**env, "PRIVCLUST": base, **extra},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_serve_runs_the_readme_walkthrough_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVCLUST_")}
    env.update(
        PRIVCLUST_DATA_DIR=str(data_dir),
        PRIVCLUST_PORT=str(port),
        PRIVCLUST_WORKER_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    serve = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        while True:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            out = (tmp_path / "serve.log").read_text()
            if "Press Ctrl-C to stop" in out:
                break
            assert time.monotonic() - started < 60, out
            time.sleep(0.2)
        assert f"{base}/docs" in out and "admin token:" in out
        assert httpx.get(base + "/healthz").status_code == 200
        assert httpx.get(base + "/docs").status_code == 200
        assert httpx.get(base + "/readyz").status_code == 200

        # A second serve on the same data dir refuses clearly.
        second = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1 and "already running" in second.stderr

        # Twice on one service: nothing in the block collides with its earlier run.
        for _ in range(2):
            result = run_walkthrough(tmp_path, env, base)
            assert result.returncode == 0, result.stderr + (tmp_path / "serve.log").read_text()
            assert "'centers'" in result.stdout and "'mu_remaining'" in result.stdout
            assert "'kind': 'count'" in result.stdout and "'kind': 'commit'" in result.stdout
            # The analyst's view of the dataset: a released count, and no exact one.
            assert re.search(
                r"\{'n_rows_dp': \d+, 'n_rows': None, 'relation': 'add-remove'", result.stdout
            )
            # The follow-on example: a sweep's losses, a suggested k, sizes, owner-only labels.
            assert "'loss_se'" in result.stdout and "\nlabel\n" in result.stdout
            assert re.search(r"^suggested k: [234]$", result.stdout, flags=re.M)
            assert result.stdout.rstrip().endswith("404")
            assert "Traceback" not in result.stderr

        # A job that cannot finish (the only worker is stopped): the poll gives up with a message.
        (worker,) = [p for p in descendants(serve.pid) if "app.cli worker" in cmdline(p)]
        os.kill(worker, signal.SIGSTOP)
        try:
            stuck = run_walkthrough(tmp_path, env, base, POLL_SECONDS="3")
        finally:
            os.kill(worker, signal.SIGCONT)
        assert stuck.returncode != 0
        assert re.search(
            r"job \S+ is not done after 3 s \(queued\): is a worker running\?", stuck.stderr
        )
        assert "Traceback" not in stuck.stderr

        # The example file went to a temporary directory, not the working directory.
        assert sorted(p.name for p in (tmp_path / "cwd").iterdir()) == []

        children = descendants(serve.pid)
        assert len(children) >= 3  # redis-server, API, worker
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
            raise
        log.close()
    assert serve.returncode == 0, (tmp_path / "serve.log").read_text()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in children if alive(p)], "orphans left after Ctrl-C"

    # With the service stopped: a readable message, not a traceback, and a failing exit code.
    down = run_walkthrough(tmp_path, env, base)
    assert down.returncode != 0
    assert f"privclust at {base}: no answer; is it running (make run)?" in down.stderr
    assert "Traceback" not in down.stderr, down.stderr
