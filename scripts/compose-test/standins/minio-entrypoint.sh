#!/bin/sh
# MinIO's `server /data --console-address :9001` as the stand-in runs it: moto's S3 server on
# port 9000 (the arguments are MinIO's and are not needed).
set -eu
exec /opt/moto/bin/moto_server --host 0.0.0.0 --port 9000
