# redisai-server: a RedisAI-compatible inference server (CPU torch + onnxruntime), non-root.
#   docker build -t redisai-server .
#   docker compose up            (see docker-compose.yml: a Redis with AOF and this server in front of it)
#   docker run -p 127.0.0.1:6379:6379 -p 127.0.0.1:9100:9100 -v redisai-data:/data redisai-server \
#       --dir /data --metrics-port 9100
#                                (alone: the embedded valkey-server child, its AOF/RDB in the /data volume)
FROM python:3.11-slim

# torch comes from PyTorch's CPU-only wheel index: a plain `pip install torch` from PyPI brings the CUDA
# build and several GB of NVIDIA libraries. Another index (a mirror, or a CUDA build for a GPU host):
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu<NNN> .   (docs/gpu.md)
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Everything else comes from PyPI; an extra index (a mirror) with --build-arg PIP_EXTRA_INDEX_URL=<url>.
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
COPY pyproject.toml README.md setup.py ./
COPY server ./server
COPY dag ./dag
COPY backends ./backends
# torch first, exactly this version, from TORCH_INDEX_URL, so the project's torch range is already met
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==2.13.0" && pip install ".[${EXTRAS}]"
# The per-request hot path compiled with mypyc (docs/performance.md, "Compiled hot path"): the installed
# package is rebuilt with its .so modules, then the compiler and mypy leave the image. COMPILE=0: pure Python.
ARG COMPILE=1
RUN if [ "${COMPILE}" = 1 ]; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
        && pip install "setuptools>=77" "mypy==2.4.1" \
        && REDISAI_COMPILE=1 pip install --no-build-isolation --no-deps --force-reinstall . \
        && pip uninstall -y mypy && apt-get purge -y gcc libc6-dev && apt-get autoremove -y \
        && rm -rf /var/lib/apt/lists/* build; \
    fi

USER redisai
VOLUME /data
# 6379: RESP; 9100: the HTTP port of /metrics, when --metrics-port 9100 (REDISAI_METRICS_PORT) is given
EXPOSE 6379 9100
# Settings come from the environment (REDISAI_<OPTION>), see docs/configuration.md.
ENV REDISAI_BIND=0.0.0.0 REDISAI_PORT=6379
# Readiness, not PING: GET /readyz when REDISAI_METRICS_PORT is set, else PING and a store round trip over RESP
# (TLS and REDISAI_REQUIREPASS as the server uses them); see docs/deployment.md, "Health and readiness".
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 CMD ["redisai-server", "--healthcheck"]
ENTRYPOINT ["redisai-server"]
