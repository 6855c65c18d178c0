#!/usr/bin/env bash
# Runs every default test suite: C unit tests (TAP) and the nginx t/ suites, all through prove.
# Long soak/fuzz runs are opt-in: SRT_SOAK=1 (see README).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
export SRT_MODEL_DIR=${SRT_MODEL_DIR:-$PWD/.cache/models}
export SRT_REQUIRE_MODELS=${SRT_REQUIRE_MODELS:-1}

units=$(ls "$BUILD"/t/test_* 2>/dev/null | grep -v '\.d$' || true)
suites=$(ls t/*.t 2>/dev/null || true)

if [ -z "$units$suites" ]; then
    echo "no tests found" >&2
    exit 1
fi

# Include boundaries and the module's exported symbols (fails fast, before the long suites).
BUILD=$BUILD scripts/check-boundaries.sh

# One prove run, so its closing summary counts every suite.
prove_args=()
[ -n "$units" ] && prove_args+=($units)
if [ -n "$suites" ]; then
    export TEST_NGINX_BINARY=${TEST_NGINX_BINARY:-/usr/sbin/nginx}
    export TEST_NGINX_SRT_MODULE=${TEST_NGINX_SRT_MODULE:-$PWD/$BUILD/nginx/ngx_http_srt_module.so}
    # as root, the workers and the scheduler run as an unprivileged user that can read the
    # clone and the models (scripts/srt-user.sh says how); the harnesses take it from here
    if [ "$(id -u)" = 0 ] && [ -z "${TEST_NGINX_WORKER_USER:-}" ]; then
        TEST_NGINX_WORKER_USER=$(scripts/srt-user.sh "$PWD" $([ -d "$SRT_MODEL_DIR" ] && echo "$SRT_MODEL_DIR"))
        export TEST_NGINX_WORKER_USER
    fi
fi
# Unit binaries are executed directly; .t files by perl with t/lib on @INC.
prove --timer -I t/lib --exec "$PWD/scripts/prove-exec.sh" "${prove_args[@]}" $suites

# Sanitizers and fuzzing (t/part.mk): the fast unit tests under clang's ASan + UBSan and each
# libFuzzer harness for SRT_FUZZ_SECONDS (5) on its corpus, from one sanitized engine build.
# SRT_SANITIZE=0 skips it; SRT_FUZZ_RUNS=1000000 makes it the soak (10^6 runs per harness).
if [ "${SRT_SANITIZE:-1}" != 0 ]; then
    SRT_FUZZ_SECONDS=${SRT_FUZZ_SECONDS:-5} make -j2 --no-print-directory sanitize-check
fi
