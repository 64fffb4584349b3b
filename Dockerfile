# cachesync image: the CLI with its runtime dependencies.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY schema ./schema
COPY producer_outbox ./producer_outbox
COPY consumer ./consumer
COPY cachesync ./cachesync
RUN pip install --no-cache-dir ".[sidecar]" && useradd --system cachesync
USER cachesync
ENTRYPOINT ["cachesync"]
