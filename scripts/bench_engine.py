#!/usr/bin/env python3
"""Prefill and decode speed of srt-generate against llama.cpp (llama-cpp-python) on the same
GGUF, the same thread count, in the same run, rounds interleaved so both see the same machine.

    scripts/bench_engine.py [--model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf]
                            [--threads 2] [--prompt-tokens 128] [--decode-tokens 64] [--rounds 3]

Both engines get the same prompt ids (a fixed pseudo-random sequence), prefill it in one batch
and then decode greedily; the best round of each is kept. Prints tok/s and ratios
(srt / llama.cpp); >= 1.0 means srt is faster.
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prompt_ids(n, vocab=49152):
    x, ids = 12345, [1]
    while len(ids) < n:
        x = (x * 1103515245 + 12345) % (1 << 31)
        ids.append(100 + x % (vocab - 200))
    return ids


def run_srt(binary, model, ids, n_decode, threads, extra):
    cmd = [binary, "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", str(n_decode + 1),
           "--ignore-eos", "--ids", "--threads", str(threads), "--batch", str(max(512, len(ids)))] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    pre = re.search(r"prefill: (\d+) tokens in ([\d.]+)s", out.stderr)
    dec = re.search(r"decode: (\d+) tokens in ([\d.]+)s", out.stderr)
    if not pre or not dec:
        sys.exit("bench_engine: cannot parse srt-generate output:\n" + out.stderr)
    return int(pre.group(1)) / float(pre.group(2)), int(dec.group(1)) / float(dec.group(2)), out.stdout.split()


def make_llama(model, threads, n_ctx, n_batch):
    import llama_cpp
    return llama_cpp.Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                           n_batch=n_batch, n_ubatch=n_batch, verbose=False, logits_all=False)


def last_logits(llm):
    # with logits_all=False llama-cpp-python keeps only llama.cpp's own buffer (last row)
    import numpy as np
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))


def run_llama(llm, ids, n_decode):
    import numpy as np
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t_pre = time.perf_counter() - t0
    tok = int(np.argmax(last_logits(llm)))
    out = [tok]
    t0 = time.perf_counter()
    for _ in range(n_decode):
        llm.eval([tok])
        tok = int(np.argmax(last_logits(llm)))
        out.append(tok)
    t_dec = time.perf_counter() - t0
    return len(ids) / t_pre, n_decode / t_dec, [str(t) for t in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--srt", default=os.path.join(ROOT, "build/bin/srt-generate"))
    ap.add_argument("--srt-args", default="", help="extra srt-generate arguments, e.g. --precise")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit(f"bench_engine: {a.model} missing (run scripts/fetch-model.sh)")
    if not os.access(a.srt, os.X_OK):
        sys.exit(f"bench_engine: {a.srt} missing (run make)")
    ids = prompt_ids(a.prompt_tokens)
    try:
        llm = make_llama(a.model, a.threads, a.prompt_tokens + a.decode_tokens + 8, max(512, a.prompt_tokens))
    except ImportError:
        llm = None
        print("bench_engine: llama-cpp-python is not installed (pip install llama-cpp-python); srt figures only")
    best = {"srt": [0, 0], "llama.cpp": [0, 0]}
    tokens = {}
    for _ in range(a.rounds):
        p, d, toks = run_srt(a.srt, a.model, ids, a.decode_tokens, a.threads, a.srt_args.split())
        best["srt"] = [max(best["srt"][0], p), max(best["srt"][1], d)]
        tokens["srt"] = toks
        if llm is not None:
            p, d, toks = run_llama(llm, ids, a.decode_tokens)
            best["llama.cpp"] = [max(best["llama.cpp"][0], p), max(best["llama.cpp"][1], d)]
            tokens["llama.cpp"] = toks
    print(f"model {os.path.basename(a.model)}, {a.threads} threads, prompt {a.prompt_tokens} tokens, "
          f"decode {a.decode_tokens} tokens, best of {a.rounds} interleaved rounds")
    print(f"{'engine':<10} {'prefill tok/s':>14} {'decode tok/s':>13}")
    for name in ("srt", "llama.cpp"):
        if name == "llama.cpp" and llm is None:
            continue
        print(f"{name:<10} {best[name][0]:>14.1f} {best[name][1]:>13.1f}")
    if llm is not None:
        print(f"ratio srt/llama.cpp: prefill {best['srt'][0] / best['llama.cpp'][0]:.2f}x "
              f"(target >= 0.8), decode {best['srt'][1] / best['llama.cpp'][1]:.2f}x (target >= 1.0)")
        same = sum(1 for x, y in zip(tokens["srt"], tokens["llama.cpp"]) if x == y)
        print(f"greedy tokens identical for the first {next((i for i, (x, y) in enumerate(zip(tokens['srt'], tokens['llama.cpp'])) if x != y), same)} "
              f"of {len(tokens['srt'])}")


if __name__ == "__main__":
    main()
