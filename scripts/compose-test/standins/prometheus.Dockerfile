# Stand-in for prom/prometheus: Debian bookworm's Prometheus 2.42, laid out as the official image
# (the binary as entrypoint, storage in /prometheus, running as nobody).
FROM privclust-standin/debian:bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus \
    && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
