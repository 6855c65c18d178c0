#!/usr/bin/env bash
# Output tokens/s of ngx_srt against llama.cpp's own C++ llama-server (continuous batching,
# --parallel N slots, built from source by scripts/install-bench-deps.sh) at each concurrency:
# same GGUF, same machine, same run, same thread count. The two servers run side by side (an
# idle server costs nothing) and take turns at each concurrency, so both see the same machine.
#
#   scripts/bench_vs_llamacpp.sh [--model GGUF] [--threads 2] [--input-len 256] [--output-len 64]
#                                [--concurrency "1 16"] [--num-prompts 48] [--numerics exact|fast]
#                                [--port 28650] [--out FILE.jsonl]
#
# llama-server gets --parallel = the largest concurrency (a slot per request in flight) and a
# context of that many times one request's, and runs in three configurations side by side (an
# idle one costs nothing): its defaults (weights mmapped, flash attention auto), and weights
# read into memory (-lm none; ngx_srt copies its weights by default) with flash attention on
# and off. The ratio is taken against the fastest of the three at each concurrency. Each
# concurrency draws its own prompts (--seed C): with one set for all, the second concurrency
# found every prompt in both servers' caches from the first (ngx_srt's radix cache,
# llama-server's slot and prompt caches) and measured decode alone. The table's last column
# says how many prompt tokens each server took from its cache (none but the first token or
# page when the prompts are new). Every request is streamed, greedy, with exactly
# --output-len output tokens: ignore_eos for ngx_srt; for llama-server the EOS ids (0
# <|endoftext|>, 2 <|im_end|> for SmolLM2) are banned with logit_bias. The load average is
# printed before every concurrency: on a shared machine quote the same-run ratios, and re-take
# them on a quiet machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
THREADS=2 IN=256 OUT=64 CONCS="1 16" NP=48 NUMERICS=exact PORT=28650 OUTF=""
LLAMA_SERVER=${LLAMA_SERVER:-$ROOT/.cache/llama.cpp/build/bin/llama-server}
while [ $# -gt 0 ]; do
    case $1 in
        --model) MODEL=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --input-len) IN=$2; shift 2 ;;
        --output-len) OUT=$2; shift 2 ;;
        --concurrency) CONCS=$2; shift 2 ;;
        --num-prompts) NP=$2; shift 2 ;;
        --numerics) NUMERICS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --out) OUTF=$2; shift 2 ;;
        *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done
LVARIANTS=("default:" "lm-none-fa-on:-lm none -fa on" "lm-none-fa-off:-lm none -fa off")
NGINX=${NGINX:-/usr/sbin/nginx}
SO=$ROOT/build/nginx/ngx_http_srt_module.so
TOKJ=$ROOT/t/fixtures/tokenizers/smollm2/tokenizer.json
[ -f "$SO" ] || { echo "bench_vs_llamacpp: build the module first (make)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "bench_vs_llamacpp: no model $MODEL (scripts/fetch-model.sh)" >&2; exit 1; }
[ -x "$LLAMA_SERVER" ] ||
    { echo "bench_vs_llamacpp: no $LLAMA_SERVER (scripts/install-bench-deps.sh)" >&2; exit 1; }
PAR=1
for C in $CONCS; do [ "$C" -gt "$PAR" ] && PAR=$C; done

PFX=$(mktemp -d /tmp/srt-bench-vs-llamacpp.XXXXXX)
[ -n "$OUTF" ] || OUTF=$PFX/results.jsonl
LPIDS=""
cleanup() {  # stop both servers and wait until nginx's master and its children (the scheduler) are gone
    local pids=""
    if [ -f "$PFX/nginx.pid" ]; then
        local m; m=$(cat "$PFX/nginx.pid")
        pids="$m $(pgrep -P "$m" | tr '\n' ' ')"
        "$NGINX" -p "$PFX" -c "$PFX/nginx.conf" -s stop 2>/dev/null || true
    fi
    for p in $LPIDS; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    for _ in $(seq 100); do
        local alive=""
        for p in $pids; do [ -d /proc/$p ] && [ "$(cut -d' ' -f3 /proc/$p/stat)" != Z ] && alive=1; done
        [ -z "$alive" ] && break
        sleep 0.1
    done
}
trap cleanup EXIT INT TERM

CTX=$(( (IN + OUT + 64) > 2048 ? IN + OUT + 64 : 2048 ))
cat > "$PFX/nginx.conf" <<EOF
load_module $SO;
master_process on;
worker_processes 1;
pid $PFX/nginx.pid;
error_log $PFX/error.log notice;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $PFX/client_body_temp;
    proxy_temp_path $PFX/proxy_temp;
    fastcgi_temp_path $PFX/fastcgi_temp;
    uwsgi_temp_path $PFX/uwsgi_temp;
    scgi_temp_path $PFX/scgi_temp;
    srt_temp_path $PFX/srt_temp;
    server {
        listen 127.0.0.1:$PORT;
        keepalive_requests 100000;
        location / {
            srt_model $MODEL name=smollm2;
            srt_device cpu;
            srt_threads $THREADS;
            srt_numerics $NUMERICS;
            srt_context_length $CTX;
            srt_max_total_tokens 65536;
            srt_max_running_requests 64;
            srt_max_queued_requests 1024;
            srt_chunked_prefill_size 1024;
        }
    }
}
EOF
"$NGINX" -p "$PFX" -c "$PFX/nginx.conf" -g 'user root;'
LLAMA_ARGS=(-m "$MODEL" -a smollm2 --host 127.0.0.1 -t "$THREADS" -tb "$THREADS"
            -c $((CTX * PAR)) --parallel "$PAR" -b 512 -ub 512 -ngl 0)
for i in "${!LVARIANTS[@]}"; do
    # shellcheck disable=SC2086  # the variant's own arguments, split on purpose
    "$LLAMA_SERVER" "${LLAMA_ARGS[@]}" --port $((PORT + 1 + i)) ${LVARIANTS[$i]#*:} > "$PFX/llama$i.log" 2>&1 &
    LPIDS="$LPIDS $!"
done

wait_up() {  # url
    for _ in $(seq 600); do
        curl -sf -o /dev/null "$1" && return 0
        sleep 0.2
    done
    echo "bench_vs_llamacpp: $1 did not come up" >&2
    return 1
}
wait_up "http://127.0.0.1:$PORT/health"
for i in "${!LVARIANTS[@]}"; do wait_up "http://127.0.0.1:$((PORT + 1 + i))/v1/models"; done

echo "# ngx_srt: nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), srt_threads $THREADS, srt_numerics $NUMERICS," \
     "srt_context_length $CTX, srt_max_running_requests 64, srt_chunked_prefill_size 1024"
echo "# llama.cpp: llama-server ${LLAMA_ARGS[*]}, then each of: ${LVARIANTS[*]} ($("$LLAMA_SERVER" --version 2>&1 | head -1))"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for C in $CONCS; do
    N=$NP
    COMMON=(--model smollm2 --dataset-name random --num-prompts "$N" --random-input-len "$IN"
            --random-output-len "$OUT" --max-concurrency "$C" --tokenizer "$TOKJ" --output-file "$OUTF"
            --seed "$C")
    echo "## concurrency $C, $N prompts, load average $(cut -d' ' -f1 /proc/loadavg)"
    python3 "$ROOT/scripts/bench_serving.py" --base-url "http://127.0.0.1:$PORT" "${COMMON[@]}" --tag "srt c=$C" || echo "(ngx_srt: failed requests at c=$C)"
    for i in "${!LVARIANTS[@]}"; do
        V=${LVARIANTS[$i]%%:*}
        python3 "$ROOT/scripts/bench_serving.py" --base-url "http://127.0.0.1:$((PORT + 1 + i))" "${COMMON[@]}" \
            --tag "llama.cpp $V c=$C" --disable-ignore-eos --extra-body '{"logit_bias": {"0": -100, "2": -100}}' ||
            echo "(llama.cpp $V: failed requests at c=$C)"
    done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUTF" "$CONCS" "$IN" "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {r["tag"]: r for r in rows}
print(f"\nrandom dataset, {sys.argv[3]} prompt tokens, {sys.argv[4]} output tokens per request")
VARS = ("default", "lm-none-fa-on", "lm-none-fa-off")
print("| concurrency | ngx_srt output tok/s | llama.cpp output tok/s (" + " / ".join(VARS) + ") | ratio to the fastest | "
      "ngx_srt median TTFT / ITL ms | llama.cpp (fastest) median TTFT / ITL ms | failed (srt / llama.cpp) | "
      "prompt tokens from cache (srt / llama.cpp) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for c in sys.argv[2].split():
    s, ls = by.get(f"srt c={c}"), [by.get(f"llama.cpp {v} c={c}") for v in VARS]
    if not s or not all(ls):
        continue
    l = max(ls, key=lambda r: r["output_throughput"])
    ratio = s["output_throughput"] / l["output_throughput"] if l["output_throughput"] else float("inf")
    each = " / ".join("%.1f" % r["output_throughput"] for r in ls)
    print(f"| {c} | {s['output_throughput']:.1f} | {each} | "
          f"{ratio:.2f}x | {s['median_ttft_ms']:.0f} / {s['median_itl_ms']:.1f} | "
          f"{l['median_ttft_ms']:.0f} / {l['median_itl_ms']:.1f} | {s['failed']} / {', '.join(str(r['failed']) for r in ls)} | "
          f"{s.get('cached_tokens', 0)} / {', '.join(str(r.get('cached_tokens', 0)) for r in ls)} of {s['total_input_tokens']} |")
EOF
echo "(raw metrics: $OUTF)"
