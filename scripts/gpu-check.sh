#!/usr/bin/env bash
# Proves stepscope's GPU paths on a real NVIDIA GPU, offline, in at most 8 minutes, and saves what it
# read and recorded as fixtures with their provenance (docs/gpu-check.md).
#
#   scripts/gpu-check.sh                  on the GPU machine: every check; one PASS/FAIL/SKIP line each
#   scripts/gpu-check.sh --prepare        here, with network: what to carry to a GPU machine that has none
#                                         (nvidia-ml-py's wheel, the commit) into build/gpu-check/
#   scripts/gpu-check.sh --simulate       here, without a GPU: the same checks on the simulated CUDA
#                                         layer and stand-in drivers (what CI runs: test/gpu-check.test.ts)
#
# Output: $GPU_CHECK_OUT, else $OUT/gpu-check (the device tool's folder), else ./gpu-check-out:
#   provenance.json        when, where, GPU, driver, CUDA, torch, NCCL, nvidia-ml-py, stepscope commit
#   nvidia-smi/            -q, --version, --query-gpu (the sidecar's own query, with and without units),
#                          --query-compute-apps: the shapes test/fixtures/nvidia-smi keeps
#   readings/              CUDA event semantics, NVML and GPM samples (idle, bf16 and fp32 matmuls)
#   recordings/            the hook's rows (explicit API, zero-code, NCCL) and, with node, the sidecar's
#                          journal and summaries
#   results.json, checks.log
# Exit status: 0 when nothing failed (SKIPs allowed), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
MODE=gpu
case "${1:-}" in
  --prepare) MODE=prepare ;;
  --simulate) MODE=simulate ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--prepare | --simulate]" >&2; exit 2 ;;
esac

# The sidecar's nvidia-smi query (src/counters/nvidia-smi-parse.ts queryFields('event')); test/gpu-check.test.ts keeps the two equal.
QUERY_FIELDS="index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,clocks.mem,pstate,power.draw.average,power.draw.instant,mig.mode.current,clocks_event_reasons.active"
NVML_WHEEL_VERSION="13.615.71"
PREPARED="$ROOT/build/gpu-check"

if [ "$MODE" = prepare ]; then
  mkdir -p "$PREPARED/wheels"
  python3 -m pip download --only-binary=:all: --no-deps -d "$PREPARED/wheels" "nvidia-ml-py==$NVML_WHEEL_VERSION" >/dev/null || { echo "FAIL prepare: could not download nvidia-ml-py" ; exit 1; }
  git -C "$ROOT" rev-parse HEAD > "$PREPARED/commit" 2>/dev/null || true
  [ -d dist ] || npm run build >/dev/null
  echo "prepared $PREPARED: carry build/gpu-check (and dist, plus a production node_modules for the sidecar checks) to the GPU machine"
  exit 0
fi

OUT_DIR="${GPU_CHECK_OUT:-${OUT:+$OUT/gpu-check}}"
OUT_DIR="${OUT_DIR:-$ROOT/gpu-check-out}"
mkdir -p "$OUT_DIR/nvidia-smi" "$OUT_DIR/recordings"
LOG="$OUT_DIR/checks.log"
: > "$LOG"
STARTED=$(date +%s)
BUDGET_S=${GPU_CHECK_BUDGET_S:-480}
FAILED=0
say() { echo "$*" | tee -a "$LOG"; case "$1" in FAIL) FAILED=1 ;; esac; }
left() { echo $((BUDGET_S - ($(date +%s) - STARTED))); }
PYTHON="${GPU_CHECK_PYTHON:-python3}"
# The hook from this checkout, whatever is installed.
export PYTHONPATH="$ROOT/python-hook${PYTHONPATH:+:$PYTHONPATH}"
export STEPSCOPE_COMMIT="${STEPSCOPE_COMMIT:-$(cat "$PREPARED/commit" 2>/dev/null || git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}"

if [ "$MODE" = simulate ]; then
  # Stand-ins: nvidia-smi (test/support/fake-nvidia-smi.mjs, one H100) and the NVML binding (test/fixtures/fake_pynvml).
  FAKE_BIN="$(mktemp -d)"
  trap 'rm -rf "$FAKE_BIN"' EXIT
  ln -s "$ROOT/test/support/fake-nvidia-smi.mjs" "$FAKE_BIN/nvidia-smi"
  export PATH="$FAKE_BIN:$PATH"
fi
# nvidia-ml-py carried from --prepare, installed where only this run sees it (no network needed).
if ls "$PREPARED"/wheels/nvidia_ml_py-*.whl >/dev/null 2>&1 && ! "$PYTHON" -c 'import pynvml' 2>/dev/null; then
  "$PYTHON" -m pip install --no-index --no-deps --quiet --target "$PREPARED/py" "$PREPARED"/wheels/nvidia_ml_py-*.whl && export PYTHONPATH="$PREPARED/py${PYTHONPATH:+:$PYTHONPATH}"
fi

# 1. What the driver says, in the shapes the sidecar reads.
if command -v nvidia-smi >/dev/null; then
  timeout 30 nvidia-smi --version > "$OUT_DIR/nvidia-smi/version.txt" 2>&1
  timeout 30 nvidia-smi -q > "$OUT_DIR/nvidia-smi/q.txt" 2>&1
  timeout 30 nvidia-smi --query-gpu="$QUERY_FIELDS" --format=csv > "$OUT_DIR/nvidia-smi/query-gpu.csv" 2>&1
  timeout 30 nvidia-smi --query-gpu="$QUERY_FIELDS" --format=csv,noheader,nounits > "$OUT_DIR/nvidia-smi/query-gpu_noheader_nounits.txt" 2>&1
  timeout 30 nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv > "$OUT_DIR/nvidia-smi/compute-apps.csv" 2>&1
  if [ -s "$OUT_DIR/nvidia-smi/query-gpu_noheader_nounits.txt" ] && ! grep -q "not a valid field" "$OUT_DIR/nvidia-smi/query-gpu.csv"; then
    say PASS "nvidia-smi-query: the sidecar's query answered: $(head -c 160 "$OUT_DIR/nvidia-smi/query-gpu_noheader_nounits.txt" | head -1)"
  else
    say FAIL "nvidia-smi-query: the sidecar's query was refused: $(head -c 300 "$OUT_DIR/nvidia-smi/query-gpu.csv")"
  fi
else
  say FAIL "nvidia-smi-query: no nvidia-smi on PATH"
fi

# 2. The hook's GPU paths (scripts/gpu_check.py prints its own PASS/FAIL/SKIP lines).
SIM_FLAG=""
[ "$MODE" = simulate ] && SIM_FLAG="--simulate"
TORCH_OK=0
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  say FAIL "torch-cuda: $PYTHON cannot import torch: the hook's GPU checks need a CUDA build of torch on this machine"
else
  TORCH_OK=1
  timeout "$(( $(left) > 60 ? $(left) - 45 : 15 ))" "$PYTHON" scripts/gpu_check.py --out "$OUT_DIR" $SIM_FLAG 2>"$OUT_DIR/gpu_check.stderr" | tee -a "$LOG"
  status=${PIPESTATUS[0]}
  [ "$status" -eq 124 ] && say FAIL "gpu-check-budget: scripts/gpu_check.py ran out of its time"
  [ "$status" -ne 0 ] && FAILED=1
fi

# 3. The sidecar on this machine, where node and a built sidecar are here: verdicts and counters live.
if [ $TORCH_OK -eq 1 ] && command -v node >/dev/null && [ -f dist/cli.js ] && node -e 'require("fastify")' 2>/dev/null && [ "$(left)" -gt 40 ]; then
  SIDECAR_OUT="$OUT_DIR/recordings/sidecar"
  mkdir -p "$SIDECAR_OUT"
  node dist/cli.js serve --port 0 --gpu-source auto --out "$SIDECAR_OUT" --end-grace 1 --hold 0 > "$SIDECAR_OUT/sidecar.log" 2>&1 &
  SIDECAR=$!
  for _ in $(seq 50); do grep -q '"msg":"listening"' "$SIDECAR_OUT/sidecar.log" 2>/dev/null && break; sleep 0.2; done
  PORT=$(grep -o '"port":[0-9]*' "$SIDECAR_OUT/sidecar.log" | head -1 | cut -d: -f2)
  if [ -n "$PORT" ]; then
    STEPSCOPE_URL="ws://127.0.0.1:$PORT/v1/ingest" STEPSCOPE_JOB=gpu-check-input timeout 120 "$PYTHON" -m stepscope run scripts/gpu_check_loop.py --steps 40 --data-ms 40 --busy-ms 10 $SIM_FLAG >/dev/null 2>>"$OUT_DIR/gpu_check.stderr"
    STEPSCOPE_URL="ws://127.0.0.1:$PORT/v1/ingest" STEPSCOPE_JOB=gpu-check-compute timeout 120 "$PYTHON" -m stepscope run scripts/gpu_check_loop.py --steps 40 --data-ms 0 --busy-ms 30 $SIM_FLAG >/dev/null 2>>"$OUT_DIR/gpu_check.stderr"
    for _ in $(seq 100); do [ -f "$SIDECAR_OUT/summary-gpu-check-compute.json" ] && break; sleep 0.2; done
    verdict() { node -e 'const s = require(process.argv[1]); console.log(`${s.verdict} ${s.cause ?? "-"} gpu_idle=${s.gpu_breakdown?.idle ?? "null"} gpu=${s.gpus?.[0]?.name ?? "none"} | ${s.headline}`)' "$1" 2>/dev/null; }
    IN=$(verdict "$SIDECAR_OUT/summary-gpu-check-input.json")
    CO=$(verdict "$SIDECAR_OUT/summary-gpu-check-compute.json")
    case "$IN" in input-bound*) say PASS "sidecar-input-bound: $IN" ;; *) say FAIL "sidecar-input-bound: expected input-bound with the GPU idle waiting for data: ${IN:-no summary}" ;; esac
    case "$CO" in compute-bound*) say PASS "sidecar-compute-bound: $CO" ;; *) say FAIL "sidecar-compute-bound: expected compute-bound: ${CO:-no summary}" ;; esac
    # Step end to viewer with CUDA-timed steps (issue 24, target 6): each row waits for its CUDA
    # events, then goes out at the hook's next beat. Not in --simulate: a latency needs the real GPU.
    if [ "$MODE" = gpu ] && [ "$(left)" -gt 75 ]; then
      timeout 60 node scripts/bench-stream.mjs --hook python --python "$PYTHON" --steps-per-s 10 --cuda-ms 20 --seconds 6 --idle-seconds 1 --viewers 5 > "$SIDECAR_OUT/stream-latency.json" 2>>"$OUT_DIR/gpu_check.stderr"
      LAT=$(node -e 'const j = require(process.argv[1]); console.log(`${j.p99_ms <= 100 && j.steps_never_seen === 0 ? "ok" : "over"} p50 ${j.p50_ms} ms, p99 ${j.p99_ms} ms, max ${j.max_ms} ms, ${j.steps_measured} steps, ${j.steps_never_seen} never seen`)' "$SIDECAR_OUT/stream-latency.json" 2>/dev/null)
      case "$LAT" in ok*) say PASS "stream-latency-cuda: ${LAT#ok }" ;; *) say FAIL "stream-latency-cuda: expected p99 <= 100 ms from a CUDA-timed step's end to 5 viewers: ${LAT:-no result}" ;; esac
    fi
  else
    say FAIL "sidecar: it did not start: $(tail -c 300 "$SIDECAR_OUT/sidecar.log")"
  fi
  kill "$SIDECAR" 2>/dev/null; wait "$SIDECAR" 2>/dev/null
else
  say SKIP "sidecar: no torch, no node, no dist/cli.js or no production node_modules here (or no time left): the recordings are replayed by tests later"
fi

say "$([ $FAILED -eq 0 ] && echo DONE || echo FAILED) gpu-check: $(( $(date +%s) - STARTED )) s, output in $OUT_DIR"
exit $FAILED
