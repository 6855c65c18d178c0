#!/usr/bin/env python3
"""GPU decode benchmarks (run by scripts/gpu-check bench on a GPU machine).

1. Batch-1 decode tokens/s as a fraction of the HBM roofline: build/t/gpu/gpu_generate --bench
   (the engine's ops on the CUDA backend, CUDA graphs, greedy sampling on the device) counts the
   bytes one decode step must read (every GEMM weight in bf16 once, norms, one embedding row per
   sequence, each sequence's K and V over all layers) and divides by --hbm GB/s (H200: 4800).
   Targets (issue 7): >= 70% for the 8B shape, >= 50% for the 0.5B shape.
2. Throughput at batch 1..256 against HF transformers' generate on the same weights (bf16,
   sdpa attention, greedy, static prompt of --prompt random tokens). HF decode tokens/s is
   B * (N - 1) / (t(N new tokens) - t(1 new token)), i.e. prefill excluded as in ours.
   Target: >= 10x HF at batch 64.

    python3 scripts/bench_gpu.py [--models DIR] [--only NAME] [--batches 1,2,4,...] [--prompt 128]
                                 [--new 64] [--no-hf] [--json OUT.json] [--md OUT.md]

Models come from scripts/make_gpu_models.py (DIR default <repo>/.cache/gpu-models).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(ROOT, "build", "t", "gpu", "gpu_generate")
# ours runs while HF holds its own copy of the model on the same GPU: a 45% pool leaves room


def ours(model, batch, prompt, new, graphs=True, hbm=4800.0, timeout=600):
    cmd = [GEN, model, "--device", "cuda", "--bench", "--batch", str(batch), "--prompt", str(prompt),
           "--n", str(new), "--hbm", str(hbm), "--kv", "bf16", "--mem", "0.45"]
    if not graphs:
        cmd.append("--no-graphs")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


class HF:
    def __init__(self, path):
        import torch
        from transformers import AutoModelForCausalLM
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda",
                                                          attn_implementation="sdpa")
        self.model.eval()
        self.vocab = self.model.config.vocab_size

    def _gen(self, ids, n):
        torch = self.torch
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                do_sample=False, pad_token_id=0, eos_token_id=None)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    def decode_tok_s(self, batch, prompt, new):
        torch = self.torch
        g = torch.Generator(device="cuda").manual_seed(batch)
        ids = torch.randint(0, self.vocab, (batch, prompt), device="cuda", generator=g)
        self._gen(ids, 2)   # warm-up
        t1 = min(self._gen(ids, 1) for _ in range(2))
        tn = self._gen(ids, new)
        return batch * (new - 1) / max(tn - t1, 1e-9)

    def close(self):
        del self.model
        self.torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=os.path.join(ROOT, ".cache", "gpu-models"))
    ap.add_argument("--only")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--roofline-new", type=int, default=256)
    ap.add_argument("--hbm", type=float, default=4800.0, help="GB/s (H200 datasheet 4800)")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "gpu-bench.json"))
    ap.add_argument("--md", default=os.path.join(ROOT, "build", "gpu-bench.md"))
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    names = [n for n in ("qwen2.5-0.5b", "llama-3.1-8b") if not a.only or n == a.only]
    results, md, failed = {}, [], 0
    for name in names:
        path = os.path.join(a.models, name)
        if not os.path.exists(os.path.join(path, "config.json")):
            print(f"{name}: missing at {path} (run scripts/make_gpu_models.py)", file=sys.stderr)
            failed = 1
            continue
        r = results[name] = {"roofline": None, "graphs_off": None, "batches": []}
        try:
            r["roofline"] = ours(path, 1, a.prompt, a.roofline_new, hbm=a.hbm)
            r["graphs_off"] = ours(path, 1, a.prompt, a.roofline_new, graphs=False, hbm=a.hbm)
        except Exception as e:   # noqa: BLE001 - report and go on with the other model
            print(f"{name}: batch-1 run failed: {e}", file=sys.stderr)
            failed = 1
        if r["roofline"]:
            f = r["roofline"]["roofline_fraction"]
            target = 0.7 if "8b" in name else 0.5
            md.append(f"| {name} | batch 1 decode | {r['roofline']['decode_tok_s']:.1f} tok/s | "
                      f"{r['roofline']['bytes_per_step'] / 1e9:.3f} GB/token | {100 * f:.1f}% of {a.hbm:.0f} GB/s "
                      f"(target {100 * target:.0f}%) | graphs off: {r['graphs_off']['decode_tok_s'] if r['graphs_off'] else 'n/a'} tok/s |")
            print(md[-1], flush=True)
        hf = None
        if not a.no_hf:
            try:
                hf = HF(path)
            except Exception as e:   # noqa: BLE001
                print(f"{name}: HF load failed: {e}", file=sys.stderr)
                failed = 1
        for b in batches:
            row = {"batch": b}
            try:
                row["ours"] = ours(path, b, a.prompt, a.new, hbm=a.hbm)["decode_tok_s"]
            except Exception as e:   # noqa: BLE001
                row["ours_error"] = str(e)[-500:]
                failed = 1
            if hf:
                try:
                    row["hf"] = hf.decode_tok_s(b, a.prompt, a.new)
                except Exception as e:   # noqa: BLE001
                    row["hf_error"] = str(e)[-500:]
            if "ours" in row and "hf" in row:
                row["speedup"] = row["ours"] / row["hf"]
            r["batches"].append(row)
            line = (f"| {name} | batch {b} | ours {row.get('ours', float('nan')):.1f} tok/s | "
                    f"HF {row.get('hf', float('nan')):.1f} tok/s | x{row.get('speedup', float('nan')):.2f} |")
            md.append(line)
            print(line, flush=True)
        if hf:
            hf.close()
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"prompt": a.prompt, "new": a.new, "hbm_gbs": a.hbm, "results": results}, f, indent=1)
    with open(a.md, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {a.json} and {a.md}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
