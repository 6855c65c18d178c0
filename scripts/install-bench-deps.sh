#!/usr/bin/env bash
# Install what the benchmarks compare against: llama.cpp, through llama-cpp-python from PyPI.
#
# PyPI ships llama-cpp-python as a source distribution only, so pip builds llama.cpp here:
# about 15-30 minutes on 2 cores. It is built for this CPU (GGML_NATIVE, so it uses the same
# AVX2/AVX-512 the engine may use) with CUDA, BLAS and other accelerators off, so the
# comparison is CPU kernels against CPU kernels on the same cores. Not part of `make test`.
#
# Idempotent: does nothing when `import llama_cpp` already works (SRT_BENCH_REBUILD=1 forces
# a rebuild, e.g. after moving to another CPU).
#
#   PYTHON                       interpreter to install into (default python3)
#   LLAMA_CPP_PYTHON_VERSION     default 0.3.36 (pinned so benchmark figures are comparable)
#   CMAKE_BUILD_PARALLEL_LEVEL   build jobs (default: number of cores)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}

log() { echo "install-bench-deps: $*"; }

if [ "${SRT_BENCH_REBUILD:-0}" != 1 ] &&
   have=$("$PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null); then
    log "llama-cpp-python $have already importable by $PYTHON"
    exit 0
fi

# The compiler toolchain comes with install-deps.sh; cmake and ninja come from PyPI as
# build requirements of llama-cpp-python when the system has none.
if ! command -v c++ >/dev/null 2>&1; then
    echo "install-bench-deps: no C++ compiler; run scripts/install-deps.sh first" >&2
    exit 1
fi

export CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_BLAS=OFF \
-DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF -DGGML_OPENCL=OFF \
-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
export FORCE_CMAKE=1

pip_args=(install --disable-pip-version-check --no-warn-script-location --root-user-action=ignore
          --no-binary llama-cpp-python)
[ "${SRT_BENCH_REBUILD:-0}" = 1 ] && pip_args+=(--force-reinstall --no-cache-dir --no-deps)
# Same PEP 668 policy as install-deps.sh: user site, apt's files untouched.
managed=$("$PYTHON" -c 'import os, sys, sysconfig
print(int(sys.prefix == sys.base_prefix and
          os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
if [ "$managed" = 1 ]; then
    pip_args+=(--break-system-packages)
    [ "${SRT_PIP_USER:-1}" = 1 ] && pip_args+=(--user)
fi

log "building llama-cpp-python==$VERSION from source (CMAKE_ARGS=$CMAKE_ARGS, $CMAKE_BUILD_PARALLEL_LEVEL jobs)"
start=$(date +%s)
"$PYTHON" -m pip "${pip_args[@]}" "llama-cpp-python==$VERSION"
"$PYTHON" -c 'import llama_cpp; print("install-bench-deps: llama-cpp-python", llama_cpp.__version__,
               "system_info:", llama_cpp.llama_print_system_info().decode())'
log "done in $(( $(date +%s) - start ))s"
