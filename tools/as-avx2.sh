#!/usr/bin/env bash
# Runs a command as cadedit would run on a CPU with AVX2 and FMA only (no AVX-512, no AMX), on any
# newer x86 CPU: torch's kernels capped at AVX2, and llama.cpp from a build for AVX2 alone.
#   tools/as-avx2.sh --build [DIR]        build llama-cpp-python for AVX2 into DIR (once, 15-30 minutes)
#   tools/as-avx2.sh COMMAND [ARGS...]    run COMMAND with both (DIR: $CADEDIT_AVX2_LLAMA, default .avx2-llama)
# What it cannot copy: the other CPU's clock, caches and memory bandwidth. Measurements cadedit caches
# (dtype, step kernel, backend) are keyed by these caps and by llama.cpp's build, so they are made
# again here and kept apart from the machine's own.
set -euo pipefail
dir=${CADEDIT_AVX2_LLAMA:-.avx2-llama}
if [ "${1:-}" = "--build" ]; then
    dir=${2:-$dir}
    python=${PYTHON:-.venv/bin/python}
    export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}
    export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
    # --no-cache-dir: pip's cache would hand back this machine's native build.
    nice -n 10 "$python" -m pip install --quiet --no-cache-dir --no-deps --target "$dir" 'llama-cpp-python==0.3.36'
    exit 0
fi
[ $# -gt 0 ] || { echo "usage: tools/as-avx2.sh --build [DIR] | COMMAND [ARGS...]" >&2; exit 2; }
[ -d "$dir/llama_cpp" ] || { echo "as-avx2: no AVX2 llama.cpp build in $dir (run tools/as-avx2.sh --build $dir)" >&2; exit 1; }
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
export PYTHONPATH="$(cd "$dir" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
exec "$@"
