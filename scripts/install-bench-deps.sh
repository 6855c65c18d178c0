#!/usr/bin/env bash
# Build the peer the benchmarks compare against: llama.cpp's own C++ llama-bench and
# llama-server (continuous batching with --parallel N), from source, on this machine.
#
# The source is the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI (fetched
# with pip, pinned so figures are comparable; nothing of it is committed here). It is built
# with explicit ISA flags, never GGML_NATIVE: on Intel Xeons whose kernel does not enable
# AMX for processes, -march=native binaries die with SIGILL in ggml_backend_amx_mul_mat
# (ldtilecfg). The flags are the AVX2 / AVX-512 subsets /proc/cpuinfo lists, AMX off, CUDA,
# BLAS and other accelerators off, so the comparison is CPU kernels against CPU kernels on
# the same cores. The build is checked to run (llama-bench on the model, 8 tokens) before
# the script reports success. About 15-30 minutes on 2 cores. Not part of `make test`.
#
# Idempotent: does nothing when the binaries exist and run (SRT_BENCH_REBUILD=1 forces).
#
#   LLAMA_CPP_DIR                where to build (default .cache/llama.cpp)
#   LLAMA_CPP_PYTHON_VERSION     sdist whose vendor/llama.cpp is built (default 0.3.36)
#   SRT_BENCH_MODEL              GGUF for the run check (default .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   CMAKE_BUILD_PARALLEL_LEVEL   build jobs (default: number of cores)
#
# Prints the binaries' paths: scripts/bench_engine.py and scripts/bench_vs_llamacpp.sh
# find them in LLAMA_CPP_DIR/build/bin.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DIR=${LLAMA_CPP_DIR:-$ROOT/.cache/llama.cpp}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
MODEL=${SRT_BENCH_MODEL:-$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=$DIR/build/bin

log() { echo "install-bench-deps: $*"; }
die() { echo "install-bench-deps: $*" >&2; exit 1; }

runs() {
    [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ] || return 1
    "$BIN/llama-server" --version >/dev/null 2>&1 || return 1
    if [ -f "$MODEL" ]; then
        "$BIN/llama-bench" -m "$MODEL" -t 1 -p 8 -n 8 -r 1 >/dev/null 2>"$DIR/check.log" || return 1
    fi
}

if [ "${SRT_BENCH_REBUILD:-0}" != 1 ] && runs; then
    log "llama.cpp already built and running: $BIN/llama-bench, $BIN/llama-server"
    exit 0
fi

command -v c++ >/dev/null 2>&1 || die "no C++ compiler; run scripts/install-deps.sh first"
command -v cmake >/dev/null 2>&1 || {
    log "installing cmake"
    if [ "$(id -u)" = 0 ]; then apt-get install -y -q --no-install-recommends cmake >/dev/null
    else sudo apt-get install -y -q --no-install-recommends cmake >/dev/null; fi
}

mkdir -p "$DIR"
SRC=$DIR/llama_cpp_python-$VERSION/vendor/llama.cpp
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    log "fetching the llama-cpp-python $VERSION sdist (its vendor/llama.cpp)"
    python3 -m pip download --disable-pip-version-check --no-deps --no-binary :all: \
        "llama-cpp-python==$VERSION" -d "$DIR" >/dev/null
    tar xzf "$DIR/llama_cpp_python-$VERSION.tar.gz" -C "$DIR"
fi
[ -f "$SRC/CMakeLists.txt" ] || die "no llama.cpp source in $SRC"

# ISA flags from what this CPU lists; AMX never (the kernel may not enable it).
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }
on() { has "$1" && echo ON || echo OFF; }
ISA="-DGGML_NATIVE=OFF -DGGML_SSE42=$(on sse4_2) -DGGML_AVX=$(on avx) -DGGML_AVX2=$(on avx2) \
-DGGML_FMA=$(on fma) -DGGML_F16C=$(on f16c) -DGGML_BMI2=$(on bmi2) -DGGML_AVX_VNNI=$(on avx_vnni) \
-DGGML_AVX512=$(on avx512f) -DGGML_AVX512_VBMI=$(on avx512vbmi) -DGGML_AVX512_VNNI=$(on avx512_vnni) \
-DGGML_AVX512_BF16=$(on avx512_bf16) -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
OFF="-DGGML_CUDA=OFF -DGGML_BLAS=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
-DGGML_OPENCL=OFF -DGGML_RPC=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_HTML=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release"
JOBS=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

log "building llama.cpp ($SRC) with $ISA, $JOBS jobs"
start=$(date +%s)
# shellcheck disable=SC2086
cmake -S "$SRC" -B "$DIR/build" $ISA $OFF >"$DIR/cmake.log" 2>&1 || { tail -20 "$DIR/cmake.log"; die "cmake failed"; }
cmake --build "$DIR/build" -j "$JOBS" --target llama-bench llama-server >"$DIR/build.log" 2>&1 ||
    { tail -30 "$DIR/build.log"; die "build failed (log: $DIR/build.log)"; }
runs || { cat "$DIR/check.log" 2>/dev/null | tail -20; die "the built binaries do not run (SIGILL? see above)"; }
log "done in $(( $(date +%s) - start ))s: $BIN/llama-bench, $BIN/llama-server"
"$BIN/llama-bench" --list-devices 2>/dev/null | head -5 || true
