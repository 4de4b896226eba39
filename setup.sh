#!/usr/bin/env bash
# One command on a fresh machine: create .venv, install cadedit (CPU torch first), run the demo.
#   ./setup.sh            set up and run the demo
#   PYTHON=python3.11 ./setup.sh   choose the interpreter for the venv
#   CADEDIT_NO_LLAMA=1 ./setup.sh  skip building llama.cpp (the torch backend only)
set -euo pipefail
cd "$(dirname "$0")"
. tools/own.sh  # own_pip_cache, own_problem: the owner/mode rule of cadedit's own caches

PYTHON=${PYTHON:-python3}
PIP=(.venv/bin/python -m pip install --quiet --progress-bar off)

echo "==> creating .venv with $($PYTHON --version)" >&2
[ -x .venv/bin/python ] || "$PYTHON" -I -m venv .venv
own_pip_cache .venv/bin/python  # pip installs the wheels it finds in its cache: never another user's
# torch first and pinned: this machine keeps a CPU build of 2.13.0; an unpinned torch would pull a CUDA build of several GB.
echo "==> installing torch==2.13.0" >&2
"${PIP[@]}" torch==2.13.0
echo "==> installing cadedit with its test and gguf extras" >&2
"${PIP[@]}" -e '.[test,gguf]'
if [ "${CADEDIT_NO_LLAMA:-0}" != 1 ]; then
    # llama.cpp runs a GGUF at its own size with kernels for this CPU; on most CPUs (AVX2, ARM) it is
    # the fast backend, and `--backend auto` measures which one is. The build is once per machine.
    echo "==> building llama.cpp (cadedit[llama] and llama-server) for this CPU: once, then cached; skip with CADEDIT_NO_LLAMA=1" >&2
    tools/install-llama.sh .venv/bin/python
fi

echo "==> demo (no model): the oracle program that turns examples/before.py into examples/after.py" >&2
demo=$(mktemp -d)
trap 'rm -rf "$demo"' EXIT
.venv/bin/cadedit oracle examples/before.py examples/after.py | tee "$demo/fix.program"
cp examples/before.py "$demo/before.py"
.venv/bin/cadedit apply "$demo/before.py" "$demo/fix.program" --write
cmp "$demo/before.py" examples/after.py

# The model fetched goes into the user's own config ($XDG_CONFIG_HOME/cadedit/config.toml, top-level
# `model`), where every later `cadedit fix` looks when no --model or CADEDIT_MODEL is given; a model the
# user already set there is left alone. The folder is the user's own and private, as cadedit requires:
# one that another user owns or may write (or a link) is left alone too, as cadedit would not read it.
remember_model() {
    local folder="${XDG_CONFIG_HOME:-$HOME/.config}/cadedit"
    local config="$folder/config.toml" part why
    for part in "$folder" "$config"; do
        if ! why=$(own_problem "$part"); then
            echo "==> $part is not your own ($why): the model is not recorded there (cadedit would not read it)" >&2
            return
        fi
    done
    if [ -f "$config" ] && grep -qE '^[[:space:]]*model[[:space:]]*=' "$config"; then
        echo "==> $config already names a model; left as it is (cadedit fix uses that one)" >&2
        return
    fi
    mkdir -p "$folder" && chmod 700 "$folder"
    # First in the file: a top-level key after a [table] would belong to that table.
    local new="$config.new.$$"
    { printf 'model = "%s"  # written by cadedit'"'"'s setup.sh\n' "$1"; [ -f "$config" ] && cat "$config"; } > "$new"
    chmod 600 "$new" && mv "$new" "$config"
    echo "==> recorded model = \"$1\" in $config: cadedit fix now uses it from any folder" >&2
}

# The main job: a real local model fixes a real bug, and the fix is verified by a test before it is
# shown. The model is whatever --model / CADEDIT_MODEL / .cadedit.toml names; with none set (and no
# model hub here), fetch the default model (docs/usage.md#models-and-backends) once as a GGUF.
size=${CADEDIT_MODEL_SIZE:-1.5b}
model=${CADEDIT_MODEL:-}
if [ -z "$model" ] && [ "${CADEDIT_SKIP_MODEL:-0}" != 1 ]; then
    echo "==> fetching Qwen2.5-Coder-$size-Instruct (GGUF) with tools/get-model.sh" >&2
    model=$(PATH="$PWD/.venv/bin:$PATH" tools/get-model.sh --size "$size" | tail -n 1)
fi
if [ -n "$model" ] && [ -z "${CADEDIT_MODEL:-}" ]; then
    remember_model "$model"
fi
if [ -n "$model" ]; then
    echo "==> main job: cadedit fix examples/before.py \"Fix the bug in average.\" --test ..." >&2
    echo "    (the first run measures which backend is faster on this CPU, once; --verbose says which and why)" >&2
    # The diff is printed, not written: examples/ stays as it is. Exit 3 would mean no try passed the test.
    .venv/bin/cadedit fix examples/before.py "Fix the bug in average." --model "$model" \
        --test "python3 examples/check_average.py examples/before.py"
fi
echo "==> ready: . .venv/bin/activate && cadedit --help     tests: .venv/bin/python -m pytest" >&2
