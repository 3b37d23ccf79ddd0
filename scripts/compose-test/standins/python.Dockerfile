# Stand-in for python:3.11-slim-bookworm: Debian bookworm's own Python 3.11, with venv and pip.
# Like the official image, `python` is Python 3 and the locale is C.UTF-8.
FROM privclust-standin/debian:bookworm
ENV LANG=C.UTF-8
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python-is-python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# pip as this machine sets it up (its certificate authorities, index and timeout: see
# compose-test.sh), so that the project's build on this base reaches PyPI as pip here does.
COPY machine-pip/ /etc/privclust-standin/
RUN cp /etc/privclust-standin/pip.conf /etc/pip.conf
