#!/usr/bin/env python3
"""Cost of per-request hooks (issue 17; BENCHMARKS.md, "Per-request hooks").

    scripts/bench_request_hooks.py [--model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf]
        [--threads 2] [--batch 16] [--tokens 32] [--rounds 3] [--port 28690]

Starts a private nginx (prefix under /tmp, stopped at the end) serving the model with a
per-request steering spec (libsrt_hook_steer.so on model.layers.10, "per_request": true) and
sends rounds of --batch concurrent greedy completions (distinct prompts, --tokens output tokens,
ignore_eos), in three variants interleaved per round:
    none     no request selects the hook
    half     every other request selects it ("hooks": [{"name": "steer", "config": {"scale": 4}}])
    all      every request selects it
and reports output tokens/s (best round) and the ratio to `none` (target for `half`: >= 0.9).
The radix cache is off so every round computes its prompts. Standard library only."""
import argparse
import http.client
import json
import os
import shutil
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_nginx import PrivateNginx  # noqa: E402

LOCATIONS = """        location /v1/ {{
            srt_model {model} name=m;
            srt_device cpu;
            srt_threads {threads};
            srt_radix_cache off;
            srt_context_length 1024;
            srt_max_running_requests {batch};
            srt_max_total_tokens 16384;
            srt_forward_hooks {{pfx}}/hooks.json;
            srt_hooks_path {lib};
            srt_request_hooks steer;
            srt_wait_ready 300s;
        }}
"""


def one(port, body, out, i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    out[i] = json.loads(data)["usage"]["completion_tokens"] if r.status == 200 else -1
    c.close()


def run_batch(port, args, variant, rnd):
    bodies = []
    for i in range(args.batch):
        b = {"model": "m", "prompt": f"Request {rnd}-{i}: write a short story about the number {i * 37 + rnd}.",
             "max_tokens": args.tokens, "temperature": 0, "ignore_eos": True}
        if variant == "all" or (variant == "half" and i % 2):
            b["hooks"] = [{"name": "steer", "config": {"scale": 4}}]
        bodies.append(b)
    out = [0] * args.batch
    ts = [threading.Thread(target=one, args=(port, b, out, i)) for i, b in enumerate(bodies)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    if min(out) < 0:
        sys.exit(f"bench_request_hooks: a {variant} request failed")
    return sum(out) / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--module", default=os.path.join(ROOT, "build/nginx/ngx_http_srt_module.so"))
    ap.add_argument("--hook-lib", default=os.path.join(ROOT, "build/lib"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=28690)
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    args = ap.parse_args()
    locations = LOCATIONS.format(model=os.path.abspath(args.model), threads=args.threads, batch=args.batch,
                                 lib=args.hook_lib)
    ngx = PrivateNginx(args.nginx, args.module, "srt-bench-reqhooks.", args.port, locations)
    vec = [round(3 * __import__("math").sin(i * 0.7), 3) for i in range(576)]
    with open(os.path.join(ngx.pfx, "hooks.json"), "w") as f:
        json.dump({"forward_hooks": [{"name": "steer", "per_request": True, "target_modules": ["model.layers.10"],
                                      "hook_factory": "libsrt_hook_steer.so:srt_steer_factory",
                                      "config": {"vector": vec, "scale": 1}}]}, f)
    with ngx:
        ngx.wait_ready("/v1/models", tries=600, every=0.2)
        run_batch(args.port, args, "none", -1)   # warm-up
        best = {}
        for rnd in range(args.rounds):
            for v in ("none", "half", "all"):
                tps = run_batch(args.port, args, v, rnd)
                best[v] = max(best.get(v, 0), tps)
        print(f"model {os.path.basename(args.model)}, threads {args.threads}, batch {args.batch}, "
              f"{args.tokens} tokens each, best of {args.rounds} interleaved rounds; load {open('/proc/loadavg').read().split()[:3]}")
        for v in ("none", "half", "all"):
            print(f"{v:5s} {best[v]:8.1f} output tok/s  ratio {best[v] / best['none']:.3f}")


if __name__ == "__main__":
    main()
