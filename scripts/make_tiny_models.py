#!/usr/bin/env python3
"""Write tiny random HF checkpoints for the fast tests: tiny-llama, tiny-qwen2, tiny-qwen3, tiny-qwen2-tools.

Each lands in $SRT_MODEL_DIR/<name>/ (default <repo>/.cache/models) as a directory that HF
transformers loads as-is: config.json, generation_config.json, safetensors weights and the
SmolLM2 tokenizer files (vocab 49152) from t/fixtures/tokenizers/smollm2/.

The three models are chosen so that together they cover every loader and architecture path
the engine has to get right:

  tiny-llama  LlamaForCausalLM, F32, sharded into two files + model.safetensors.index.json,
              llama3 rope_scaling, GQA 4:2, untied lm_head, 3 layers, config.json in the
              legacy layout (top-level rope_theta + rope_scaling, no head_dim) that real hub
              checkpoints such as Llama-3.2 use.
  tiny-qwen2  Qwen2ForCausalLM, BF16 (round-to-nearest-even), q/k/v biases, tied embeddings
              (no lm_head.weight in the file), GQA 4:2, config.json as transformers 5 writes
              it (rope_parameters).
  tiny-qwen3  Qwen3ForCausalLM, F16, per-head q_norm/k_norm, head_dim 24 != hidden/heads (64/8 = 8),
              GQA 8:2, config.json as transformers 5 writes it.
  tiny-qwen2-tools  tiny-qwen2's weights with Qwen2.5's chat template (t/fixtures/templates/qwen2.5.json,
              the real one, which teaches Hermes tool calls) in its own tokenizer_config.json: a model
              whose template alone decides the tool-call format (t/141-tools.t, no srt_chat_template).

rms_norm_eps and rope_theta are non-default so a loader that ignores them gets wrong logits.

Deterministic: numpy's default_rng with a fixed seed per model, and the safetensors files are
written byte for byte by this script (sorted header, fixed metadata), so two runs give
identical files. Needs numpy only (no torch), so CI regenerates the models in seconds.

Weight scales (greedy golden tests need decisive logits; scripts/make_golden.py measures and
prints the top1-top2 margins it sees, and records the smallest per case):
  * logit_std: the final RMSNorm output has rms ~1, so output rows of std logit_std/sqrt(hidden)
    give logits of std ~logit_std (32 here).
  * row_spread: output rows get a log-normal norm factor, a few "frequent" tokens as in trained
    models, so the winner stands further from the runner-up than among 49152 equal rows.
  * out_gain (tiny-qwen2): with tied embeddings the input token's own embedding would dominate
    the residual stream and the model would just repeat its input; o_proj/down_proj are scaled
    up so that attention and MLP outputs dominate instead.
  * the seeds were picked among a few so that every case's smallest greedy margin is > 0.05
    with the prompts of make_golden.py.
"""
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.environ.get("SRT_MODEL_DIR", os.path.join(ROOT, ".cache", "models"))
TOKENIZER_DIR = os.environ.get("SRT_TOKENIZER_DIR",
                               os.path.join(ROOT, "t", "fixtures", "tokenizers", "smollm2"))
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]  # required
TOKENIZER_OPTIONAL = ["special_tokens_map.json", "chat_template.jinja"]
TEMPLATE_DIR = os.path.join(ROOT, "t", "fixtures", "templates")

VOCAB = 49152
BOS_ID, EOS_ID = 1, 2  # <|im_start|>, <|im_end|> in the SmolLM2 tokenizer

# Written into config.json exactly where transformers puts it; bumping it changes no weights.
TRANSFORMERS_V5 = "5.23.0"
TRANSFORMERS_V4 = "4.46.3"


# ---------------------------------------------------------------- dtype conversion

def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest, ties to even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    if np.any(np.isnan(x)):
        raise ValueError("NaN in weights")
    rounding = ((u >> 16) & 1) + np.uint32(0x7FFF)
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------- safetensors writer

# The safetensors layout: u64 little-endian header size, a JSON header mapping each tensor
# name to dtype/shape/[begin,end) offsets into the data that follows, then the raw data.
# Written by hand because numpy has no bfloat16 and the library's numpy API needs one.

def tensor_bytes(arr, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(arr, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(arr, dtype=np.float32).astype("<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(arr).astype("<u2").tobytes()
    raise ValueError(dtype)


def write_safetensors(path, tensors, dtype):
    """tensors: dict name -> float32 array. Written in name order, 8-byte aligned data start."""
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        data = tensor_bytes(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return offset


def stored_values(arr, dtype):
    """The float32 values a reader gets back after the dtype round trip."""
    if dtype == "F32":
        return arr.astype(np.float32)
    if dtype == "F16":
        return arr.astype(np.float16).astype(np.float32)
    return bf16_bits_to_f32(f32_to_bf16_bits(arr))


# ---------------------------------------------------------------- weights

def make_weights(rng, spec):
    """Random weights with the HF parameter names of a Llama/Qwen2/Qwen3 decoder."""
    H, I, L = spec["hidden"], spec["intermediate"], spec["layers"]
    nh, nkv, hd = spec["heads"], spec["kv_heads"], spec["head_dim"]
    V = VOCAB

    def lin(out_f, in_f, gain=1.0):
        # std 1/sqrt(fan_in) keeps each projection's output at the scale of its input.
        return (rng.standard_normal((out_f, in_f)) * gain / np.sqrt(in_f)).astype(np.float32)

    def norm(n):
        # Not all ones: a loader that drops the norm weight must produce different logits.
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {}
    w["model.embed_tokens.weight"] = rng.standard_normal((V, H)).astype(np.float32)
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "self_attn.q_proj.weight"] = lin(nh * hd, H, 2.0)  # sharper attention patterns
        w[p + "self_attn.k_proj.weight"] = lin(nkv * hd, H, 2.0)
        w[p + "self_attn.v_proj.weight"] = lin(nkv * hd, H)
        w[p + "self_attn.o_proj.weight"] = lin(H, nh * hd, spec["out_gain"])
        if spec["qkv_bias"]:
            w[p + "self_attn.q_proj.bias"] = (0.5 * rng.standard_normal(nh * hd)).astype(np.float32)
            w[p + "self_attn.k_proj.bias"] = (0.5 * rng.standard_normal(nkv * hd)).astype(np.float32)
            w[p + "self_attn.v_proj.bias"] = (0.5 * rng.standard_normal(nkv * hd)).astype(np.float32)
        if spec["qk_norm"]:
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        w[p + "mlp.gate_proj.weight"] = lin(I, H)
        w[p + "mlp.up_proj.weight"] = lin(I, H)
        w[p + "mlp.down_proj.weight"] = lin(H, I, spec["out_gain"])
    w["model.norm.weight"] = norm(H)
    # Output rows of unequal norm (a few "frequent" tokens, as in trained models) make the
    # winner stand further from the runner-up than 49152 equal-norm rows would.
    row_scale = np.exp(spec["row_spread"] * rng.standard_normal((V, 1))).astype(np.float32)
    out_scale = np.float32(spec["logit_std"] / np.sqrt(H))
    if not spec["tied"]:
        w["lm_head.weight"] = (rng.standard_normal((V, H)) * out_scale * row_scale).astype(np.float32)
    else:
        # Tied: the embedding is the output matrix, so it carries the logit scale. Inputs are
        # fine with it since every layer starts with an RMSNorm.
        w["model.embed_tokens.weight"] *= out_scale * row_scale
    return w


# ---------------------------------------------------------------- configs

def layer_types(n):
    return ["full_attention"] * n


def llama_config(s):
    # Legacy (transformers 4.x / hub) layout: top-level rope_theta and rope_scaling, no
    # head_dim. transformers 5 still reads it; real Llama-3.x checkpoints look like this.
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "hidden_act": "silu",
        "hidden_size": s["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": s["intermediate"],
        "max_position_embeddings": 2048,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": s["heads"],
        "num_hidden_layers": s["layers"],
        "num_key_value_heads": s["kv_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": s["rms_norm_eps"],
        # original_max_position_embeddings is small so that, with head_dim 16, the rotary
        # frequencies fall in all three llama3 bands (kept, smoothed, divided by factor).
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 64,
            "rope_type": "llama3",
        },
        "rope_theta": s["rope_theta"],
        "tie_word_embeddings": s["tied"],
        "torch_dtype": "float32",
        "transformers_version": TRANSFORMERS_V4,
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def qwen2_config(s):
    # As transformers 5 writes Qwen2Config.save_pretrained().
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "dtype": "bfloat16",
        "eos_token_id": EOS_ID,
        "hidden_act": "silu",
        "hidden_size": s["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": s["intermediate"],
        "layer_types": layer_types(s["layers"]),
        "max_position_embeddings": 4096,
        "max_window_layers": s["layers"],
        "model_type": "qwen2",
        "num_attention_heads": s["heads"],
        "num_hidden_layers": s["layers"],
        "num_key_value_heads": s["kv_heads"],
        "pad_token_id": None,
        "rms_norm_eps": s["rms_norm_eps"],
        "rope_parameters": {"rope_theta": s["rope_theta"], "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": s["tied"],
        "transformers_version": TRANSFORMERS_V5,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }


def qwen3_config(s):
    # As transformers 5 writes Qwen3Config.save_pretrained().
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "dtype": "float16",
        "eos_token_id": EOS_ID,
        "head_dim": s["head_dim"],
        "hidden_act": "silu",
        "hidden_size": s["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": s["intermediate"],
        "layer_types": layer_types(s["layers"]),
        "max_position_embeddings": 4096,
        "max_window_layers": s["layers"],
        "model_type": "qwen3",
        "num_attention_heads": s["heads"],
        "num_hidden_layers": s["layers"],
        "num_key_value_heads": s["kv_heads"],
        "pad_token_id": None,
        "rms_norm_eps": s["rms_norm_eps"],
        "rope_parameters": {"rope_theta": s["rope_theta"], "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": s["tied"],
        "transformers_version": TRANSFORMERS_V5,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }


MODELS = {
    "tiny-llama": dict(seed=1001, config=llama_config, dtype="F32", shards=2,
                       hidden=64, intermediate=160, layers=3, heads=4, kv_heads=2, head_dim=16,
                       rms_norm_eps=1e-5, rope_theta=50000.0, tied=False,
                       qkv_bias=False, qk_norm=False, logit_std=32.0, out_gain=1.0, row_spread=0.3),
    "tiny-qwen2": dict(seed=2002, config=qwen2_config, dtype="BF16", shards=1,
                       hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16,
                       rms_norm_eps=1e-5, rope_theta=1000000.0, tied=True,
                       qkv_bias=True, qk_norm=False, logit_std=32.0, out_gain=32.0, row_spread=0.0),
    "tiny-qwen3": dict(seed=1003, config=qwen3_config, dtype="F16", shards=1,
                       hidden=64, intermediate=192, layers=2, heads=8, kv_heads=2, head_dim=24,
                       rms_norm_eps=3e-6, rope_theta=20000.0, tied=False,
                       qkv_bias=False, qk_norm=True, logit_std=32.0, out_gain=1.0, row_spread=0.3),
}
MODELS["tiny-qwen2-tools"] = dict(MODELS["tiny-qwen2"], chat_template="qwen2.5")


def dump_json(path, obj):
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def shard_plan(names, shards):
    """Split names into `shards` groups by layer: embeddings + first layers first, the rest
    (final norm, lm_head) last, as HF's size-based sharding does for a small model."""
    if shards == 1:
        return [list(names)]
    ordered = sorted(names, key=lambda n: (0 if "embed_tokens" in n else
                                           1 + int(n.split(".")[2]) if n.startswith("model.layers.")
                                           else 10**6, n))
    per = (len(ordered) + shards - 1) // shards
    return [ordered[i:i + per] for i in range(0, len(ordered), per)]


def write_model(name, spec):
    out = os.path.join(MODEL_DIR, name)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):  # drop weights of an older layout (e.g. shard count change)
        if f.endswith(".safetensors") or f == "model.safetensors.index.json":
            os.remove(os.path.join(out, f))

    rng = np.random.default_rng(spec["seed"])
    w = make_weights(rng, spec)
    dtype = spec["dtype"]

    groups = shard_plan(list(w), spec["shards"])
    if len(groups) == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), w, dtype)
    else:
        weight_map = {}
        total = 0
        n = len(groups)
        for k, names in enumerate(groups):
            fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
            total += write_safetensors(os.path.join(out, fname), {t: w[t] for t in names}, dtype)
            weight_map.update({t: fname for t in names})
        dump_json(os.path.join(out, "model.safetensors.index.json"),
                  {"metadata": {"total_size": total}, "weight_map": weight_map})

    dump_json(os.path.join(out, "config.json"), spec["config"](spec))
    gen_version = TRANSFORMERS_V4 if spec["config"] is llama_config else TRANSFORMERS_V5
    dump_json(os.path.join(out, "generation_config.json"),
              {"_from_model_config": True, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
               "transformers_version": gen_version})

    for f in TOKENIZER_FILES + TOKENIZER_OPTIONAL:
        src = os.path.join(TOKENIZER_DIR, f)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(out, f))
    if spec.get("chat_template"):
        # the template in tokenizer_config.json, and no chat_template.jinja to take precedence
        with open(os.path.join(TEMPLATE_DIR, spec["chat_template"] + ".json"), encoding="utf-8") as f:
            source = json.load(f)["source"]
        cfg_path = os.path.join(out, "tokenizer_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg["chat_template"] = source
        dump_json(cfg_path, cfg)
        if os.path.exists(os.path.join(out, "chat_template.jinja")):
            os.remove(os.path.join(out, "chat_template.jinja"))
    nparams = sum(a.size for a in w.values())
    print(f"make_tiny_models: {out}: {dtype}, {len(groups)} file(s), {nparams} parameters")


def inputs_digest():
    """Everything a model's files depend on: this script and the tokenizer files."""
    h = hashlib.sha256()
    templates = sorted({s["chat_template"] for s in MODELS.values() if s.get("chat_template")})
    for path in [os.path.abspath(__file__)] + [os.path.join(TOKENIZER_DIR, f)
                                               for f in TOKENIZER_FILES + TOKENIZER_OPTIONAL] \
            + [os.path.join(TEMPLATE_DIR, t + ".json") for t in templates]:
        if os.path.exists(path):
            h.update(os.path.basename(path).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    h.update(np.__version__.encode())
    return h.hexdigest()


def main():
    args = sys.argv[1:]
    force = "--force" in args
    names = [a for a in args if a != "--force"] or list(MODELS)
    missing = [f for f in TOKENIZER_FILES if not os.path.exists(os.path.join(TOKENIZER_DIR, f))]
    if missing:
        sys.exit(f"make_tiny_models: missing {', '.join(missing)} in {TOKENIZER_DIR}")
    digest = inputs_digest()
    for n in names:
        if n not in MODELS:
            sys.exit(f"make_tiny_models: unknown model {n!r}; known: {', '.join(MODELS)}")
        # Skip up-to-date models so `make test` does not rewrite files other runs may have mapped.
        stamp = os.path.join(MODEL_DIR, n, ".stamp")
        if not force and os.path.exists(stamp) and open(stamp).read().strip() == digest:
            print(f"make_tiny_models: {os.path.join(MODEL_DIR, n)} up to date")
            continue
        if os.path.exists(stamp):
            os.remove(stamp)
        write_model(n, MODELS[n])
        with open(stamp, "w") as f:
            f.write(digest + "\n")


if __name__ == "__main__":
    main()
