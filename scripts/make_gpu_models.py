#!/usr/bin/env python3
"""Random-weight HF checkpoints in the shapes of Qwen2.5-0.5B and Llama-3.1-8B, made ON THE GPU
machine (torch + transformers are installed there; nothing is downloaded), for the decode
benchmarks of scripts/bench_gpu.py.

    python3 scripts/make_gpu_models.py [--out DIR] [--only qwen2.5-0.5b|llama-3.1-8b]

DIR defaults to <repo>/.cache/gpu-models; each model lands in DIR/<name>/ as bf16 safetensors
plus config.json, loadable by HF transformers and by srt_model_load. Weights are N(0, 0.02)
from a fixed seed (HF's own initializer), generated on the device so the 16 GB of the 8B shape
take seconds; a model already present (config.json + .stamp) is kept.
"""
import argparse
import json
import os
import sys
import time

SHAPES = {
    "qwen2.5-0.5b": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
        max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        hidden_act="silu", bos_token_id=151643, eos_token_id=151643, use_sliding_window=False,
        torch_dtype="bfloat16"),
    "llama-3.1-8b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        hidden_act="silu", bos_token_id=128000, eos_token_id=128001, head_dim=128,
        rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192, rope_type="llama3"),
        torch_dtype="bfloat16"),
}


def make(name, out_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = os.path.join(out_dir, name)
    if os.path.exists(os.path.join(path, ".stamp")):
        print(f"{name}: present at {path}")
        return path
    t0 = time.time()
    spec = dict(SHAPES[name])
    cfg = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(1234)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True, max_shard_size="4GB")
    n = sum(p.numel() for p in model.parameters())
    with open(os.path.join(path, ".stamp"), "w") as f:
        json.dump({"params": n, "seconds": round(time.time() - t0, 1)}, f)
    print(f"{name}: {n / 1e9:.2f} B parameters written to {path} in {time.time() - t0:.1f} s")
    del model
    torch.cuda.empty_cache()
    return path


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(root, ".cache", "gpu-models"))
    ap.add_argument("--only", choices=sorted(SHAPES))
    a = ap.parse_args()
    for name in SHAPES:
        if a.only and name != a.only:
            continue
        make(name, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
