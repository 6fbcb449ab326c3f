# redisai-server: a RedisAI-compatible inference server (CPU torch + onnxruntime), non-root.
#   docker build -t redisai-server .
#   docker compose up            (see docker-compose.yml: a Redis with AOF and this server in front of it)
#   docker run -p 127.0.0.1:6379:6379 -v redisai-data:/data redisai-server --dir /data
#                                (alone: the embedded valkey-server child, its AOF/RDB in the /data volume)
FROM python:3.11-slim

# A CPU-only torch wheel keeps the image small; point pip at a CPU wheel index with
#   docker build --build-arg PIP_EXTRA_INDEX_URL=<your CPU wheel index> .
ARG PIP_EXTRA_INDEX_URL=""
# TF and TFLITE models need two more extras (about 1.5 GB more for tensorflow-cpu, docs/configuration.md):
#   docker build --build-arg EXTRAS=torch,onnx,tf,tflite,uvloop,metrics .
ARG EXTRAS=torch,onnx,uvloop,metrics
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-tools \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 redisai \
    && mkdir /data && chown redisai /data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY server ./server
COPY dag ./dag
COPY backends ./backends
# torch first, exactly this version, so the project's torch range is already met
RUN pip install "torch==2.13.0" && pip install ".[${EXTRAS}]"

USER redisai
VOLUME /data
EXPOSE 6379
# Settings come from the environment (REDISAI_<OPTION>), see docs/configuration.md.
ENV REDISAI_BIND=0.0.0.0 REDISAI_PORT=6379
# Readiness, not PING: GET /readyz when REDISAI_METRICS_PORT is set, else PING and a store round trip over RESP
# (TLS and REDISAI_REQUIREPASS as the server uses them); see docs/deployment.md, "Health and readiness".
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 CMD ["redisai-server", "--healthcheck"]
ENTRYPOINT ["redisai-server"]
