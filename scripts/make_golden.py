#!/usr/bin/env python3
"""Write the golden fixtures that the engine's numerical tests compare against.

The reference is HF transformers + torch from PyPI, run in float32 with eager attention.
Outputs (committed; the test suite itself never needs torch):

  t/fixtures/golden/<name>.json      for smollm2, tiny-llama, tiny-qwen2, tiny-qwen3:
      {"model", "path" (relative to SRT_MODEL_DIR), "transformers_version", "torch_version",
       "cases": [{"prompt", "input_ids", "top_ids" (20, best first), "top_logits" (20),
                  "greedy" (32 ids), "greedy_min_margin"}]}
  t/fixtures/golden/modules_<arch>.json   [[name, class_name], ...] of model.named_modules()
      (root excluded) for llama, qwen2 and qwen3.

Conventions the tests rely on:
  * input_ids are the prompt tokenized raw: no chat template, no special tokens added.
  * top_ids/top_logits are the logits at the last prompt position.
  * greedy is a pure argmax continuation of 32 tokens with no EOS handling at all (EOS is an
    ordinary token; the engine equivalent is greedy with ignore_eos). Ties cannot matter:
    greedy_min_margin is the smallest top1 - top2 logit gap over the 32 argmax steps.
  * The last two cases of every model share a long prefix with an earlier case (for the
    radix cache, scheduler and tensor-parallel tests).

SmolLM2 is loaded from the Q4_1 GGUF through transformers' gguf_file= support, which
dequantizes every weight to float32; the tiny models come from scripts/make_tiny_models.py.
Run scripts/fetch-model.sh and scripts/make_tiny_models.py first.
"""
import json
import os
import sys
import tempfile

import numpy as np
import tokenizers
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.environ.get("SRT_MODEL_DIR", os.path.join(ROOT, ".cache", "models"))
OUT_DIR = os.path.join(ROOT, "t", "fixtures", "golden")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOP_K = 20
NEW_TOKENS = 32

# Raw text prompts of varied lengths (1 token to ~200 tokens), written for this project.
STORY = (
    "The lighthouse keeper had not spoken to anyone in eleven days when the supply boat finally "
    "appeared on the horizon. She watched it from the gallery, a small grey shape rising and "
    "falling with the swell, and tried to remember the words she would need: thank you, the "
    "generator is fine, the second lamp needs a new wick, yes I am well. The boatman was a "
    "young man she had never seen before. He tied up at the iron ladder, passed up three crates "
    "of tinned food, a sack of flour, two cans of paraffin and a bundle of letters held together "
    "with string. Then he asked her, with real curiosity, what she did all day when the weather "
    "was calm and there was nothing to repair. She thought about the question for a long time. "
    "Below them the water moved against the rocks with a patient, hollow sound, and a pair of "
    "gulls argued over something on the landing stage. The boatman waited, shading his eyes, "
    "as if the answer might be written somewhere on the white wall of the tower."
)
TECH = (
    "A paged key-value cache stores the attention keys and values of every request in fixed-size "
    "blocks drawn from one shared pool. Because a sequence only holds the blocks it has filled, "
    "memory is not reserved for the longest possible output, and many more requests fit on the "
    "device at once."
)
# Chosen so that SmolLM2's 32-token greedy runs are decisive (smallest top1-top2 gap > 0.1
# on every case), leaving room for quantized arithmetic in the engine.
PROMPTS = [
    "Hi",
    "1, 2, 3, 4, 5, 6,",
    "def add(a, b):\n    return",
    "Dear Sir or Madam,\n\nI am writing to",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    TECH + "\n\nQuestion: What does a paged cache store?\nAnswer:",
    STORY + "\n\nQuestion: What did the boatman bring?\nAnswer:",
]
# Cases that share a long prefix (TECH or STORY) with a case above, not with each other.
SHARED_PREFIX = [
    STORY + "\n\nSummary:",
    TECH + " When two requests begin with the same tokens, the scheduler can",
]

MODELS = [
    # name, path relative to MODEL_DIR, arch tag for modules_<arch>.json (None: already covered)
    ("smollm2", GGUF, None),
    ("tiny-llama", "tiny-llama", "llama"),
    ("tiny-qwen2", "tiny-qwen2", "qwen2"),
    ("tiny-qwen3", "tiny-qwen3", "qwen3"),
]


def load(name, rel):
    """Returns (encode, model); encode(text) -> ids, raw (no special tokens added)."""
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    if rel.endswith(".gguf"):
        tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=rel)
        model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=rel, **kw)
        encode = lambda text: tok(text, add_special_tokens=False).input_ids
    else:
        path = os.path.join(MODEL_DIR, rel)
        # tokenizer.json through the tokenizers library, which is what the engine implements:
        # AutoTokenizer would pick a class by model_type (Qwen2Tokenizer for qwen2) that
        # replaces the file's pre-tokenizer and splits some text differently.
        tok = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, **kw)
        # A missing tensor would be randomly initialised and silently poison the fixtures.
        bad = {k: v for k, v in info.items() if v}
        if bad:
            sys.exit(f"make_golden: {name}: loading {path} reported {bad}")
        encode = lambda text: tok.encode(text, add_special_tokens=False).ids
    model.eval()
    for p in model.parameters():
        if p.dtype != torch.float32:
            sys.exit(f"make_golden: {name}: parameter in {p.dtype}, expected float32")
    return encode, model


def margin(logits):
    top2 = torch.topk(logits, 2).values
    return float(top2[0] - top2[1])


@torch.no_grad()
def run_case(model, input_ids):
    ids = torch.tensor([input_ids], dtype=torch.long)
    out = model(input_ids=ids, use_cache=True)
    last = out.logits[0, -1].float()
    top = torch.topk(last, TOP_K)
    past = out.past_key_values

    greedy, margins = [], []
    logits = last
    for step in range(NEW_TOKENS):
        nxt = int(torch.argmax(logits))
        margins.append(margin(logits))
        greedy.append(nxt)
        if step + 1 == NEW_TOKENS:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
    return {
        "top_ids": [int(i) for i in top.indices],
        "top_logits": [round(float(v), 6) for v in top.values],
        "greedy": greedy,
        "greedy_min_margin": round(min(margins), 6),
    }, margins


@torch.no_grad()
def check_against_generate(model, input_ids, greedy):
    """Our KV-cached argmax loop must agree with transformers' own generate()."""
    gen = model.generate(torch.tensor([input_ids]), max_new_tokens=NEW_TOKENS,
                         min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                         pad_token_id=0)
    got = gen[0, len(input_ids):].tolist()
    if got != greedy:
        sys.exit(f"make_golden: argmax loop {greedy} disagrees with generate() {got}")


def check_config_roundtrip(rel):
    """config.json written by make_tiny_models.py must read back as the intended config."""
    path = os.path.join(MODEL_DIR, rel)
    with open(os.path.join(path, "config.json")) as f:
        ours = json.load(f)
    cfg = AutoConfig.from_pretrained(path)
    with tempfile.TemporaryDirectory() as tmp:
        cfg.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            d = json.load(f)
    if "rope_parameters" in ours:  # transformers 5 layout: must match save_pretrained output
        skip = {"transformers_version"}
        diff = {k for k in set(ours) | set(d) if k not in skip and ours.get(k) != d.get(k)}
        if diff:
            sys.exit(f"make_golden: {rel}/config.json differs from transformers' own output in {sorted(diff)}")
    else:  # legacy layout: transformers must fold it into the same rope parameters
        want = dict(ours["rope_scaling"], rope_theta=ours["rope_theta"])
        if cfg.rope_parameters != want:
            sys.exit(f"make_golden: {rel}: rope parameters read back as {cfg.rope_parameters}")


def dump(path, obj):
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)


def dump_modules(path, model):
    rows = [[n, type(m).__name__] for n, m in model.named_modules() if n]
    with open(path + ".part", "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    os.replace(path + ".part", path)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    os.makedirs(OUT_DIR, exist_ok=True)
    only = set(sys.argv[1:])
    summary = []
    ref_ids = None  # token ids of the prompts under the GGUF tokenizer, to cross-check

    for name, rel, arch in MODELS:
        if only and name not in only:
            continue
        if not os.path.exists(os.path.join(MODEL_DIR, rel)):
            sys.exit(f"make_golden: {os.path.join(MODEL_DIR, rel)} missing; run scripts/install-deps.sh")
        if not rel.endswith(".gguf"):
            check_config_roundtrip(rel)
        encode, model = load(name, rel)

        cases, all_margins = [], []
        prompts = PROMPTS + SHARED_PREFIX
        ids_list = [encode(p) for p in prompts]
        if ref_ids is None:
            ref_ids = ids_list
        elif ids_list != ref_ids:
            sys.exit(f"make_golden: {name}: tokenizer.json disagrees with the GGUF tokenizer")
        for prompt, input_ids in zip(prompts, ids_list):
            res, margins = run_case(model, input_ids)
            all_margins += margins
            cases.append({"prompt": prompt, "input_ids": input_ids, **res})
        check_against_generate(model, cases[1]["input_ids"], cases[1]["greedy"])

        # Prefix cases must really share a long prefix with an earlier case.
        for c in cases[len(PROMPTS):]:
            best = max(os.path.commonprefix([c["input_ids"], o["input_ids"]]).__len__()
                       for o in cases[:len(PROMPTS)])
            if best < 32:
                sys.exit(f"make_golden: {name}: shared-prefix case shares only {best} tokens")

        dump(os.path.join(OUT_DIR, f"{name}.json"), {
            "model": name,
            "path": rel,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "cases": cases,
        })
        if arch:
            dump_modules(os.path.join(OUT_DIR, f"modules_{arch}.json"), model)

        m = np.array(all_margins)
        first = np.array([c["top_logits"][0] - c["top_logits"][1] for c in cases])
        lens = [len(c["input_ids"]) for c in cases]
        line = (f"{name:11s} cases={len(cases)} prompt_tokens={min(lens)}..{max(lens)} "
                f"greedy margins: min={m.min():.4f} p5={np.percentile(m, 5):.4f} "
                f"median={np.median(m):.4f} frac<0.05={np.mean(m < 0.05):.3f}; "
                f"last-position margins min={first.min():.4f}; "
                f"per-case min={[c['greedy_min_margin'] for c in cases]}")
        print(line, flush=True)
        summary.append(line)
        del model

    print("\n".join(["make_golden: summary"] + summary))


if __name__ == "__main__":
    main()
