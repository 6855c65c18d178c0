#!/usr/bin/env python3
"""Encoding throughput of the C tokenizer (build/bin/srt-tokenize) against HF tokenizers (Rust) on the
same corpus, in the same run.

    scripts/bench_tokenizer.py [--repeat N] [--rounds R] [names...]

The corpus is t/fixtures/tokenizers/corpus.txt, split into lines (one encode call per line on both
sides), repeated N times. Each side runs R rounds; the best round counts (the machine may be shared).
HF is measured two ways: encode_batch (Rust, all cores) and encode_batch with one thread
(RAYON_NUM_THREADS=1); ours is single-threaded. Wall-clock MB/s for all three, plus process CPU time
for the two single-threaded runs (the fair figure on a shared machine). Prints Markdown for BENCHMARKS.md.
A second table uses long documents (100 corpus lines per encode call) instead of one line per call."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "t/fixtures/tokenizers")
TOOL = os.path.join(ROOT, "build/bin/srt-tokenize")

HF_SNIPPET = r"""
import sys, time
from tokenizers import Tokenizer
path, lines_path, repeat, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = open(lines_path, encoding="utf-8").read().split("\n") * repeat
nb = sum(len(l.encode()) for l in lines)
t = Tokenizer.from_file(path)
block = int(sys.argv[5])
if block > 1:
    lines = ["\n".join(lines[i:i + block]) for i in range(0, len(lines), block)]
    nb = sum(len(l.encode()) for l in lines)
best, best_cpu = 1e9, 1e9
for _ in range(rounds):
    t0, c0 = time.perf_counter(), time.process_time()
    t.encode_batch(lines, add_special_tokens=False)
    best = min(best, time.perf_counter() - t0)
    best_cpu = min(best_cpu, time.process_time() - c0)
print(nb, best, best_cpu)
"""


def run_ours(tj, lines_path, repeat, rounds):
    best, best_cpu, nb = 1e9, 1e9, 0
    for _ in range(rounds):
        out = subprocess.run([TOOL, tj, "--lines", lines_path, "--repeat", str(repeat), "--bench"],
                             check=True, capture_output=True, text=True).stdout.split()
        kv = dict(zip(out[0::2], out[1::2]))
        nb = int(kv["bytes"])
        best = min(best, float(kv["seconds"]))
        best_cpu = min(best_cpu, float(kv["cpu_seconds"]))
    return nb, best, best_cpu


def run_hf(tj, lines_path, repeat, rounds, block, threads=None):
    env = dict(os.environ)
    if threads:
        env["RAYON_NUM_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, "-c", HF_SNIPPET, tj, lines_path, str(repeat), str(rounds), str(block)],
                         check=True, capture_output=True, text=True, env=env).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("names", nargs="*", default=["smollm2", "qwen2", "llama3", "spm"])
    args = ap.parse_args()
    if not os.path.exists(TOOL):
        sys.exit("build/bin/srt-tokenize missing: run make first")
    corpus = [json.loads(l) for l in open(os.path.join(FIX, "corpus.txt"), encoding="utf-8")]
    # one encode call per line; \r is dropped so that the C tool's line splitting sees the same lines
    lines = "\n".join(corpus).replace("\r", "").split("\n")
    for block in (1, 100):
        if block == 1:
            units = lines
            title = "one corpus line per encode call (%d calls)" % len(lines)
        else:
            units = ["\n".join(lines[i:i + block]).replace("\n", "\x1f") for i in range(0, len(lines), block)]
            title = "documents of %d corpus lines per encode call" % block
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
            f.write("\n".join(units))
            lines_path = f.name
        try:
            print("\n%s, x%d, best of %d rounds\n" % (title, args.repeat, args.rounds))
            print("| tokenizer | MB | ours MB/s wall | ours MB/s CPU | HF 1 thread MB/s wall | HF 1 thread MB/s CPU "
                  "| HF %d threads MB/s wall | ours/HF (CPU, 1 thread) | ours/HF (wall, HF all threads) |"
                  % os.cpu_count())
            print("|---|---|---|---|---|---|---|---|---|")
            for name in args.names:
                tj = os.path.join(FIX, name, "tokenizer.json")
                nb, ours, ours_cpu = run_ours(tj, lines_path, args.repeat, args.rounds)
                nb1, hf1, hf1_cpu = run_hf(tj, lines_path, args.repeat, args.rounds, 1, threads=1)
                nbn, hfn, _ = run_hf(tj, lines_path, args.repeat, args.rounds, 1)
                assert nb == nb1 == nbn, (nb, nb1, nbn)
                mb = nb / 1e6
                print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1fx | %.1fx |" % (
                    name, mb, mb / ours, mb / ours_cpu, mb / hf1, mb / hf1_cpu, mb / hfn, hf1_cpu / ours_cpu,
                    hfn / ours))
        finally:
            os.unlink(lines_path)


if __name__ == "__main__":
    main()
