# Stand-in for minio/minio: moto's S3 server (a fake S3 from PyPI, in memory: nothing is kept in
# /data) on MinIO's port 9000, behind the two commands docker-compose.yml's minio service runs:
# its entrypoint's /usr/bin/docker-entrypoint.sh and its healthcheck's `mc ready local`. It
# accepts any key pair; the compose file's own check that MINIO_ROOT_USER and
# MINIO_ROOT_PASSWORD are set still runs first.
FROM privclust-standin/python:bookworm
RUN python -m venv /opt/moto \
    && /opt/moto/bin/pip install --no-cache-dir "moto[server]==5.2.5"
COPY minio-entrypoint.sh /usr/bin/docker-entrypoint.sh
COPY minio-mc.sh /usr/bin/mc
EXPOSE 9000
ENTRYPOINT ["/usr/bin/docker-entrypoint.sh"]
CMD ["server", "/data"]
