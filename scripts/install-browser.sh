#!/usr/bin/env bash
# Installs the Chromium that the browser tests (tests/e2e/test_console.py) drive: Debian's
# `chromium` package, when no Chromium or Chrome is on the PATH yet. Needs root and apt-get;
# without them it says what to do and exits 1, and the browser tests skip.
set -euo pipefail

for name in ${PRIVCLUST_CHROMIUM:-} chromium chromium-browser google-chrome google-chrome-stable; do
    if path=$(command -v "$name"); then
        echo "browser tests will use $path"
        exit 0
    fi
done

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "No Chromium found, and installing one needs root and apt-get." >&2
    echo "Install it (Debian/Ubuntu: sudo apt-get install chromium), or set PRIVCLUST_CHROMIUM" >&2
    echo "to a Chromium or Chrome binary; until then the browser tests skip." >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends chromium \
    || { apt-get update && apt-get install -y --no-install-recommends chromium; }
echo "browser tests will use $(command -v chromium)"
