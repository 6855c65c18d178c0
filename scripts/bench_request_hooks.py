#!/usr/bin/env python3
"""Cost of per-request hooks and of returned activations (issue 17; BENCHMARKS.md,
"Per-request hooks" and "Returned activations").

    scripts/bench_request_hooks.py [--model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf]
        [--threads 2] [--batch 16] [--tokens 32] [--rounds 3] [--port 28690]
        [--what hooks|activations]

Starts a private nginx (prefix under /tmp, stopped at the end) serving the model with a
per-request steering spec (libsrt_hook_steer.so on model.layers.10, "per_request": true) and
sends rounds of --batch concurrent greedy completions (distinct prompts, --tokens output tokens,
ignore_eos), in three variants interleaved per round:
    none     no request selects the hook
    half     every other request selects it ("hooks": [{"name": "steer", "config": {"scale": 4}}])
    all      every request selects it
(--what activations: "selects" is "return_activations": [{"module": "model.layers.10",
"reduce": "last", "dtype": "f32"}] instead, and each such response must carry the tensor)
and reports output tokens/s (best round) and the ratio to `none` (target for `half`: >= 0.9),
and the scheduler process's CPU time per output token (best round; /proc/PID/stat, all its
threads), which other processes on a loaded machine disturb less than wall time.
The radix cache is off so every round computes its prompts. Standard library only."""
import argparse
import http.client
import json
import os
import re
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
            srt_max_activation_bytes 64k;
            srt_wait_ready 300s;
        }}
"""


def one(port, body, out, i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    j = json.loads(data) if r.status == 200 else {}
    good = r.status == 200 and ("return_activations" not in body or len(j["choices"][0]["activations"]) == 1)
    out[i] = j["usage"]["completion_tokens"] if good else -1
    c.close()


def sched_cpu_s(pid):
    """User + system CPU seconds of the scheduler process so far (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_batch(port, args, variant, rnd, pid):
    bodies = []
    for i in range(args.batch):
        b = {"model": "m", "prompt": f"Request {rnd}-{i}: write a short story about the number {i * 37 + rnd}.",
             "max_tokens": args.tokens, "temperature": 0, "ignore_eos": True}
        if variant == "all" or (variant == "half" and i % 2):
            if args.what == "activations":
                b["return_activations"] = [{"module": "model.layers.10", "reduce": "last", "dtype": "f32"}]
            else:
                b["hooks"] = [{"name": "steer", "config": {"scale": 4}}]
        bodies.append(b)
    out = [0] * args.batch
    ts = [threading.Thread(target=one, args=(port, b, out, i)) for i, b in enumerate(bodies)]
    c0 = sched_cpu_s(pid)
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    cpu = sched_cpu_s(pid) - c0
    if min(out) < 0:
        sys.exit(f"bench_request_hooks: a {variant} request failed")
    return sum(out) / dt, cpu * 1000 / sum(out)


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
    ap.add_argument("--what", choices=("hooks", "activations"), default="hooks")
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
        with open(os.path.join(ngx.pfx, "error.log")) as f:
            pid = int(re.findall(r"scheduler process (\d+) started", f.read())[-1])
        load0 = open('/proc/loadavg').read().split()[:3]
        run_batch(args.port, args, "none", -1, pid)   # warm-up
        best, best_cpu = {}, {}
        for rnd in range(args.rounds):
            for v in ("none", "half", "all"):
                tps, cpu = run_batch(args.port, args, v, rnd, pid)
                best[v] = max(best.get(v, 0), tps)
                best_cpu[v] = min(best_cpu.get(v, 1e9), cpu)
        print(f"{args.what}: model {os.path.basename(args.model)}, threads {args.threads}, batch {args.batch}, "
              f"{args.tokens} tokens each, best of {args.rounds} interleaved rounds; load {load0} at the start, "
              f"{open('/proc/loadavg').read().split()[:3]} at the end")
        for v in ("none", "half", "all"):
            print(f"{v:5s} {best[v]:8.1f} output tok/s  ratio {best[v] / best['none']:.3f}   "
                  f"scheduler CPU {best_cpu[v]:7.2f} ms/token  ratio {best_cpu[v] / best_cpu['none']:.3f}")


if __name__ == "__main__":
    main()
