#!/bin/sh
# `mc ready local`, the compose file's healthcheck: succeeds once the S3 API answers on 9000.
set -eu
[ "${1:-}" = ready ] || { echo "mc stand-in: only 'mc ready local'" >&2; exit 2; }
exec python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9000/', timeout=4)"
