#!/usr/bin/env python3
"""Tensor parallelism on the CPU communicator: decode tokens/s at tp=1, 2, 4 and the cost of the
collectives per decode step: 2 all-reduces per layer + 1 for the vocab-parallel embedding, and
1 all-gather of the lm_head logit slices (build/bin/srt-bench-tp; run
`make build/bin/srt-bench-tp` first).

The golden models' heads do not divide by 4 (tiny-llama 4 heads / 2 KV heads; SmolLM2 9 / 3),
so tp=1/2/4 run on a random Llama written here in SmolLM2's width: hidden 576, 8 heads / 4 KV
heads of 64 (SmolLM2 has 9 / 3), ffn 1536, 8 layers, vocab 49152, F32. Random weights: only
speed is measured; correctness of tp=2/3/4 is t/unit/test_tp_group and t/unit/test_model_tp.

    python3 scripts/bench_tp.py [--steps 64] [--batch 1] [--threads 1] [--tp 1,2,4]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_model(d):
    H, heads, kvh, hd, ffn, layers, vocab = 576, 8, 4, 64, 1536, 8, 49152
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(8)

    def lin(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    t = {"model.embed_tokens.weight": (rng.standard_normal((vocab, H)) * 0.5).astype(np.float32),
         "model.norm.weight": np.ones(H, np.float32), "lm_head.weight": lin(vocab, H)}
    for l in range(layers):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = np.ones(H, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(H, np.float32)
        t[p + "self_attn.q_proj.weight"] = lin(heads * hd, H)
        t[p + "self_attn.k_proj.weight"] = lin(kvh * hd, H)
        t[p + "self_attn.v_proj.weight"] = lin(kvh * hd, H)
        t[p + "self_attn.o_proj.weight"] = lin(H, heads * hd)
        t[p + "mlp.gate_proj.weight"] = lin(ffn, H)
        t[p + "mlp.up_proj.weight"] = lin(ffn, H)
        t[p + "mlp.down_proj.weight"] = lin(H, ffn)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kvh, "head_dim": hd, "vocab_size": vocab, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "max_position_embeddings": 2048, "tie_word_embeddings": False,
           "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per rank")
    ap.add_argument("--tp", default="1,2,4")
    ap.add_argument("--model", default=None, help="a model instead of the generated one")
    a = ap.parse_args()
    model = a.model or os.path.join(os.environ.get("SRT_MODEL_DIR", os.path.join(ROOT, ".cache/models")),
                                    "bench-tp-llama")
    if not a.model:
        write_model(model)
    tool = os.path.join(ROOT, "build/bin/srt-bench-tp")
    print(f"# model {model}, {os.cpu_count()} CPUs")
    for tp in a.tp.split(","):
        r = subprocess.run([tool, model, tp, "--steps", str(a.steps), "--batch", str(a.batch),
                            "--threads", str(a.threads)], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr.strip(), file=sys.stderr)
            return 1
        print(r.stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
