# Stand-in for postgres:16-alpine: Debian bookworm's PostgreSQL 15, initialised on first start
# from POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB as the official image does.
FROM privclust-standin/debian:bookworm
RUN mkdir -p /etc/postgresql-common \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["docker-entrypoint.sh"]
# As the official image: SIGINT is PostgreSQL's fast shutdown (SIGTERM waits for clients).
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
