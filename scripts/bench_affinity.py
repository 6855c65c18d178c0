#!/usr/bin/env python3
"""Prefix-cache hit rate, TTFT and throughput of a multi-turn chat workload through an nginx
front to ngx_srt nodes on this machine: srt_prefix_affinity vs nginx's round robin (3 nodes
each) vs one node alone. Each mode gets a fresh cluster (cold caches) and the same dataset
(scripts/bench_serving.py --dataset-name multi-turn, same seed).

    scripts/bench_affinity.py --model .cache/models/tiny-llama --port 2610 \\
        --conversations 24 --turns 4 --concurrency 6 --output-file affinity.jsonl

Hit rate is cached_tokens / prompt_tokens summed over every answered request, from the
nodes' own usage figures. The target (issue 18): affinity >= 0.9 x single node, and clearly
above round robin.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving  # noqa: E402
import cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model directory or GGUF the nodes serve")
    ap.add_argument("--port", type=int, default=2610, help="front port; nodes use port + 1")
    ap.add_argument("--modes", default="single,round-robin,affinity")
    ap.add_argument("--conversations", type=int, default=24)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-prompts", type=int, default=4)
    ap.add_argument("--system-len", type=int, default=384)
    ap.add_argument("--user-len", type=int, default=48)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--kv", type=int, default=65536, help="srt_max_total_tokens of each node")
    ap.add_argument("--threshold", type=int, default=4, help="load_threshold of srt_prefix_affinity")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--output-file", default=None)
    a = ap.parse_args()

    tokenizer = a.tokenizer
    if tokenizer is None and os.path.exists(os.path.join(a.model, "tokenizer.json")):
        tokenizer = os.path.join(a.model, "tokenizer.json")

    out = {}
    for mode in a.modes.split(","):
        prefix = tempfile.mkdtemp(prefix=f"srt-bench-{mode}-")
        os.chmod(prefix, 0o755)   # the nodes' workers write under it (cluster.py)
        c = cluster.Cluster(prefix, a.model, nodes=3, port=a.port, mode=mode, kv=a.kv,
                            threshold=a.threshold)
        try:
            c.start()
            tmp = os.path.join(prefix, "result.jsonl")
            argv = ["--base-url", f"http://127.0.0.1:{a.port}", "--model", "m",
                    "--dataset-name", "multi-turn", "--mt-conversations", str(a.conversations),
                    "--mt-turns", str(a.turns), "--mt-system-prompts", str(a.system_prompts),
                    "--mt-system-len", str(a.system_len), "--mt-user-len", str(a.user_len),
                    "--mt-output-len", str(a.output_len), "--max-concurrency", str(a.concurrency),
                    "--warmup-requests", "0", "--output-file", tmp, "--tag", mode]
            if tokenizer:
                argv += ["--tokenizer", tokenizer]
            print(f"== {mode}", flush=True)
            bench_serving.main(argv)
            with open(tmp) as f:
                m = json.loads(f.readline())
            m["nodes_routed"] = [c.node_metric(i, "srt:num_requests_total") for i in range(len(c.nodes))]
            out[mode] = m
            if a.output_file:
                with open(a.output_file, "a") as f:
                    f.write(json.dumps(m) + "\n")
        finally:
            c.stop()

    print(f"{'mode':<12}{'hit rate':>10}{'mean TTFT ms':>14}{'p99 TTFT ms':>13}{'req/s':>8}{'out tok/s':>11}"
          f"{'failed':>8}  requests per node")
    for mode, m in out.items():
        print(f"{mode:<12}{m.get('cache_hit_rate', float('nan')):>10.3f}{m['mean_ttft_ms']:>14.1f}"
              f"{m['p99_ttft_ms']:>13.1f}{m['request_throughput']:>8.2f}{m['output_throughput']:>11.1f}"
              f"{m['failed']:>8}  {m['nodes_routed']}")
    if "affinity" in out and "single" in out and out["single"].get("cache_hit_rate"):
        r = out["affinity"]["cache_hit_rate"] / out["single"]["cache_hit_rate"]
        print(f"affinity / single-node hit rate: {r:.3f} (target >= 0.9)")
    return 0 if all(m["failed"] == 0 for m in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
