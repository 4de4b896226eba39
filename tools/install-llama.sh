#!/usr/bin/env bash
# Builds and installs llama-cpp-python (cadedit's llama.cpp backend, `cadedit[llama]`) into a venv.
# With its `server` extra (its OpenAI-compatible server: the real engine of tests/test_engine_llama.py).
#   tools/install-llama.sh [PYTHON]      PYTHON: the venv's interpreter (default .venv/bin/python)
# The package index has only its source, so pip compiles llama.cpp: about 5-30 minutes on 2 cores,
# once per machine (pip keeps the built wheel in its cache; later installs take seconds).
# Build flags chosen here, not left to the user:
#   - native: llama.cpp's kernels for this CPU (AVX2, AVX-512, NEON ...).
#   - no AMX: a native build on CPUs with AMX crashes in ggml's AMX matmul at the first decode.
#   - only the library: no llava/mtmd, tools, examples, tests or server binaries (half the build).
set -euo pipefail
python=${1:-.venv/bin/python}
flags='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'
case $(uname -m) in x86_64|amd64) ;; *) flags='' ;; esac
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}
export CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF${flags:+ -DCMAKE_C_FLAGS='$flags' -DCMAKE_CXX_FLAGS='$flags'}"
nice -n 10 "$python" -m pip install --quiet --progress-bar off 'llama-cpp-python[server]==0.3.36'
"$python" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'installed')"
