#!/usr/bin/env bash
# Cost of forward hooks (BENCHMARKS.md, "Forward hooks"):
#   1. per module call: direct call vs srt_module_forward() without hooks vs one no-op hook;
#   2. SmolLM2 decode: a -DSRT_NO_HOOKS build, no hooks, a no-op hook on every module, and a
#      no-op hook on every projection; variants interleaved over ROUNDS rounds, best kept.
# Usage: scripts/bench-hooks.sh [MODEL]   (env: THREADS=1 TOKENS=64 ROUNDS=3 BUILD=build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${1:-.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-1} TOKENS=${TOKENS:-64} ROUNDS=${ROUNDS:-3}
make -s -j2 "$BUILD/bin/srt-bench-hooks" "$BUILD/bin/srt-bench-hooks-nohooks" >&2

echo "== per module call"
"$BUILD/bin/srt-bench-hooks-nohooks" --micro
"$BUILD/bin/srt-bench-hooks" --micro

echo "== decode, $MODEL, threads=$THREADS, $TOKENS tokens, best of $ROUNDS interleaved rounds x 3 runs"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$ROUNDS"); do
    for v in "nohooks none" "hooks none" "hooks noop" "hooks noop:*proj"; do
        set -- $v
        bin=srt-bench-hooks; [ "$1" = nohooks ] && bin=srt-bench-hooks-nohooks
        "$BUILD/bin/$bin" --model "$MODEL" --threads "$THREADS" --tokens "$TOKENS" --repeat 3 \
            --hooks "$2" 2>/dev/null | tail -1 | sed "s/^/$1 /" >> "$out"
    done
done
for v in "nohooks hooks=none " "hooks hooks=none " "hooks hooks=noop " "hooks hooks=noop:[*]proj "; do
    grep "^$v" "$out" | awk -v label="$v" '
        { for (i = 1; i <= NF; i++) { if ($i == "best" && $(i+2) == "tok/s,") t = $(i+1);
                                      if ($i == "ms/token" && $(i+1) == "best") c = $(i+2);
                                      if ($i == "calls/token") k = $(i+1) }
          if (t > bt) bt = t; if (bc == "" || c + 0 < bc + 0) bc = c; calls = k; ck = $NF }
        END { gsub(/\[|\]/, "", label); printf "%-28s best %7.2f tok/s  best %7.3f CPU ms/token  hook calls/token %s  checksum %s\n",
                     label, bt, bc, calls, ck }'
done
