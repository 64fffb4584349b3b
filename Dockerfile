# cachesync image: the CLI with its runtime dependencies (docker-compose.yml and
# deploy/k8s/ use it). Runs as the unprivileged user cachesync (uid 10001, no shell, no
# home to write to); the endpoints bind where CACHESYNC_METRICS_LISTEN says.
#
# Two stages: the wheels are built where a C compiler is, so the image gets the compiled
# hot paths (cachesync._speedups: the tailer's partitioner, the consumer's event builder,
# key renderer and lease namer); the image installs them and has no compiler. The build
# fails if the cachesync-mysql wheel came out without the extension. Extras: sidecar (the command's
# dependencies) and aws (botocore: Amazon MSK with IAM, kafka.sasl_mechanism AWS_MSK_IAM).
FROM python:3.11-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY schema ./schema
COPY producer_outbox ./producer_outbox
COPY consumer ./consumer
COPY cachesync ./cachesync
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[sidecar,aws]" \
 && ls /wheels/cachesync_mysql-*-cp311-*.whl

FROM python:3.11-slim
WORKDIR /app
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels "cachesync-mysql[sidecar,aws]" \
 && python -c "from cachesync.schema import event, partition; assert event.ACCELERATED and partition.ACCELERATED" \
 && python -c "import botocore.session" \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin cachesync
USER 10001:10001
# Liveness of whichever role runs (tail, consume, relay): /healthz on its own port
# (cachesync/healthcheck.py). Kubernetes ignores HEALTHCHECK: deploy/k8s sets its probes.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "cachesync.healthcheck", "/healthz"]
ENTRYPOINT ["cachesync"]
