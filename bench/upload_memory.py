"""Benchmark: peak memory of the API while a large CSV is uploaded over HTTP.

Starts a real `privclust api` process on a temporary data dir (SQLite), generates a
1,000,000 x 32 CSV (about 300 MB, deleted afterwards), streams it to POST /v1/datasets and reads
the peak resident memory (VmHWM) of the API's processes (`privclust api` and the uvicorn worker
processes it starts, which do the ingest) before and after: the largest of them. Prints a table;
never asserts.

    .venv/bin/python bench/upload_memory.py [--rows 1000000] [--cols 32]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest_memory import generate  # noqa: E402

from tests.support.memory import peak_rss_mib  # noqa: E402
from tests.support.processes import descendants  # noqa: E402


def api_peak_mib(pid: int) -> float:
    """The largest VmHWM of the API process and its descendants (the uvicorn workers)."""
    peaks = [peak_rss_mib(p) for p in (pid, *descendants(pid))]
    return max((p for p in peaks if p == p), default=float("nan"))  # NaN: a process that ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        csv_path = tmpdir / "big.csv"
        generate(csv_path, "csv", args.rows, args.cols, seed=0)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {
            **os.environ,
            "PRIVCLUST_DATA_DIR": str(tmpdir / "var"),
            "PRIVCLUST_PORT": str(port),
            "PRIVCLUST_REDIS_URL": "redis://127.0.0.1:1/0",
        }
        env.pop("PRIVCLUST_DATABASE_URL", None)
        subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate"],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        token = (tmpdir / "var" / "admin-token").read_text().strip()
        api = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "api"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    httpx.get(base + "/healthz", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            admin = {"Authorization": f"Bearer {token}"}
            owner = httpx.post(
                base + "/v1/api-keys", headers=admin, json={"tenant": "bench", "role": "owner"}
            ).json()["key"]
            idle = api_peak_mib(api.pid)
            started = time.perf_counter()
            with csv_path.open("rb") as fh:
                r = httpx.post(
                    base + "/v1/datasets",
                    timeout=600,
                    headers={"Authorization": f"Bearer {owner}"},
                    data={"name": "big", "epsilon": "1", "delta": "1e-7", "radius": "1000"},
                    files={"file": ("big.csv", fh, "text/csv")},
                )
            seconds = time.perf_counter() - started
            peak = api_peak_mib(api.pid)
        finally:
            api.terminate()
            api.wait()
        size = csv_path.stat().st_size / 2**20
        print("| rows x cols | CSV size | status | upload time | API peak RSS | API RSS idle |")
        print("|---|---|---|---|---|---|")
        print(
            f"| {args.rows:,} x {args.cols} | {size:.0f} MiB | {r.status_code} | "
            f"{seconds:.1f} s | {peak:.0f} MiB | {idle:.0f} MiB |"
        )


if __name__ == "__main__":
    main()
