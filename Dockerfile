# cachesync image: the CLI with its runtime dependencies (docker-compose.yml and
# deploy/k8s/ use it). Runs as the unprivileged user cachesync (uid 10001, no shell, no
# home to write to); the endpoints bind where CACHESYNC_METRICS_LISTEN says.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY schema ./schema
COPY producer_outbox ./producer_outbox
COPY consumer ./consumer
COPY cachesync ./cachesync
RUN pip install --no-cache-dir ".[sidecar]" \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin cachesync
USER 10001:10001
# Liveness of whichever role runs (tail, consume, relay): /healthz on its own port
# (cachesync/healthcheck.py). Kubernetes ignores HEALTHCHECK: deploy/k8s sets its probes.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "cachesync.healthcheck", "/healthz"]
ENTRYPOINT ["cachesync"]
