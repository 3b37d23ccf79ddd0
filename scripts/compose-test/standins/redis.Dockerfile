# Stand-in for redis:7-alpine: Debian bookworm's Redis 7.0, in /data, protected mode off as the
# official image builds it (the compose network, not Redis, keeps other hosts out).
FROM privclust-standin/debian:bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data \
    && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
ENTRYPOINT ["docker-entrypoint.sh"]
EXPOSE 6379
CMD ["redis-server"]
