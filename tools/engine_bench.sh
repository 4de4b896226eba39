#!/bin/bash
# cadedit bench engine on a real llama-server, one fresh server per run (docs/measurements/engine.md):
#   tools/engine_bench.sh MODEL.gguf OUT_DIR
# so that no run finds the previous run's prompts in the slots' caches. Needs llama-server on PATH
# (tools/install-llama.sh puts it in the venv) and curl.
set -u
MODEL=${1:?usage: tools/engine_bench.sh MODEL.gguf OUT_DIR}
OUT=${2:?usage: tools/engine_bench.sh MODEL.gguf OUT_DIR}
PORT=${PORT:-18090}
mkdir -p "$OUT"
run() { # label, bench engine arguments...
  local label=$1
  shift
  llama-server -m "$MODEL" --host 127.0.0.1 --port "$PORT" -np 16 -c 131072 -t 2 \
    --spec-type ngram-simple --cache-reuse 256 >"$OUT/server-$label.log" 2>&1 &
  local server=$!
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
  echo "== $label: $*"
  python -m cadedit bench engine --engine "http://127.0.0.1:$PORT/v1" --model "$MODEL" --threads 2 "$@" \
    --json "$OUT/engine-$label.json" | tail -3
  kill "$server"
  wait "$server" 2>/dev/null
}
run files-c1 -n 16 --clients 1
run files-c4 -n 16 --clients 4 --no-local
run files-c8 -n 16 --clients 8 --no-local
run files-c16 -n 16 --clients 16 --no-local
run onefile-c8 --one-file -n 8 --clients 8
run onefile-c16 --one-file -n 16 --clients 16 --no-local
