#!/bin/bash
# cadedit bench engine on a real llama-server, one fresh server per run (docs/measurements/engine.md):
#   tools/engine_bench.sh MODEL.gguf OUT_DIR [RUN ...]
# so that no run finds the previous run's prompts in the slots' caches. RUN names the runs to make
# (default: all of files-c1 files-c4 files-c8 files-c16 onefile-c8 onefile-c16; files-c8 and
# onefile-c8 also make the same edits one at a time locally). SERVER_FLAGS are added to the server's
# command line: by default --no-repack, the weights as cadedit's llama backend runs them unless its
# probe chose otherwise (llama-server repacks by default, which can make its prompts slower than
# cadedit's local backend: docs/measurements/engine.md; measure both on a new CPU). Needs
# llama-server on PATH (tools/install-llama.sh puts it in the venv) and curl.
set -u
MODEL=${1:?usage: tools/engine_bench.sh MODEL.gguf OUT_DIR [RUN ...]}
OUT=${2:?usage: tools/engine_bench.sh MODEL.gguf OUT_DIR [RUN ...]}
shift 2
PORT=${PORT:-18090}
SERVER_FLAGS=${SERVER_FLAGS---no-repack}
mkdir -p "$OUT"
run() { # label, bench engine arguments...
  local label=$1
  shift
  # shellcheck disable=SC2086 # SERVER_FLAGS is a list of flags
  llama-server -m "$MODEL" --host 127.0.0.1 --port "$PORT" -np 16 -c 131072 -t 2 \
    --spec-type ngram-simple --cache-reuse 256 $SERVER_FLAGS >"$OUT/server-$label.log" 2>&1 &
  local server=$!
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
  echo "== $label: $*"
  python -m cadedit bench engine --engine "http://127.0.0.1:$PORT/v1" --model "$MODEL" --threads 2 "$@" \
    --json "$OUT/engine-$label.json" | tail -3
  kill "$server"
  wait "$server" 2>/dev/null
}
[ $# -gt 0 ] || set -- files-c1 files-c4 files-c8 files-c16 onefile-c8 onefile-c16
for one in "$@"; do
  case $one in
    files-c1) run files-c1 -n 16 --clients 1 --no-local ;;
    files-c4) run files-c4 -n 16 --clients 4 --no-local ;;
    files-c8) run files-c8 -n 16 --clients 8 ;;
    files-c16) run files-c16 -n 16 --clients 16 --no-local ;;
    onefile-c8) run onefile-c8 --one-file -n 8 --clients 8 ;;
    onefile-c16) run onefile-c16 --one-file -n 16 --clients 16 --no-local ;;
    *) echo "tools/engine_bench.sh: no run named $one" >&2; exit 1 ;;
  esac
done
