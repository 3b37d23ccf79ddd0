"""The steps of `make compose-test`, run against docker-compose.yml by scripts/compose-test.sh.

Standard library only (the host's python3): the script has built the stand-in images and started
a Docker engine; this drives `docker compose` and the API the way a self-hoster would, and fails
with a message naming the step and what was wrong.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "privclust-compose-test"
OVERRIDE = "scripts/compose-test/compose.standins.yml"
COMPOSE = ["docker", "compose", "-p", PROJECT, "-f", "docker-compose.yml", "-f", OVERRIDE]
SERVICES = ("postgres", "redis", "api", "worker")
TERMINAL = ("succeeded", "failed", "cancelled")


class StepFailed(Exception):
    pass


def check(condition: object, message: str) -> None:
    if not condition:
        raise StepFailed(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Stack:
    """`docker compose` on the real file plus the stand-in override, and the API it publishes."""

    def __init__(self) -> None:
        self.admin_token = "pck_" + secrets.token_urlsafe(32)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            # Read by docker-compose.yml: the admin key's secret and where the API is published.
            # POSTGRES_PASSWORD stays unset, so the default-password warning must show.
            "PRIVCLUST_ADMIN_TOKEN": self.admin_token,
            "PUBLISH_PORT": f"127.0.0.1:{self.port}",
        }

    def compose(self, *args: str, check_rc: bool = True, timeout: float = 600) -> str:
        done = subprocess.run(
            [*COMPOSE, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check_rc and done.returncode != 0:
            raise StepFailed(
                f"docker compose {' '.join(args)} exited {done.returncode}:\n"
                + done.stdout[-3000:]
                + done.stderr[-3000:]
            )
        return done.stdout + done.stderr

    def containers(self, service: str | None = None, all_: bool = False) -> list[dict[str, Any]]:
        args = [
            "ps",
            "--format",
            "json",
            *(["-a"] if all_ else []),
            *([service] if service else []),
        ]
        out = self.compose(*args).strip()
        rows = json.loads(out) if out.startswith("[") else [json.loads(x) for x in out.splitlines()]
        return [r for r in rows if isinstance(r, dict)]

    def call(
        self, method: str, path: str, key: str | None = None, body: Any = None, ok: bool = True
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        check(not ok or status < 400, f"{method} {path} answered {status}: {raw[:500]!r}")
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def exec_key(self, tenant: str, role: str) -> str:
        """An API key made as docs/self-hosting.md says: `docker compose exec api privclust ...`."""
        out = self.compose(
            "exec", "-T", "api", "privclust", "keys", "create", "--tenant", tenant, "--role", role
        )
        key = out.strip().splitlines()[-1]
        check(key.startswith("pck_"), f"keys create printed no key: {out[-500:]}")
        return key

    def upload(self, key: str, csv: Path, name: str, epsilon: float) -> str:
        out = subprocess.run(
            [
                *("curl", "-sS", "--fail-with-body", "-X", "POST", f"{self.base}/v1/datasets"),
                *("-H", f"Authorization: Bearer {key}", "-F", f"file=@{csv}", "-F", f"name={name}"),
                *("-F", f"epsilon={epsilon}", "-F", "delta=1e-6", "-F", "radius=12"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        check(out.returncode == 0, f"upload failed: {out.stdout[-500:]} {out.stderr[-500:]}")
        return str(json.loads(out.stdout)["id"])

    def wait_terminal(self, key: str, job_ids: list[str], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            jobs = {j: self.call("GET", f"/v1/jobs/{j}", key)[1] for j in job_ids}
            if all(job["status"] in TERMINAL for job in jobs.values()):
                return jobs
            states = sorted(job["status"] for job in jobs.values())
            check(time.monotonic() < deadline, f"jobs not done after {timeout:.0f} s: {states}")
            time.sleep(1)

    def ledger(self, key: str, dataset: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/v1/datasets/{dataset}/ledger?limit=500", key)[1]["entries"])


# ----------------------------------------------------------------------------------------------
# The steps


def step_up(stack: Stack) -> None:
    """`docker compose up --wait`: every service healthy, the worker included."""
    stack.compose("up", "-d", "--wait", "--wait-timeout", "300")
    rows = {r["Service"]: r for r in stack.containers(all_=True)}
    for service in SERVICES:
        row = rows.get(service)
        check(row, f"{service} has no container")
        check(
            row and row["State"] == "running" and row["Health"] == "healthy",
            f"{service} is {row and row['State']}/{row and row['Health']}",
        )
    migrate = rows.get("migrate")
    check(migrate and migrate["State"] == "exited", f"migrate did not run to its end: {migrate}")
    check(migrate and migrate["ExitCode"] == 0, f"migrate exited {migrate and migrate['ExitCode']}")
    print("   healthy:", ", ".join(f"{s} ({rows[s]['Image']})" for s in SERVICES))

    # The admin key reaches migrate as a secret file, and no container as a plain variable.
    for row in stack.containers(all_=True):
        env = subprocess.run(
            ["docker", "inspect", "-f", "{{json .Config.Env}}", row["ID"]],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        check(stack.admin_token not in env, f"the admin key is in {row['Name']}'s environment")
        if row["Service"] == "migrate":
            check("PRIVCLUST_ADMIN_TOKEN_FILE=/run/secrets/" in env, "migrate has no token file")
    status, _ = stack.call("GET", "/metrics", stack.admin_token)
    check(status == 200, "the admin key from the secret is not accepted")
    print("   the admin key: a secret file in migrate, accepted, in no container's environment")

    logs = stack.compose("logs", "--no-color", "migrate", "api")
    marker = "WARNING: the database password is the default"
    warned = {line.split("|")[0].strip() for line in logs.splitlines() if marker in line}
    for service in ("migrate", "api"):
        check(any(w.startswith(service) for w in warned), f"no default-password warning: {service}")
    print("   default database password: warned in", ", ".join(sorted(warned)))

    # The worker's probe: passes where a worker runs, fails where none does.
    for service, expected in (("worker", 0), ("api", 1)):
        probe = subprocess.run(
            [*COMPOSE, "exec", "-T", service, "privclust", "worker", "--check"],
            cwd=ROOT,
            env=stack.env,
            capture_output=True,
            text=True,
        )
        check(probe.returncode == expected, f"worker probe in {service}: {probe.returncode}")
    print("   worker probe: 0 in worker, 1 in api (no worker there)")


def walkthrough() -> str:
    """The ```bash block under "## Walk-through" in README.md (as tests/e2e/test_readme.py)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Walk-through", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    check(len(blocks) == 1, "README's walk-through has not exactly one bash block")
    return blocks[0]


def step_walkthrough(stack: Stack, work: Path) -> dict[str, Any]:
    """README's walk-through, verbatim, with an admin key made by `docker compose exec`."""
    (work / "admin-token").write_text(stack.exec_key("admin", "admin") + "\n")
    cwd = work / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVCLUST")}
    env.update(PRIVCLUST=stack.base, PRIVCLUST_DATA_DIR=str(work))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", walkthrough()],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    check(done.returncode == 0, f"the walk-through failed:\n{done.stdout[-2000:]}{done.stderr}")
    out = done.stdout
    for needle in ("'centers'", "'mu_remaining'", "'kind': 'count'", "'kind': 'commit'"):
        check(needle in out, f"the walk-through printed no {needle}:\n{out[-2000:]}")
    check(re.search(r"'n_rows': None", out), "the analyst saw the exact row count")
    print("   ran to its end: centres, budget and ledger printed")
    return {"acme": stack.exec_key("acme", "owner")}


def blobs_csv(path: Path, rows: int, dims: int) -> None:
    """Eight well-separated blobs in `dims` columns (stdlib random, fixed seed)."""
    import random

    rng = random.Random(11)
    centers = [[rng.uniform(-6, 6) for _ in range(dims)] for _ in range(8)]
    with path.open("w") as fh:
        fh.write(",".join(f"x{i}" for i in range(dims)) + "\n")
        for i in range(rows):
            c = centers[i % 8]
            fh.write(",".join(f"{rng.gauss(v, 0.7):.3f}" for v in c) + "\n")


def worker_running(job_id: str, stack: Stack) -> str | None:
    """The id of the worker container whose log shows it took `job_id`."""
    for row in stack.containers("worker"):
        log = subprocess.run(
            ["docker", "logs", row["ID"]], capture_output=True, text=True, check=False
        )
        if job_id in log.stdout + log.stderr:
            return str(row["ID"])
    return None


def step_scale_and_kill(stack: Stack, work: Path, keys: dict[str, str]) -> None:
    """Three workers, six jobs at once; one worker killed mid-job: that job ends failed and
    charged and is never re-run; the other five succeed."""
    stack.compose("up", "-d", "--wait", "--wait-timeout", "300", "--scale", "worker=3")
    workers = stack.containers("worker")
    check(len(workers) == 3 and all(w["Health"] == "healthy" for w in workers), "not 3 healthy")
    owner, analyst = stack.exec_key("load", "owner"), stack.exec_key("load", "analyst")
    keys["load"] = owner
    csv = work / "load.csv"
    blobs_csv(csv, 200_000, 8)
    dataset = stack.upload(owner, csv, "load", epsilon=20)
    body = {"algorithm": "pe-means", "k": 8, "epsilon": 1}

    job_ids: list[str] = []
    lock = threading.Lock()

    def submit() -> None:
        _, job = stack.call("POST", f"/v1/datasets/{dataset}/jobs", analyst, body)
        with lock:
            job_ids.append(str(job["id"]))

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(len(job_ids) == 6, f"only {len(job_ids)} of six jobs were admitted")

    victim, container = None, None
    deadline = time.monotonic() + 120
    while victim is None:
        check(time.monotonic() < deadline, "no job was seen running with progress")
        for j in job_ids:
            job = stack.call("GET", f"/v1/jobs/{j}", analyst)[1]
            if job["status"] == "running" and job.get("progress"):
                container = worker_running(j, stack)
                if container:
                    victim = j
                    break
        time.sleep(0.3)
    assert container is not None
    subprocess.run(["docker", "kill", container], check=True, capture_output=True)
    killed_at = time.monotonic()
    print(f"   killed worker container {container[:12]} while it ran job {victim}")

    jobs = stack.wait_terminal(analyst, job_ids, timeout=240)
    failed_after = time.monotonic() - killed_at
    statuses = {j: jobs[j]["status"] for j in job_ids}
    check(statuses[victim] == "failed", f"the killed job ended {statuses[victim]}")
    check("worker" in (jobs[victim].get("error") or ""), f"error: {jobs[victim].get('error')}")
    others = [s for j, s in statuses.items() if j != victim]
    check(others == ["succeeded"] * 5, f"the other five ended {others}")

    entries = [e for e in stack.ledger(analyst, dataset) if e["job_id"] == victim]
    kinds = [e["kind"] for e in entries]
    check(kinds.count("commit") == 1, f"the killed job's ledger: {kinds}")
    check("refund" not in kinds and "failed" in kinds, f"the killed job's ledger: {kinds}")
    check("succeeded" not in kinds, f"the killed job ran again: {kinds}")
    # Never re-run: its status and start time stay put, and no worker took it a second time.
    started = jobs[victim]["started_at"]
    time.sleep(5)
    again = stack.call("GET", f"/v1/jobs/{victim}", analyst)[1]
    check(again["status"] == "failed" and again["started_at"] == started, f"it moved: {again}")
    taken = sum(
        subprocess.run(["docker", "logs", w["ID"]], capture_output=True, text=True).stdout.count(
            f"run_clustering_job('{victim}')"
        )
        for w in stack.containers("worker", all_=True)
    )
    check(taken <= 1, f"workers took the killed job {taken} times")
    charged = next(e for e in entries if e["kind"] == "commit")
    state = subprocess.run(
        [
            "docker",
            "inspect",
            "-f",
            "{{.State.Status}}, restarted {{.RestartCount}} times",
            container,
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"   the killed container afterwards: {state}")
    print(
        f"   the killed job: failed {failed_after:.0f} s after the kill, charged "
        f"(commit mu={charged['mu']:.4f}, no refund), never re-run; the other five succeeded"
    )


def snapshot(stack: Stack, keys: dict[str, str]) -> dict[str, Any]:
    """Every tenant's datasets, their ledgers and their jobs' results, as its owner sees them."""
    out: dict[str, Any] = {}
    for owner in keys.values():
        for d in stack.call("GET", "/v1/datasets?limit=100", owner)[1]["items"]:
            path = f"/v1/jobs?dataset_id={d['id']}&limit=100"
            jobs = stack.call("GET", path, owner)[1]["items"]
            out[d["id"]] = {
                "name": d["name"],
                "ledger": [(e["id"], e["kind"], e["mu"]) for e in stack.ledger(owner, d["id"])],
                "jobs": {j["id"]: (j["status"], j.get("result")) for j in jobs},
            }
    return out


def step_down_up(stack: Stack, keys: dict[str, str]) -> None:
    """`docker compose down`, then `up`: datasets, ledger and results survive on the volumes."""
    before = snapshot(stack, keys)
    check(len(before) >= 2, f"expected the walk-through's and the load test's datasets: {before}")
    stack.compose("down")
    check(not stack.containers(all_=True), "containers left after down")
    stack.compose("up", "-d", "--wait", "--wait-timeout", "300")
    after = snapshot(stack, keys)
    check(after == before, "datasets, ledgers or results differ after down and up")
    # The rows themselves are on the data volume: a new job on the walk-through's dataset (the
    # one that is not the load test's) runs.
    walked = next(d for d, v in after.items() if v["name"] != "load")
    analyst = stack.exec_key("acme", "analyst")
    _, job = stack.call("POST", f"/v1/datasets/{walked}/jobs", analyst, {"k": 3, "epsilon": 0.5})
    done = stack.wait_terminal(analyst, [job["id"]], timeout=120)
    check(done[job["id"]]["status"] == "succeeded", f"a job after up: {done[job['id']]}")
    n_jobs = sum(len(v["jobs"]) for v in after.values())
    print(
        f"   {len(after)} datasets, their ledgers and {n_jobs} jobs' results unchanged; "
        "a new job on the kept rows succeeded"
    )


def step_metrics(stack: Stack, keys: dict[str, str]) -> None:
    """`--profile metrics`: Prometheus scrapes the API's /metrics with the admin key."""
    check(port_is_free(9090), "port 9090 on 127.0.0.1 is taken: the metrics profile needs it")
    stack.compose("--profile", "metrics", "up", "-d", "--wait", "--wait-timeout", "300")
    deadline = time.monotonic() + 90
    while True:
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=10) as r:
            targets = json.loads(r.read())["data"]["activeTargets"]
        health = [(t["scrapeUrl"], t["health"], t.get("lastError")) for t in targets]
        if health and all(h == "up" for _, h, _ in health):
            break
        check(time.monotonic() < deadline, f"Prometheus's targets: {health}")
        time.sleep(2)
    # A figure from the scrape matches the API: the datasets stored.
    query = 'http://127.0.0.1:9090/api/v1/query?query=privclust_datasets{state="stored"}'
    with urllib.request.urlopen(query.replace('"', "%22"), timeout=10) as r:
        result = json.loads(r.read())["data"]["result"]
    stored = len(snapshot(stack, keys))
    check(result and float(result[0]["value"][1]) == stored, f"scraped: {result}, API: {stored}")
    print(f"   target {health[0][0]} up; scraped privclust_datasets{{state=stored}} = {stored}")


def step_s3_dask(stack: Stack, work: Path) -> None:
    """The s3 and dask profiles with a .env written as .env.example says: the bucket made, an
    upload stored in it and not in the data volume, a job whose passes ran on two Dask
    workers. (The S3 server is moto's stand-in for MinIO, a fake S3: see standins/.)"""
    env_file = ROOT / ".env"
    check(not env_file.exists(), ".env exists: this step writes its own")
    check(port_is_free(9000) and port_is_free(9001), "port 9000 or 9001 on 127.0.0.1 is taken")
    secret = secrets.token_urlsafe(24)
    settings = {
        "PRIVCLUST_ADMIN_TOKEN": stack.admin_token,
        "MINIO_ROOT_USER": "privclust",
        "MINIO_ROOT_PASSWORD": secret,
        "PRIVCLUST_STORAGE_URL": "s3://privclust/datasets",
        "AWS_ENDPOINT_URL": "http://minio:9000",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "privclust",
        "AWS_SECRET_ACCESS_KEY": secret,
        "PRIVCLUST_DASK_SCHEDULER": "tcp://dask-scheduler:8786",
        "MEMORY_PER_DASK_WORKER": "1GiB",
    }
    lines = ["# written by make compose-test (scripts/compose-test/scenario.py), removed after"]
    env_file.write_text("\n".join(lines + [f"{k}={v}" for k, v in settings.items()]) + "\n")
    try:
        profiles = ("--profile", "s3", "--profile", "dask")
        stack.compose(
            *profiles, "up", "-d", "--wait", "--wait-timeout", "300", "--scale", "dask-worker=2"
        )
        rows = stack.containers(all_=True)
        healthy = sorted(r["Service"] for r in rows if r["Health"] == "healthy")
        for service in ("minio", "dask-scheduler", "api", "worker"):
            check(service in healthy, f"{service} is not healthy: {healthy}")
        check(healthy.count("dask-worker") == 2, f"not 2 healthy dask workers: {healthy}")
        bucket = [r for r in rows if r["Service"] == "minio-bucket"]
        check(
            bucket and bucket[0]["ExitCode"] == 0, f"minio-bucket did not make the bucket: {bucket}"
        )

        owner, analyst = stack.exec_key("lake", "owner"), stack.exec_key("lake", "analyst")
        csv = work / "lake.csv"
        blobs_csv(csv, 20_000, 4)
        dataset = stack.upload(owner, csv, "lake", epsilon=5)
        listing = stack.compose(
            "exec",
            "-T",
            "api",
            "python",
            "-c",
            "import s3fs; print(*s3fs.S3FileSystem().find('privclust/datasets'))",
        )
        key = dataset.replace("-", "")  # the storage names a dataset by its id's hex digits
        check(f"{key}/part-" in listing, f"the dataset's rows are not in the bucket: {listing}")
        local = stack.compose("exec", "-T", "api", "sh", "-c", "find /data -path '*datasets*'")
        check(key not in local, f"a copy of the rows is on the API's disk: {local[-500:]}")
        print(f"   dataset {dataset} stored in s3://privclust/datasets, none of it under /data")

        body = {"algorithm": "pe-means", "k": 8, "epsilon": 1}
        _, job = stack.call("POST", f"/v1/datasets/{dataset}/jobs", analyst, body)
        done = stack.wait_terminal(analyst, [str(job["id"])], timeout=300)[str(job["id"])]
        check(done["status"] == "succeeded", f"the job ended {done['status']}: {done}")
        check(len(done["result"]["centers"]) == 8, f"no 8 centres: {done['result']}")
        ran = stack.compose(
            "exec",
            "-T",
            "dask-scheduler",
            "python",
            "-c",
            "from dask.distributed import Client\n"
            "c = Client('tcp://127.0.0.1:8786', timeout=10)\n"
            "names = c.run_on_scheduler(lambda dask_scheduler: [*dask_scheduler.task_prefixes])\n"
            "print(*sorted(names))",
        )
        # Dask names a task prefix after its function, leading underscores dropped.
        check("partition_total" in ran.split(), f"no pass ran on the Dask cluster: {ran[-500:]}")
        print(f"   job {done['id']} succeeded; its passes ran on the Dask cluster ({ran.strip()})")
    finally:
        env_file.unlink(missing_ok=True)


def step_down(stack: Stack) -> None:
    """`docker compose down` stops everything promptly and leaves no container."""
    started = time.monotonic()
    stack.compose(
        *("--profile", "metrics", "--profile", "s3", "--profile", "dask"),
        *("down", "--volumes", "--remove-orphans"),
    )
    took = time.monotonic() - started
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    check(not left, f"containers left after down: {left}")
    # Every container stops on SIGTERM (init: true): nothing waits out the 10 s timeout.
    check(took < 20, f"down took {took:.0f} s")
    print(f"   down in {took:.1f} s; no container left; the test's volumes removed")


def run(name: str, step: Callable[[], Any]) -> Any:
    print(f"== {name}", flush=True)
    started = time.monotonic()
    result = step()
    print(f"   ok ({time.monotonic() - started:.0f} s)", flush=True)
    return result


def main() -> int:
    check((ROOT / "docker-compose.yml").exists(), "run from a privclust checkout")
    if (ROOT / ".env").exists():
        print("!! .env exists: the test runs docker-compose.yml's defaults; move it aside")
        return 2
    stack = Stack()
    with tempfile.TemporaryDirectory(prefix="privclust-compose-test-") as tmp:
        work = Path(tmp)
        try:
            run("1. docker compose up --wait: every service healthy", lambda: step_up(stack))
            keys = run("2. README walk-through", lambda: step_walkthrough(stack, work))
            run(
                "3. --scale worker=3, six jobs, one worker killed",
                lambda: step_scale_and_kill(stack, work, keys),
            )
            run("4. down, then up: the volumes keep everything", lambda: step_down_up(stack, keys))
            run(
                "5. --profile metrics: Prometheus scrapes /metrics",
                lambda: step_metrics(stack, keys),
            )
            run(
                "6. --profile s3 --profile dask: rows in the bucket, passes on Dask",
                lambda: step_s3_dask(stack, work),
            )
            run("7. down: no container left", lambda: step_down(stack))
        except StepFailed as exc:
            print(f"!! {exc}", file=sys.stderr)
            profiles = ("--profile", "metrics", "--profile", "s3", "--profile", "dask")
            ps = stack.compose(*profiles, "ps", "-a", check_rc=False)
            print(ps, file=sys.stderr)
            logs = stack.compose("logs", "--no-color", "--tail", "60", check_rc=False)
            print(logs[-12000:], file=sys.stderr)
            return 1
    print("compose-test: 7 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
