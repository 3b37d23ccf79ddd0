"""Benchmark: CSV ingest speed, on a local file and through a real HTTP upload.

Generates a numeric CSV (default 1,000,000 x 16 full-precision floats, about 300 MB) in a
temporary directory (deleted afterwards), then measures:

- `ingest_file` on the local file, in a fresh subprocess (its own peak RSS);
- `POST /v1/datasets` with `curl -F file=@...` to a running `privclust serve` (SQLite and the
  embedded Redis on a temporary data dir, a free port), once with the form fields before the
  file part and once after it (the README's walk-through sends the file first). The time is
  curl's, from the first byte sent to the 201's last byte received: end to end.

Before the measured uploads a small one loads the ingest (pyarrow), which the first upload of
a fresh API process imports. MB/s is 10^6 bytes of CSV a second. The API's peak RSS is the
largest VmHWM among the API's processes (`privclust api` and its uvicorn workers), reset before
each upload (clear_refs), so each row shows that upload's own peak. "API CPU s" is the CPU time
the API's processes used during the upload: on a shared machine it moves less than the wall
clock does. Prints a table; never asserts on timings.

    .venv/bin/python bench/ingest_speed.py [--rows 1000000] [--cols 16] [--repeats 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

# The service is started with the tests' own helpers (tests/support), as bench/load.py does.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.api import bearer_client, new_keys  # noqa: E402
from tests.support.memory import peak_rss_mib  # noqa: E402
from tests.support.processes import cmdline, descendants, serving  # noqa: E402

_CHUNK_ROWS = 50_000
_FORM = {"name": "bench", "epsilon": "1", "delta": "1e-7", "radius": "1e6"}


def generate(path: Path, n_rows: int, n_cols: int, seed: int) -> None:
    """Full-precision normal floats (about 19 characters a value), written block by block."""
    rng = np.random.default_rng(seed)
    schema = pa.schema([(f"feature_{j}", pa.float64()) for j in range(n_cols)])
    options = pa_csv.WriteOptions(quoting_style="none")
    with pa_csv.CSVWriter(str(path), schema, write_options=options) as writer:
        for start in range(0, n_rows, _CHUNK_ROWS):
            block = rng.normal(0.0, 100.0, size=(min(_CHUNK_ROWS, n_rows - start), n_cols))
            writer.write_table(pa.Table.from_arrays(list(block.T), schema=schema))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (from /proc/PID/stat)."""
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


# --- (a) ingest_file on the local file -------------------------------------------------------


def local_child(src: Path, dest: Path) -> None:
    """Ingest `src` as the service would, in this (fresh) process; report JSON on stdout."""
    from app.datasets.ingest import ingest_file

    started = time.perf_counter()
    with src.open("rb") as fh:
        result = ingest_file(fh, filename=src.name, content_type="text/csv", dest_dir=dest)
    seconds = time.perf_counter() - started
    peak = peak_rss_mib(os.getpid())
    print(json.dumps({"seconds": seconds, "peak_mib": peak, "rows": result.n_rows}))


def measure_local(src: Path, tmp: Path) -> dict[str, float]:
    dest = tmp / "local-out"
    done = subprocess.run(
        [sys.executable, __file__, "--local-child", str(src), str(dest)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    for stored in dest.glob("*.npy"):
        stored.unlink()
    report: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


# --- (b) the upload through `privclust serve` ------------------------------------------------


@dataclass
class Service:
    base: str
    proc: subprocess.Popen[bytes]
    owner: str

    def api_pids(self) -> list[int]:
        """`privclust api` and its uvicorn worker processes."""
        tree = descendants(self.proc.pid)
        api = [p for p in tree if "app.cli api" in cmdline(p)]
        return sorted({p for a in api for p in (a, *descendants(a))})


@contextlib.contextmanager
def serve(data_dir: Path, env_extra: dict[str, str]) -> Iterator[Service]:
    log_path = data_dir.parent / "serve.log"
    settings = {"PRIVCLUST_ACCESS_LOG": "false", "PYTHONUNBUFFERED": "1", **env_extra}
    with serving(data_dir, log_path, **settings) as served:
        with bearer_client(served.base, served.admin) as client:
            owner, _ = new_keys(client, tenant="bench")
        yield Service(served.base, served.proc, owner)


def curl_upload(svc: Service, src: Path, file_first: bool) -> tuple[int, float, dict]:
    """(status, seconds, body) of one `curl -F` upload."""
    fields = [arg for k, v in _FORM.items() for arg in ("-F", f"{k}={v}")]
    file_part = ["-F", f"file=@{src};type=text/csv"]
    argv = [
        "curl",
        "-sS",
        "-o",
        "-",
        "-w",
        "\n%{http_code} %{time_total}",
        "-H",
        f"Authorization: Bearer {svc.owner}",
        *(file_part + fields if file_first else fields + file_part),
        svc.base + "/v1/datasets",
    ]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    body, _, tail = done.stdout.rpartition("\n")
    status, seconds = tail.split()
    return int(status), float(seconds), json.loads(body) if body.startswith("{") else {}


def measure_upload(svc: Service, src: Path, file_first: bool) -> dict[str, float]:
    pids = svc.api_pids()
    for pid in pids:  # VmHWM from here on (Linux: "5" resets the peak RSS)
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")
    cpu_before = sum(cpu_seconds(p) for p in pids)
    status, seconds, body = curl_upload(svc, src, file_first)
    cpu = sum(cpu_seconds(p) for p in pids) - cpu_before
    peak = max(peak_rss_mib(p) for p in pids)
    if status == 201:  # keep the data dir small: the stored rows are not needed
        httpx.delete(
            f"{svc.base}/v1/datasets/{body['id']}",
            headers={"Authorization": f"Bearer {svc.owner}"},
            timeout=60,
        )
    return {
        "status": status,
        "seconds": seconds,
        "peak_mib": peak,
        "cpu": cpu,
        "rows": body.get("n_rows", 0),
    }


# --- the table -----------------------------------------------------------------------------


def row(what: str, size: int, result: dict[str, float]) -> str:
    mbs = size / 1e6 / result["seconds"]
    status = result.get("status", "-")
    cpu = result.get("cpu")
    cpu_text = "-" if cpu is None else f"{cpu:.1f}"
    return (
        f"| {what} | {status} | {result['rows']:,} | {result['seconds']:.2f} | {mbs:.0f} | "
        f"{cpu_text} | {result['peak_mib']:.0f} | {os.getloadavg()[0]:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1, help="uploads of each kind")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--skip-local", action="store_true", help="only the uploads")
    parser.add_argument(
        "--api-workers", default="", help="PRIVCLUST_API_WORKERS (default: the service's own)"
    )
    parser.add_argument("--local-child", nargs=2, metavar=("SRC", "DEST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.local_child:
        local_child(Path(args.local_child[0]), Path(args.local_child[1]))
        return

    with tempfile.TemporaryDirectory(prefix="privclust-ingest-speed-") as tmp_name:
        tmp = Path(tmp_name)
        src = tmp / "data.csv"
        generate(src, args.rows, args.cols, args.seed)
        size = src.stat().st_size
        print(f"{args.rows:,} x {args.cols} CSV, {size / 1e6:.0f} MB; cores: {os.cpu_count()}")
        print()
        print("| path | status | rows | seconds | MB/s | API CPU s | peak RSS MiB | load 1m |")
        print("|---|---|---|---|---|---|---|---|")
        if not args.skip_local:
            for _ in range(args.repeats):
                print(row("`ingest_file`, local file", size, measure_local(src, tmp)), flush=True)
        env = {"PRIVCLUST_API_WORKERS": args.api_workers} if args.api_workers else {}
        warm = tmp / "warm.csv"
        generate(warm, 1000, args.cols, args.seed)
        with serve(tmp / "var", env) as svc:
            measure_upload(svc, warm, file_first=False)
            for _ in range(args.repeats):
                for file_first in (False, True):
                    what = "upload, file part " + ("first" if file_first else "last")
                    print(row(what, size, measure_upload(svc, src, file_first)), flush=True)


if __name__ == "__main__":
    main()
