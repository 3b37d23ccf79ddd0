"""Static checks of the self-hosting files: Dockerfile, docker-compose.yml, .env.example, docs.

No Docker engine is needed: the files are parsed and cross-checked against the code they drive
(the `privclust` argparse parser, the Settings class) so that a renamed subcommand or setting, a
missing healthcheck or a broken COPY path fails here instead of at `docker compose up`. The
stack itself is built and run by `make compose-test` (scripts/compose-test.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from app.kit.config import COMPOSE_DEFAULT_DB_PASSWORD, Settings, default_password_warning

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERIGNORE = ROOT / ".dockerignore"
SELF_HOSTING_DOC = ROOT / "docs" / "self-hosting.md"
STANDINS_OVERRIDE = ROOT / "scripts" / "compose-test" / "compose.standins.yml"
OFFICIAL_PYTHON_IMAGE = "python:3.11-slim-bookworm"

PROJECT_SERVICES = ("migrate", "api", "worker")
# Optional services that run the privclust image too, by profile.
PROFILE_SERVICES = {"dask-scheduler": "dask", "dask-worker": "dask", "minio-bucket": "s3"}
IMAGE_SERVICES = (*PROJECT_SERVICES, *PROFILE_SERVICES)
# The profiles `make compose-test` starts (scripts/compose-test/scenario.py): none, then metrics.
COMPOSE_TEST_PROFILES = {"metrics"}
SETTINGS_ENV_NAMES = {f"PRIVCLUST_{name.upper()}" for name in Settings.model_fields}
# What s3fs and botocore read to find object storage (app/datasets/storage/location.py).
S3_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)


# ----------------------------------------------------------------------------------------------
# Helpers: a small Dockerfile parser, compose interpolation, .dockerignore matching.


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args_of(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Split a Dockerfile into stages of (KEYWORD, arguments), joining continuation lines.

    An ARG before the first FROM may name the base image; FROM is read with its default value.
    """
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by Docker too
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "Dockerfile ends inside a line continuation"

    stages: list[Stage] = []
    build_args: dict[str, str] = {}
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "ARG" and not stages:
            name, _, default = args.partition("=")
            build_args[name] = default
        elif keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            base = re.sub(r"\$\{(\w+)\}", lambda m: build_args[m.group(1)], words[0])
            stages.append(Stage(base=base, name=name))
        else:
            assert stages, f"instruction before the first FROM: {line}"
            stages[-1].instructions.append((keyword, args))
    return stages


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate(text: str, env: Mapping[str, str], used: set[str]) -> str:
    """Compose-style ${VAR:-default} / ${VAR-default} substitution, nested defaults included.

    Bare ${VAR} or $VAR is rejected: every variable must carry a default so that the stack
    starts before the user has created .env.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                assert j < len(text), f"unbalanced ${{ in {text!r}"
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            body = text[i + 2 : j - 1]
            match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?-)(.*)", body, re.S)
            assert match, f"${{{body}}} has no default value"
            name, op, default = match.groups()
            used.add(name)
            value = env.get(name)
            if value is None or (op == ":-" and value == ""):
                value = interpolate(default, env, used)
            out.append(value)
            i = j
        elif text[i] == "$" and _NAME.match(text, i + 1):
            raise AssertionError(f"${_NAME.match(text, i + 1)} has no default value")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def interpolate_tree(node: Any, env: Mapping[str, str], used: set[str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env, used)
    if isinstance(node, list):
        return [interpolate_tree(v, env, used) for v in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env, used) for k, v in node.items()}
    return node


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Whether a context path is left out of the build context (last matching pattern wins)."""

    def to_regex(pattern: str) -> re.Pattern[str]:
        pattern = pattern.strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                regex += ".*"
                i += 2
            elif pattern[i] == "*":
                regex += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                regex += "[^/]"
                i += 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex += pattern[i : end + 1]
                i = end + 1
            else:
                regex += re.escape(pattern[i])
                i += 1
        return re.compile(regex)

    parts = Path(path).parts
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for raw in patterns:
        negated = raw.startswith("!")
        regex = to_regex(raw[1:] if negated else raw)
        # A pattern matching a directory excludes everything under it.
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


def env_example_entries() -> tuple[dict[str, str], dict[str, str]]:
    """(active, commented-out) NAME=value lines of .env.example."""
    active: dict[str, str] = {}
    commented: dict[str, str] = {}
    for raw in ENV_EXAMPLE.read_text().splitlines():
        line = raw.strip()
        target = active
        if line.startswith("#"):
            line = line.lstrip("#").strip()
            target = commented
        match = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line)
        if match:
            target[match.group(1)] = match.group(2)
    return active, commented


@contextlib.contextmanager
def http_server(status: int, path: str = "/healthz") -> Iterator[int]:
    """A throwaway local HTTP server answering GET `path` with `status` (others 404)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == path else 404)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_healthcheck(argv: list[str], port: int) -> int:
    """Run a container healthcheck command here, with `python` meaning this interpreter."""
    assert argv[0] == "python", argv
    env = {**os.environ, "PRIVCLUST_PORT": str(port)}
    done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30)
    return done.returncode


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def assert_real_cli_invocation(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    assert argv[0] == "privclust", f"{argv} does not run the privclust console script"
    assert len(argv) > 1 and argv[1] in subcommands(parser), f"{argv}: unknown subcommand"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            parser.parse_args(argv[1:])
        except SystemExit as exc:  # argparse reports bad arguments by exiting
            raise AssertionError(f"{argv} is rejected by privclust: {stderr.getvalue()}") from exc


# ----------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def compose_raw() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def compose(compose_raw: dict[str, Any]) -> dict[str, Any]:
    """The compose file as `docker compose up` sees it without a .env file."""
    resolved = interpolate_tree(compose_raw, {}, set())
    assert isinstance(resolved, dict)
    return resolved


@pytest.fixture(scope="module")
def cli_parser() -> argparse.ArgumentParser:
    from app.cli import build_parser

    parser = build_parser()
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


def settings_from(env: Mapping[str, str]) -> Settings:
    """Settings built from PRIVCLUST_* names and string values, as the container would see them."""
    return Settings(**{k.removeprefix("PRIVCLUST_").lower(): v for k, v in env.items()})


def service_environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


# ----------------------------------------------------------------------------------------------
# Dockerfile


def test_dockerfile_is_multi_stage_on_a_pinned_slim_python(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    assert all(stage.name for stage in stages), "every stage is named with FROM ... AS"
    for stage in stages:
        # The official image, unless a build overrides the PYTHON_IMAGE argument (the test's
        # stand-in does).
        assert stage.base == OFFICIAL_PYTHON_IMAGE, stage.base
    final = stages[-1]
    earlier_names = {stage.name for stage in stages[:-1]}
    assert final.base not in earlier_names, "the final stage must not inherit the build stage"


def test_final_stage_has_no_build_tools(stages: list[Stage]) -> None:
    final_runs = " ".join(stages[-1].args_of("RUN"))
    for tool in ("build-essential", "gcc", "g++", "clang", "make", "cmake", "python3-dev"):
        assert not re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", final_runs), tool
    # The compilers stay in the builder, which is the stage that may need them.
    assert "build-essential" in " ".join(stages[0].args_of("RUN"))


def test_final_stage_runs_as_a_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].args_of("USER")
    assert users, "final stage never switches user"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    keywords = [kw for kw, _ in stages[-1].instructions]
    assert keywords.index("USER") < keywords.index("CMD")


def test_final_stage_environment_and_default_command(
    stages: list[Stage], cli_parser: argparse.ArgumentParser
) -> None:
    final = stages[-1]
    env: dict[str, str] = {}
    for args in final.args_of("ENV"):
        for word in shlex.split(args):
            key, _, value = word.partition("=")
            env[key] = value
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    privclust_keys = {k for k in env if k.startswith("PRIVCLUST_")}
    assert privclust_keys <= SETTINGS_ENV_NAMES, privclust_keys - SETTINGS_ENV_NAMES
    assert env["PRIVCLUST_HOST"] == "0.0.0.0"
    assert env["PRIVCLUST_DATA_DIR"] == "/data"
    assert final.args_of("EXPOSE") == [env["PRIVCLUST_PORT"]]
    assert any("/data" in run and "chown" in run for run in final.args_of("RUN")), (
        "the data directory must belong to the runtime user"
    )
    (cmd,) = final.args_of("CMD")
    assert exec_form(cmd) == ["privclust", "api"]
    assert_real_cli_invocation(cli_parser, exec_form(cmd))


def test_dockerfile_copy_sources_exist_and_are_in_the_build_context(stages: list[Stage]) -> None:
    ignore = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    stage_names = {stage.name for stage in stages}
    copied = []
    for stage in stages:
        for args in stage.args_of("COPY") + stage.args_of("ADD"):
            words = exec_form(args) if args.startswith("[") else shlex.split(args)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            from_stage = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if from_stage:
                assert from_stage[0] in stage_names
                continue
            for source in paths[:-1]:
                copied.append(source)
                assert (ROOT / source).exists(), f"COPY source {source} is not in the repository"
                assert not dockerignore_excludes(source, ignore), f".dockerignore drops {source}"
    # What the wheel build needs: the metadata and every package listed in pyproject.toml.
    assert {"pyproject.toml", "README.md"} <= {Path(s).as_posix() for s in copied}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in packages:
        top = package.rstrip("*")
        assert top in {Path(s).parts[0] for s in copied}, f"package {top} is never copied"


def test_local_secrets_and_state_stay_out_of_the_build_context() -> None:
    ignore = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    for path in (".env", ".git", ".venv", "var/privclust.db", "app/__pycache__/x.cpython-311.pyc"):
        assert dockerignore_excludes(path, ignore), path
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def test_image_healthcheck_reports_healthz_status(stages: list[Stage]) -> None:
    (healthcheck,) = stages[-1].args_of("HEALTHCHECK")
    options, _, command = healthcheck.partition("CMD")
    assert "--interval" in options
    argv = exec_form(command.strip())
    assert "/healthz" in " ".join(argv)
    with http_server(200) as port:
        assert run_healthcheck(argv, port) == 0
    with http_server(503) as port:
        assert run_healthcheck(argv, port) != 0
    with http_server(200) as port:
        pass  # the port is closed again: nothing listens there now
    assert run_healthcheck(argv, port) != 0


# ----------------------------------------------------------------------------------------------
# docker-compose.yml


def test_compose_declares_the_five_services(compose: dict[str, Any]) -> None:
    # Plain `docker compose up` starts these five; everything else waits for its profile.
    default = {n for n, s in compose["services"].items() if not s.get("profiles")}
    assert default == {"postgres", "redis", "migrate", "api", "worker"}
    optional = {n: s["profiles"] for n, s in compose["services"].items() if s.get("profiles")}
    assert optional == {
        "prometheus": ["metrics"],
        "dask-scheduler": ["dask"],
        "dask-worker": ["dask"],
        "minio": ["s3"],
        "minio-bucket": ["s3"],
    }


def test_the_metrics_profile_scrapes_the_api_with_an_admin_key(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    prometheus = compose["services"]["prometheus"]
    assert re.fullmatch(r"prom/prometheus:v\d+\.\d+\.\d+", prometheus["image"])  # pinned
    (config,) = prometheus["configs"]
    assert config["target"] == "/etc/prometheus/prometheus.yml"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    source = ROOT / compose["configs"][config["source"]]["file"]
    # Its UI has no authentication: loopback only.
    assert prometheus["ports"] == ["127.0.0.1:9090:9090"]
    (secret,) = prometheus["secrets"]
    assert compose["secrets"][secret] == {"environment": "PRIVCLUST_ADMIN_TOKEN"}
    assert prometheus["depends_on"] == {"api": {"condition": "service_healthy"}}

    scrape = yaml.safe_load(source.read_text())["scrape_configs"]
    (job,) = scrape
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    api_port = service_environment(compose["services"]["api"])["PRIVCLUST_PORT"]
    assert job["static_configs"] == [{"targets": [f"api:{api_port}"]}]

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    # promtool also checks that the credentials file exists: point it at a stand-in.
    token = tmp_path / "token"
    token.write_text("stand-in")
    checked = tmp_path / "prometheus.yml"
    checked.write_text(source.read_text().replace(f"/run/secrets/{secret}", str(token)))
    result = subprocess.run(
        [promtool, "check", "config", str(checked)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def dask_command(name: str, argv: list[str]) -> dict[str, Any]:
    """`argv` (`dask <name> ...`) parsed, not run, by the command that the `dask` CLI runs for
    `name`: distributed's own entry point, as installed here."""
    from importlib.metadata import entry_points

    assert argv[:2] == ["dask", name], argv
    (entry,) = [e for e in entry_points(group="dask_cli") if e.name == name]
    params: dict[str, Any] = entry.load().make_context(f"dask {name}", list(argv[2:])).params
    # Both pass words they do not know on to preload modules: a misspelt option lands there.
    assert params.get("preload_argv", ()) == (), f"{argv}: arguments dask does not know"
    return params


def dashboard_port(params: dict[str, Any]) -> int:
    return int(str(params["dashboard_address"]).rsplit(":", 1)[1])


def test_the_dask_profile_runs_a_scheduler_and_one_process_workers(
    compose: dict[str, Any], compose_raw: dict[str, Any]
) -> None:
    from importlib.metadata import entry_points

    from dask.utils import parse_bytes

    services = compose["services"]
    assert any(e.name == "dask" for e in entry_points(group="console_scripts"))
    scheduler = dask_command("scheduler", services["dask-scheduler"]["command"])
    worker = dask_command("worker", services["dask-worker"]["command"])
    assert worker["scheduler"] == f"tcp://dask-scheduler:{int(scheduler['port'])}"
    # One process with one thread per container: `--scale dask-worker=N` is the one knob.
    assert worker["n_workers"] == "1" and worker["nthreads"] == 1
    assert parse_bytes(worker["memory_limit"]) == 2 * 1024**3
    custom = interpolate_tree(compose_raw, {"MEMORY_PER_DASK_WORKER": "6GiB"}, set())
    custom_worker = dask_command("worker", custom["services"]["dask-worker"]["command"])
    assert parse_bytes(custom_worker["memory_limit"]) == 6 * 1024**3
    assert services["dask-worker"]["depends_on"] == {
        "dask-scheduler": {"condition": "service_healthy"}
    }
    for name in ("dask-scheduler", "dask-worker"):
        # Exact statistics cross the cluster's network: none of it is published on the host.
        assert "ports" not in services[name], name
        assert "container_name" not in services[name], name
        # The Dask processes read rows, never the database or the queue.
        env = service_environment(services[name])
        assert not {"PRIVCLUST_DATABASE_URL", "PRIVCLUST_REDIS_URL"} & set(env), name
    # Datasets in the data volume (the default storage) are read under the path the worker
    # recorded them at; read-only, since a task only reads.
    assert services["dask-worker"]["volumes"] == ["privclust-data:/data:ro"]
    assert "privclust-data:/data" in services["worker"]["volumes"]
    assert services["dask-scheduler"]["volumes"] == []


def probe(argv: list[str], address: str, status: int, route: str = "/health") -> int:
    """A healthcheck whose script polls `address` run against a local server answering `route`
    with `status`, in place of that address."""
    with http_server(status, route) as port:
        script = argv[-1].replace(address, f"127.0.0.1:{port}/health")
        return run_healthcheck([*argv[:-1], script], port)


def test_dask_healthchecks_probe_the_health_route_they_serve(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, kind in (("dask-scheduler", "scheduler"), ("dask-worker", "worker")):
        port = dashboard_port(dask_command(kind, services[name]["command"]))
        check = services[name]["healthcheck"]
        assert check["test"][0] == "CMD"
        argv = check["test"][1:]
        address = f"127.0.0.1:{port}/health"
        assert address in argv[-1], (name, argv)

        assert probe(argv, address, 200) == 0, name
        assert probe(argv, address, 503) != 0, name
        assert probe(argv, address, 200, "/elsewhere") != 0, name
        for key in ("interval", "timeout", "retries", "start_period"):
            assert key in check, (name, key)


def test_the_scheduler_address_reaches_the_worker_from_env(compose: dict[str, Any]) -> None:
    services = compose["services"]
    # Compose sets PRIVCLUST_DASK_SCHEDULER nowhere: unset, every pass runs in the worker's own
    # process, as before the profile existed (an empty value would not mean unset).
    for name, service in services.items():
        assert "PRIVCLUST_DASK_SCHEDULER" not in service_environment(service), name
    assert Settings.model_fields["dask_scheduler"].default is None
    # .env.example's line names the scheduler the dask-worker joins, and is a valid setting;
    # .env reaches the worker and the API (which computes an owner's labels on the cluster too).
    _, commented = env_example_entries()
    address = commented["PRIVCLUST_DASK_SCHEDULER"]
    assert address == dask_command("worker", services["dask-worker"]["command"])["scheduler"]
    assert settings_from({"PRIVCLUST_DASK_SCHEDULER": address}).dask_scheduler == address
    for name in ("worker", "api"):
        assert services[name]["env_file"] == [{"path": ".env", "required": False}], name
    # The profiles .env.example suggests exist.
    profiles = {p for service in services.values() for p in service.get("profiles", [])}
    assert set(commented["COMPOSE_PROFILES"].split(",")) <= profiles


def test_the_s3_profile_runs_a_pinned_minio_on_loopback(compose: dict[str, Any]) -> None:
    from urllib.parse import urlsplit

    from app.datasets.sources import check_source

    services = compose["services"]
    minio = services["minio"]
    assert re.fullmatch(r"minio/minio:RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ", minio["image"])
    assert minio["ports"] == ["127.0.0.1:9000:9000", "127.0.0.1:9001:9001"]
    assert minio["volumes"] == ["minio-data:/data"]
    assert minio["healthcheck"]["test"] == ["CMD", "mc", "ready", "local"]
    bucket = services["minio-bucket"]
    assert bucket["restart"] == "no" and bucket["healthcheck"] == {"disable": True}
    assert bucket["depends_on"] == {"minio": {"condition": "service_healthy"}}
    assert bucket["volumes"] == []
    # .env.example's storage lines point privclust at this MinIO, signing with its root user.
    _, commented = env_example_entries()
    endpoint = urlsplit(commented["AWS_ENDPOINT_URL"])
    assert (endpoint.scheme, endpoint.hostname, endpoint.port) == ("http", "minio", 9000)
    assert commented["AWS_ACCESS_KEY_ID"] == commented["MINIO_ROOT_USER"]
    settings = settings_from(
        {k: commented[k] for k in ("PRIVCLUST_STORAGE_URL", "PRIVCLUST_IMPORT_SOURCES")}
    )
    assert settings.resolved_storage_url == "s3://privclust/datasets"
    # Its import prefix is allowed and apart from the service's own storage.
    assert check_source(commented["PRIVCLUST_IMPORT_SOURCES"] + "/2026", settings)


def test_minio_does_not_start_without_its_login(compose: dict[str, Any], tmp_path: Path) -> None:
    # MinIO falls back to a well-known login when MINIO_ROOT_USER/PASSWORD are empty; the
    # entrypoint stops that. Run with `sh`, its last step replaced by printing its arguments.
    minio = compose["services"]["minio"]
    shell, flag, script, name = minio["entrypoint"]
    assert (shell, flag) == ("sh", "-c")
    assert 'exec /usr/bin/docker-entrypoint.sh "$@"' in script  # compose turned $$ into $
    script = script.replace("exec /usr/bin/docker-entrypoint.sh", "exec echo")

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        argv = ["sh", "-c", script, name, *minio["command"]]
        clean = {"PATH": os.environ["PATH"], **env}
        return subprocess.run(argv, env=clean, capture_output=True, text=True, timeout=30)

    refused = run(MINIO_ROOT_USER="privclust", MINIO_ROOT_PASSWORD="")
    assert refused.returncode != 0 and "MINIO_ROOT_PASSWORD" in refused.stderr
    assert run(MINIO_ROOT_USER="", MINIO_ROOT_PASSWORD="x" * 24).returncode != 0
    assert run().returncode != 0
    started = run(MINIO_ROOT_USER="privclust", MINIO_ROOT_PASSWORD="x" * 24)
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == minio["command"]


def test_minio_bucket_makes_the_storage_and_import_buckets(compose: dict[str, Any]) -> None:
    # Against moto's S3 server (a fake S3, in this process, over real HTTP): the script the
    # one-shot runs, as it runs it (`python -c`), with the AWS_* variables .env would give it.
    from tests.support.s3 import fake_s3

    argv = compose["services"]["minio-bucket"]["command"]
    assert argv[:2] == ["python", "-c"]

    def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PRIVCLUST_"))}
        return subprocess.run(
            [sys.executable, *argv[1:]],
            env={**clean, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    # moto keeps one store per process: names of this test's own.
    rows, imports = (f"{kind}-{uuid.uuid4().hex[:12]}" for kind in ("rows", "imports"))
    with fake_s3() as s3:
        settings = {
            **s3.env,
            "PRIVCLUST_STORAGE_URL": f"s3://{rows}/datasets",
            "PRIVCLUST_IMPORT_SOURCES": f"s3://{imports}/exports, /mnt/lake",
        }
        for _ in range(2):  # a bucket that exists is kept
            done = run(settings)
            assert done.returncode == 0, done.stderr
        names = {b["Name"] for b in s3.client().list_buckets()["Buckets"]}
        assert {rows, imports} <= names
        assert f"s3://{rows} is ready" in done.stdout

        local = run({**s3.env, "PRIVCLUST_STORAGE_URL": "/data/datasets"})
        assert local.returncode != 0 and "PRIVCLUST_STORAGE_URL=s3://" in local.stderr
        no_endpoint = {k: v for k, v in settings.items() if k != "AWS_ENDPOINT_URL"}
        refused = run(no_endpoint)
        assert refused.returncode != 0 and "AWS_ENDPOINT_URL" in refused.stderr


SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN")


def test_no_secret_is_committed(compose_raw: dict[str, Any]) -> None:
    # Secrets come from .env or the shell, with an empty default, or are blanked. The one
    # exception, Postgres' trial password, is warned about at every start while it is used.
    for name, service in compose_raw["services"].items():
        for key, value in service_environment(service).items():
            if not SECRET_NAME.search(key) or key.endswith("_FILE"):
                continue
            if key == "POSTGRES_PASSWORD":
                assert value == f"${{POSTGRES_PASSWORD:-{COMPOSE_DEFAULT_DB_PASSWORD}}}"
                continue
            assert value in ("", f"${{{key}:-}}"), (name, key, value)
    active, commented = env_example_entries()
    for key, value in {**commented, **active}.items():
        if SECRET_NAME.search(key) and key != "POSTGRES_PASSWORD":
            assert value == "", f".env.example gives {key} a value"


def test_project_services_run_real_privclust_subcommands(
    compose: dict[str, Any], cli_parser: argparse.ArgumentParser
) -> None:
    services = compose["services"]
    expected = {"migrate": "migrate", "api": "api", "worker": "worker"}
    project_image = services["api"]["image"]
    for name, service in services.items():
        if "build" not in service and service.get("image") != project_image:
            continue
        if name in PROFILE_SERVICES:  # Dask's CLI and a script: checked by their own tests
            continue
        command = service["command"]
        argv = command if isinstance(command, list) else shlex.split(command)
        assert_real_cli_invocation(cli_parser, argv)
        assert argv[1] == expected[name]


def test_console_script_is_the_parser_the_checks_use() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["privclust"] == "app.cli:main"


def test_backends_have_healthchecks_and_persistent_volumes(compose: dict[str, Any]) -> None:
    postgres = compose["services"]["postgres"]
    assert "pg_isready" in postgres["healthcheck"]["test"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    redis = compose["services"]["redis"]
    assert redis["healthcheck"]["test"][-2:] == ["redis-cli", "ping"]
    assert any(v.endswith(":/data") for v in redis["volumes"])
    # Without the append-only file, jobs queued but not started are lost on a redis restart.
    command = " ".join(redis["command"])
    assert re.search(r"--appendonly\s+yes", command)


def test_api_healthcheck_reports_readiness(compose: dict[str, Any]) -> None:
    # Readiness, not liveness: the API is healthy once it reaches Postgres and Redis and a
    # worker is registered (/readyz answers 503 otherwise), so `up --wait` and prometheus'
    # depends_on wait for that.
    api = compose["services"]["api"]
    argv = api["healthcheck"]["test"]
    assert argv[0] == "CMD"
    assert "/readyz" in " ".join(argv)
    with http_server(200, "/readyz") as port:
        assert run_healthcheck(argv[1:], port) == 0
    with http_server(503, "/readyz") as port:
        assert run_healthcheck(argv[1:], port) != 0
    with http_server(200, "/healthz") as port:  # alive but not ready: /readyz is what counts
        assert run_healthcheck(argv[1:], port) != 0


def test_worker_has_its_own_probe_and_migrate_none(
    compose: dict[str, Any], cli_parser: argparse.ArgumentParser
) -> None:
    # The image's HEALTHCHECK polls /healthz, which neither serves. migrate runs once and exits;
    # the worker is probed through its registration in Redis (`privclust worker --check`).
    services = compose["services"]
    assert services["migrate"]["healthcheck"] == {"disable": True}
    check = services["worker"]["healthcheck"]
    assert check["test"][0] == "CMD"
    assert check["test"][1:] == ["privclust", "worker", "--check"]
    assert_real_cli_invocation(cli_parser, check["test"][1:])
    assert cli_parser.parse_args(check["test"][2:]).check is True
    for key in ("interval", "timeout", "retries", "start_period"):
        assert key in check, key


def test_startup_order_waits_for_healthy_backends_and_finished_migration(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["migrate"]["restart"] == "no", "a one-shot job must not be restarted"
    for name in ("api", "worker"):
        depends = services[name]["depends_on"]
        required = {
            d: spec["condition"] for d, spec in depends.items() if spec.get("required", True)
        }
        assert required == {
            "postgres": "service_healthy",
            "redis": "service_healthy",
            "migrate": "service_completed_successfully",
        }, name
        # The rest are optional (`required: false`): Compose skips a dependency whose profile is
        # off, so without profiles api and worker start exactly as before.
        for dep, spec in depends.items():
            if dep not in required:
                assert spec["required"] is False, (name, dep)
                assert services[dep].get("profiles"), f"{name} optionally waits for {dep}"
    optional = {
        name: {
            d: s["condition"]
            for d, s in services[name]["depends_on"].items()
            if not s.get("required", True)
        }
        for name in ("api", "worker")
    }
    # With the s3 profile both wait for the bucket (which also makes `up --wait` accept the
    # one-shot's exit); with the dask profile the worker waits for the scheduler.
    assert optional == {
        "api": {"minio-bucket": "service_completed_successfully"},
        "worker": {
            "minio-bucket": "service_completed_successfully",
            "dask-scheduler": "service_healthy",
        },
    }
    for dep in ("postgres", "redis"):
        assert "test" in services[dep]["healthcheck"], f"{dep} is waited on but has no check"


def test_images_are_built_here_or_pulled_only_when_missing(compose: dict[str, Any]) -> None:
    services = compose["services"]
    project_image = services["api"]["image"]
    project = {n for n, s in services.items() if s["image"] == project_image}
    assert project == set(IMAGE_SERVICES)
    # One service builds the image, on every `up` (unchanged layers come from the build cache);
    # the others use that build and never look for privclust:local in a registry.
    builders = [n for n in project if "build" in services[n]]
    assert builders == ["migrate"]
    assert services["migrate"]["pull_policy"] == "build"
    for name in project - {"migrate"}:
        assert services[name]["pull_policy"] == "never", name
    for name in set(PROJECT_SERVICES) - {"migrate"}:
        depends = services[name]["depends_on"]["migrate"]["condition"]
        assert depends == "service_completed_successfully", name
    for name in set(services) - project:
        assert services[name]["pull_policy"] == "missing", name
        assert services[name]["image"].split(":")[-1] not in ("", "latest"), name


def test_project_processes_run_under_an_init(compose: dict[str, Any]) -> None:
    # PID 1 is tini: SIGTERM reaches the API and the worker (`down` does not wait out its 10 s),
    # and the processes they fork are reaped.
    for name in IMAGE_SERVICES:
        assert compose["services"][name]["init"] is True, name


def test_the_admin_key_is_a_secret_file_not_a_variable(compose: dict[str, Any]) -> None:
    services = compose["services"]
    (secret,) = services["migrate"]["secrets"]
    assert compose["secrets"][secret] == {"environment": "PRIVCLUST_ADMIN_TOKEN"}
    migrate_env = service_environment(services["migrate"])
    assert migrate_env["PRIVCLUST_ADMIN_TOKEN_FILE"] == f"/run/secrets/{secret}"
    # env_file would otherwise hand .env's PRIVCLUST_ADMIN_TOKEN to every container.
    for name in IMAGE_SERVICES:
        assert service_environment(services[name])["PRIVCLUST_ADMIN_TOKEN"] == "", name
    # Only the services that use it mount it.
    holders = {n for n, s in services.items() if secret in s.get("secrets", [])}
    assert holders == {"migrate", "prometheus"}


def test_settings_read_the_admin_key_from_the_secret_file(tmp_path: Path) -> None:
    token = tmp_path / "privclust-admin-token"
    token.write_text("pck_from-the-secret\n")
    settings = settings_from(
        {"PRIVCLUST_ADMIN_TOKEN_FILE": str(token), "PRIVCLUST_ADMIN_TOKEN": ""}
    )
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == "pck_from-the-secret"
    # Empty (PRIVCLUST_ADMIN_TOKEN= in .env): no key configured, migrate generates one.
    token.write_text("")
    assert settings_from({"PRIVCLUST_ADMIN_TOKEN_FILE": str(token)}).admin_token is None
    with pytest.raises(ValueError, match="cannot read it"):
        settings_from({"PRIVCLUST_ADMIN_TOKEN_FILE": str(tmp_path / "missing")})


def test_the_default_database_password_is_warned_about(compose_raw: dict[str, Any]) -> None:
    def warning(env: dict[str, str]) -> str | None:
        services = interpolate_tree(compose_raw, env, set())["services"]
        url = service_environment(services["api"])["PRIVCLUST_DATABASE_URL"]
        return default_password_warning(settings_from({"PRIVCLUST_DATABASE_URL": url}))

    postgres = service_environment(compose_raw["services"]["postgres"])
    assert postgres["POSTGRES_PASSWORD"] == f"${{POSTGRES_PASSWORD:-{COMPOSE_DEFAULT_DB_PASSWORD}}}"
    active, _ = env_example_entries()
    assert warning({}) and warning(active)  # no .env, or the example copied as it is
    assert "POSTGRES_PASSWORD" in (warning({}) or "")
    assert warning({**active, "POSTGRES_PASSWORD": "s3cret-from-env"}) is None
    assert default_password_warning(Settings()) is None  # SQLite: no password at all


def test_the_test_override_only_swaps_image_names(compose: dict[str, Any]) -> None:
    override = yaml.safe_load(STANDINS_OVERRIDE.read_text())
    assert set(override) == {"services"}
    for name, service in override["services"].items():
        assert name in compose["services"], name
        if name == "migrate":
            assert service.pop("build") == {
                "args": {"PYTHON_IMAGE": service_image_standin("python")}
            }
        assert set(service) == {"image"}, name
        assert service["image"] != compose["services"][name]["image"], name
    # Every image the test would have to pull has a stand-in. The test starts no profile but
    # metrics; the dask profile's services run the project image, minio is never started there.
    started = {
        n
        for n, s in compose["services"].items()
        if not s.get("profiles") or set(s["profiles"]) & COMPOSE_TEST_PROFILES
    }
    pulled = {n for n in started if compose["services"][n]["pull_policy"] == "missing"}
    assert pulled <= set(override["services"]), "an image the test would have to pull"


def service_image_standin(name: str) -> str:
    return f"privclust-standin/{name}:bookworm"


def test_make_compose_test_runs_in_ci() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^compose-test:\n\tscripts/compose-test\.sh$", makefile, flags=re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make compose-test" in ci
    assert ci.index("make compose-test") < ci.index("make lint")


def test_worker_can_be_scaled(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker


def test_api_publishes_the_port_it_listens_on(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    env = service_environment(api)
    assert env["PRIVCLUST_HOST"] == "0.0.0.0"
    (mapping,) = api["ports"]
    assert mapping == f"{env['PRIVCLUST_PORT']}:{env['PRIVCLUST_PORT']}"
    # Binding to loopback only is a matter of setting PUBLISH_PORT=127.0.0.1:8000.
    loopback = interpolate_tree(
        yaml.safe_load(COMPOSE.read_text()), {"PUBLISH_PORT": "127.0.0.1:8000"}, set()
    )
    assert loopback["services"]["api"]["ports"] == ["127.0.0.1:8000:8000"]


def test_named_volumes_are_declared_and_data_is_shared(
    compose: dict[str, Any], stages: list[Stage]
) -> None:
    declared = set(compose["volumes"])
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert not source.startswith((".", "/", "~")), f"{name} bind-mounts {source}"
            assert source in declared, f"{name} uses undeclared volume {source}"
    data_dirs = {
        service_environment(compose["services"][n])["PRIVCLUST_DATA_DIR"] for n in PROJECT_SERVICES
    }
    assert data_dirs == {"/data"}
    # The API writes uploads that workers memory-map; migrate saves a generated admin key there.
    mounts = [
        {v for v in compose["services"][n]["volumes"] if v.endswith(":/data")}
        for n in PROJECT_SERVICES
    ]
    assert len(mounts[0]) == 1 and all(m == mounts[0] for m in mounts), mounts
    final_env = " ".join(stages[-1].args_of("ENV"))
    assert "PRIVCLUST_DATA_DIR=/data" in final_env


def test_settings_reach_the_project_containers_from_an_optional_env_file(
    compose: dict[str, Any],
) -> None:
    for name in IMAGE_SERVICES:
        service = compose["services"][name]
        assert service["env_file"] == [{"path": ".env", "required": False}], name
        unknown = set(service_environment(service)) - SETTINGS_ENV_NAMES
        assert not unknown, f"{name} sets variables privclust does not read: {unknown}"


def test_default_database_and_redis_urls_point_at_the_bundled_services(
    compose_raw: dict[str, Any],
) -> None:
    active, _ = env_example_entries()
    # Both without .env and with the example copied: the URL's password must be Postgres' own.
    for env in ({}, active, {**active, "POSTGRES_PASSWORD": "s3cret-from-env"}):
        resolved = interpolate_tree(compose_raw, env, set())
        services = resolved["services"]
        postgres_env = service_environment(services["postgres"])
        for name in PROJECT_SERVICES:
            url = make_url(service_environment(services[name])["PRIVCLUST_DATABASE_URL"])
            assert url.drivername == "postgresql+psycopg"
            assert url.host == "postgres" and url.port == 5432
            assert url.username == postgres_env["POSTGRES_USER"]
            assert url.password == postgres_env["POSTGRES_PASSWORD"]
            assert url.database == postgres_env["POSTGRES_DB"]
            redis_url = service_environment(services[name])["PRIVCLUST_REDIS_URL"]
            assert redis_url == "redis://redis:6379/0"
            # The values also pass privclust's own validation (the admin key's file exists only
            # in the container).
            env = service_environment(services[name])
            env.pop("PRIVCLUST_ADMIN_TOKEN_FILE", None)
            assert settings_from(env).port == 8000


def test_every_compose_variable_is_documented_in_env_example(compose_raw: dict[str, Any]) -> None:
    used: set[str] = set()
    interpolate_tree(compose_raw, {}, used)
    active, commented = env_example_entries()
    assert used, "expected compose to read at least POSTGRES_PASSWORD and PUBLISH_PORT"
    missing = used - set(active) - set(commented)
    assert not missing, f"compose reads {missing} but .env.example never mentions them"


# ----------------------------------------------------------------------------------------------
# .env.example


def test_env_example_only_names_real_settings_with_valid_values() -> None:
    active, commented = env_example_entries()
    entries = {**commented, **active}
    privclust = {k: v for k, v in entries.items() if k.startswith("PRIVCLUST_")}
    assert privclust, ".env.example documents no privclust setting"
    unknown = set(privclust) - SETTINGS_ENV_NAMES
    assert not unknown, f".env.example names settings that do not exist: {unknown}"
    other = set(entries) - set(privclust)
    assert other == {
        "POSTGRES_PASSWORD",
        "PUBLISH_PORT",
        "COMPOSE_PROFILES",
        "MEMORY_PER_DASK_WORKER",
        "MINIO_ROOT_USER",
        "MINIO_ROOT_PASSWORD",
        *S3_VARIABLES,
    }, other
    # Every example value, commented or not, is accepted by Settings as written.
    settings = settings_from({k: v for k, v in privclust.items() if v})
    if "PRIVCLUST_CORS_ORIGINS" in privclust:
        assert len(settings.cors_origins) == privclust["PRIVCLUST_CORS_ORIGINS"].count(",") + 1


def test_env_example_sets_the_admin_key_variable_the_secret_needs() -> None:
    # Compose refuses to start a service whose secret's variable is not set at all, so the
    # example sets it, empty: migrate then generates a key. Every other active line has a value.
    active, commented = env_example_entries()
    assert active["PRIVCLUST_ADMIN_TOKEN"] == ""
    assert "PRIVCLUST_ADMIN_TOKEN" not in commented
    assert all(value for name, value in active.items() if name != "PRIVCLUST_ADMIN_TOKEN"), active


def test_env_example_states_the_real_upload_limit() -> None:
    _, commented = env_example_entries()
    limit = Settings().max_upload_bytes
    assert int(commented["PRIVCLUST_MAX_UPLOAD_BYTES"]) == limit
    text = ENV_EXAMPLE.read_text()
    assert f"(default {limit // 1024**3} GiB)" in text


# ----------------------------------------------------------------------------------------------
# docs/self-hosting.md


def test_self_hosting_doc_commands_are_real(cli_parser: argparse.ArgumentParser) -> None:
    text = SELF_HOSTING_DOC.read_text()
    # Every fenced block, so that a closing fence is never read as an opening one; the shell's.
    fenced = re.findall(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M)
    shell = "\n".join(body for lang, body in fenced if lang in ("", "sh", "bash", "console"))
    shell = shell.replace("\\\n", " ")  # a command continued on the next line is one line
    for needle in (
        "cp .env.example .env",
        "docker compose up -d",
        "--scale worker=4",
        "docker compose exec api privclust keys create",
    ):
        assert needle in shell, needle
    invocations = 0
    for line in shell.splitlines():
        words = shlex.split(line, comments=True)
        # `privclust` as a command: first on the line, or after the compose service it runs in
        # (not the database or user name in e.g. `pg_dump -U privclust privclust`).
        starts = [
            i
            for i, w in enumerate(words)
            if w == "privclust" and (i == 0 or words[i - 1] in PROJECT_SERVICES)
        ]
        if not starts:
            continue
        argv = words[starts[0] :]
        for i, word in enumerate(argv):
            if word in {"|", "&&", ";", ">", "||"}:
                argv = argv[:i]
                break
        assert_real_cli_invocation(cli_parser, argv)
        invocations += 1
    assert invocations >= 2


def test_self_hosting_doc_dask_commands_and_settings_are_real() -> None:
    import dask.config
    import distributed  # noqa: F401  (its settings join Dask's configuration on import)

    text = SELF_HOSTING_DOC.read_text()
    fenced = re.findall(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M)
    shell = "\n".join(body for lang, body in fenced if lang in ("", "sh", "bash"))
    shell = shell.replace("\\\n", " ")
    # `dask scheduler ...` and `dask worker ...` as the multi-host section runs them (after the
    # image's name), parsed by Dask's own commands.
    runs = {}
    for line in shell.splitlines():
        words = shlex.split(line, comments=True)
        for i, word in enumerate(words[:-1]):
            if word == "dask" and words[i + 1] in ("scheduler", "worker"):
                runs[words[i + 1]] = dask_command(words[i + 1], words[i:])
    assert set(runs) == {"scheduler", "worker"}
    assert runs["scheduler"]["protocol"] == "tls"
    port = int(runs["scheduler"]["port"])
    assert re.fullmatch(rf"tls://[\w.-]+:{port}", runs["worker"]["scheduler"])
    # Every Dask variable it names is one of Dask's settings (DASK_A__B_C is a.b-c), and the
    # TLS ones cover the three roles.
    missing = object()
    named = set(re.findall(r"\bDASK_[A-Z0-9_]+", text))
    for name in named:
        key = ".".join(part.lower().replace("_", "-") for part in name[5:].split("__"))
        assert dask.config.get(key, default=missing) is not missing, (
            f"{name}: no Dask setting {key}"
        )
    for role in ("SCHEDULER", "WORKER", "CLIENT"):
        for part in ("CERT", "KEY"):
            assert f"DASK_DISTRIBUTED__COMM__TLS__{role}__{part}" in named
    assert "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION" in named
    # The settings the page names exist.
    for name in set(re.findall(r"\bPRIVCLUST_[A-Z0-9_]+", text)):
        assert name in SETTINGS_ENV_NAMES | {"PRIVCLUST_ADMIN_TOKEN_FILE"}, name
