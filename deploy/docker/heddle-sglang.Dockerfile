# The worker image: SGLang (with its own torch and CUDA kernels) plus heddle, for
# `heddle worker --engine sglang --launch ...` (one worker agent drives one SGLang server).
#   docker build -f deploy/docker/heddle-sglang.Dockerfile -t heddle-sglang:0.1.0 .
FROM lmsysorg/sglang:v0.5.5

WORKDIR /opt/heddle
COPY pyproject.toml README.md ./
COPY heddle ./heddle
# sglang's image already holds a torch inside heddle's range: pip keeps it.
RUN pip install --no-cache-dir .

ENV HEDDLE_DATA_DIR=/var/lib/heddle
RUN mkdir -p /var/lib/heddle
ENTRYPOINT []
CMD ["heddle", "worker", "--engine", "sglang", "--engine-help"]
