# The heddle image: control plane, ledger projector, tool executors, sim workers, migrations.
#   docker build -f deploy/docker/heddle.Dockerfile -t heddle:0.1.0 .
# Tool executors run model code under bubblewrap (`heddle tools serve --isolation bwrap`), as
# the unprivileged user below; torch is the CPU build (no GPU work happens in this image).
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY heddle ./heddle
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu "torch>=2.4,<2.14" \
    && pip install --no-cache-dir .

RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin heddle \
    && mkdir -p /var/lib/heddle && chown heddle:heddle /var/lib/heddle
USER 10001
ENV HEDDLE_DATA_DIR=/var/lib/heddle
ENTRYPOINT []
CMD ["heddle", "--help"]
