#!/usr/bin/env bash
# Run the sglang engine adapter's tests against a REAL SGLang server on a GPU host.
#
# In CI the same tests run against tests/workers/engines/sglang_double.py (a protocol double);
# this script points them at `python -m sglang.launch_server` instead, so a GPU host checks that
# the double and the real server agree on every shape the adapter relies on.
#
# Usage:
#   deploy/gpu_check.sh MODEL_PATH [TP]
#       1. launches SGLang through heddle's own supervisor (LaunchedSglangEngine), generates,
#          stops it (test_launching_a_real_sglang_server);
#       2. launches SGLang on a free port itself and runs the client and engine tests against it
#          (HEDDLE_SGLANG_URL); tests that need the double's hooks skip.
#   HEDDLE_SGLANG_URL=http://HOST:PORT deploy/gpu_check.sh
#       runs step 2 only, against a server you started (with --enable-priority-scheduling).
#
# Needs: a CUDA GPU; `pip install -e '.[dev,sglang]'` (sglang 0.5.x, GPU wheels); a model already
# on local disk (e.g. Qwen3-0.6B: any causal LM works, token ids used are < 1000).
# Environment: PYTHON (default .venv/bin/python), HEDDLE_SGLANG_LAUNCH_ARGS (extra launch_server
# flags, e.g. "--mem-fraction-static 0.5"), READY_TIMEOUT_S (default 900), LOG_DIR (default a
# temporary folder; server logs go there).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
READY_TIMEOUT_S=${READY_TIMEOUT_S:-900}
LOG_DIR=${LOG_DIR:-$(mktemp -d -t heddle-gpu-check.XXXXXX)}
TESTS=(tests/workers/engines/test_sglang_client.py tests/workers/engines/test_sglang_engine.py)
SERVER_PID=""

cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "stopping SGLang (process group $SERVER_PID)"
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

wait_ready() {  # URL: poll /ready, then /v1/loads (older servers), until READY_TIMEOUT_S
  "$PYTHON" - "$1" "$READY_TIMEOUT_S" <<'EOF'
import asyncio, sys
from heddle.workers.engines.sglang.client import SglangClient

async def main(url: str, timeout_s: float) -> None:
    async with SglangClient(url) as client:
        await client.wait_ready(timeout_s, poll_interval_s=2.0)
        info = await client.server_info()
        print(f"ready: {info.model_name} tp={info.tp_size} sglang {info.version} "
              f"priority_scheduling={info.enable_priority_scheduling}")

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
EOF
}

preflight() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "warning: nvidia-smi not found"
  if ! "$PYTHON" -c "import sglang, sys; print('sglang', sglang.__version__)"; then
    echo "error: sglang is not importable by $PYTHON; install it: pip install -e '.[dev,sglang]'" >&2
    exit 2
  fi
}

if [ -z "${HEDDLE_SGLANG_URL:-}" ]; then
  if [ $# -lt 1 ]; then
    echo "usage: deploy/gpu_check.sh MODEL_PATH [TP]   (or set HEDDLE_SGLANG_URL)" >&2
    exit 2
  fi
  MODEL=$1
  TP=${2:-1}
  preflight
  echo "== 1/2: heddle launches, uses and stops SGLang itself (logs: $LOG_DIR)"
  HEDDLE_SGLANG_MODEL="$MODEL" HEDDLE_SGLANG_TP="$TP" \
    "$PYTHON" -m pytest tests/workers/engines/test_sglang_supervisor.py -q -rs \
    -k test_launching_a_real_sglang_server --basetemp "$LOG_DIR/pytest"

  PORT=$("$PYTHON" -c "from heddle.bus.server import free_port; print(free_port())")
  echo "== 2/2: SGLang on port $PORT, adapter tests against it"
  # setsid: the server and the scheduler processes it forks form one group we can stop.
  # shellcheck disable=SC2086
  setsid "$PYTHON" -m sglang.launch_server --model-path "$MODEL" --tp-size "$TP" \
    --host 127.0.0.1 --port "$PORT" --enable-priority-scheduling \
    ${HEDDLE_SGLANG_LAUNCH_ARGS:-} >"$LOG_DIR/sglang.log" 2>&1 &
  SERVER_PID=$!
  export HEDDLE_SGLANG_URL="http://127.0.0.1:$PORT"
  if ! wait_ready "$HEDDLE_SGLANG_URL"; then
    echo "error: SGLang did not get ready; last log lines:" >&2
    tail -n 40 "$LOG_DIR/sglang.log" >&2
    exit 1
  fi
else
  echo "== adapter tests against $HEDDLE_SGLANG_URL"
  wait_ready "$HEDDLE_SGLANG_URL"
fi

"$PYTHON" -m pytest "${TESTS[@]}" -q -rs -p no:cacheprovider
echo "gpu check passed against $HEDDLE_SGLANG_URL"
