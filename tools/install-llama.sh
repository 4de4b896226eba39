#!/usr/bin/env bash
# Builds and installs llama-cpp-python (cadedit's llama.cpp backend, `cadedit[llama]`) into a venv,
# with its `server` extra (its OpenAI-compatible server: the engine of tests/test_engine_llama.py),
# and llama.cpp's own `llama-server` (parallel slots, a prompt cache per slot, ngram speculation: the
# engine a team runs, and the one of tests/test_llama_server.py) from the same vendored llama.cpp.
#   tools/install-llama.sh [PYTHON]      PYTHON: the venv's interpreter (default .venv/bin/python)
# The package index has only its source, so pip compiles llama.cpp: about 5-30 minutes on 2 cores,
# once per machine (pip keeps the built wheel in its cache; later installs take seconds). llama-server
# is built from that same source release (pip's cache serves it, no second download), once per machine
# and CPU: the binary is kept in ~/.cache/cadedit/ and copied into the venv's bin/ after that.
# A cache another user controls is refused before anything in it runs or is copied (tools/own.sh:
# the rule of cadedit's own cache): pip's cache (a wheel there is installed), and the folders of the
# kept llama-server, from ${XDG_CACHE_HOME:-~/.cache}/cadedit down. What this script makes there is
# writable by no one else (umask go-w). Python runs with -I: a pip/ in the working folder is not run.
#   CADEDIT_NO_LLAMA_SERVER=1 tools/install-llama.sh   skip llama-server (the library only)
# Build flags chosen here, not left to the user:
#   - native: llama.cpp's kernels for this CPU (AVX2, AVX-512, NEON ...).
#   - no AMX: a native build on CPUs with AMX crashes in ggml's AMX matmul at the first decode.
#   - the library: no llava/mtmd, tools, examples, tests or server binaries (half the build).
#   - llama-server: only that target, static (one file to copy), no HTTPS and no web UI (its assets
#     would be fetched at build time; cadedit talks to the API only).
set -euo pipefail
umask go-w
. "$(dirname "$0")/own.sh"
python=${1:-.venv/bin/python}
version=0.3.36
flags='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'
case $(uname -m) in x86_64|amd64) ;; *) flags='' ;; esac
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}
export CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF${flags:+ -DCMAKE_C_FLAGS='$flags' -DCMAKE_CXX_FLAGS='$flags'}"
own_pip_cache "$python"
nice -n 10 "$python" -I -m pip install --quiet --progress-bar off "llama-cpp-python[server]==$version"
"$python" -I -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'installed')"

[ "${CADEDIT_NO_LLAMA_SERVER:-0}" = 1 ] && exit 0
# The build stamps its version string with the release it came from: `llama-server --version` then
# names it, and a binary from another release (or another build of llama.cpp) is replaced.
stamp="llama-cpp-python-$version"
bin=$(dirname "$python")/llama-server
if [ -x "$bin" ] && "$bin" --version 2>&1 | grep -q "commit $stamp)"; then
    echo "llama-server ($stamp) already installed" >&2
    exit 0
fi
# A native build runs on this CPU only: the cache key is the release and the CPU's feature flags.
cpu=$( (grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || uname -m) | cksum | cut -d' ' -f1)
top=${XDG_CACHE_HOME:-$HOME/.cache}/cadedit
cache=$top/llama-server-$version-$cpu
own_or_refuse "tools/install-llama.sh neither runs nor installs a llama-server from it" \
    "remove it or make it yours, or use a cache folder of yours: XDG_CACHE_HOME=DIR tools/install-llama.sh" \
    "$(own_chain "$top" "$cache/llama-server")"
if ! { [ -x "$cache/llama-server" ] && "$cache/llama-server" --version 2>&1 | grep -q "commit $stamp)"; }; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/cadedit-llama-server.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    echo "==> building llama-server ($stamp) for this CPU: minutes, once" >&2
    # pip fetches the source release through its own cache, so a machine that built the wheel above
    # has it already.
    "$python" -I -m pip download --quiet --progress-bar off --no-deps --no-binary llama-cpp-python \
        -d "$work" "llama-cpp-python==$version"
    tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
    src="$work/llama_cpp_python-$version/vendor/llama.cpp"
    start=$SECONDS
    cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_COMMIT="$stamp" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF ${flags:+"-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags"} >"$work/cmake.log" 2>&1 \
        || { cat "$work/cmake.log" >&2; exit 1; }
    nice -n 10 cmake --build "$work/build" --target llama-server >"$work/build.log" 2>&1 \
        || { tail -n 40 "$work/build.log" >&2; exit 1; }
    (umask 077 && mkdir -p "$cache")
    cp "$work/build/bin/llama-server" "$cache/llama-server.tmp"
    mv "$cache/llama-server.tmp" "$cache/llama-server"
    echo "llama-server built in $((SECONDS - start)) s" >&2
fi
cp "$cache/llama-server" "$bin.tmp"
mv "$bin.tmp" "$bin"
"$bin" --version 2>&1 | grep -m1 version
echo "llama-server ($stamp) installed in $bin" >&2
