#!/usr/bin/env python3
"""Write t/fixtures/exact/<model>.json: HF transformers' greedy answers to the project's own chat
prompts, for t/170-hf-exact.t (which sends the same chats through nginx at temperature 0 and needs
no torch).

Each chat is rendered with the model's chat template by transformers (apply_chat_template, jinja2,
add_generation_prompt) and tokenized with the model's tokenizer; the model (float32, eager
attention; SmolLM2 from its Q4_1 GGUF dequantized by transformers) then decodes greedily for up to
MAX_NEW tokens or to an EOS token. Per step the top-2 margin is kept: HF's answer is only
determined up to the first step whose margin is below NEAR_TIE (there float rounding may pick
either token), so the fixture records "exact_tokens", the number of leading tokens any correct
engine must reproduce, and "exact_text", their decoded text (a trailing partial UTF-8 character
dropped).

    /path/to/python-with-torch scripts/make_chat_fixtures.py [model ...]

Needs torch (CPU wheel), transformers, gguf, tokenizers (and accelerate: transformers 5 loads a GGUF only with it); SRT_MODEL_DIR as for make_golden.py.
"""
import json
import os
import sys

import tokenizers
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.environ.get("SRT_MODEL_DIR", os.path.join(ROOT, ".cache", "models"))
OUT_DIR = os.path.join(ROOT, "t", "fixtures", "exact")
MAX_NEW = 32
NEAR_TIE = 0.05
MODELS = [("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"), ("tiny-llama", "tiny-llama"),
          ("tiny-qwen2", "tiny-qwen2"), ("tiny-qwen3", "tiny-qwen3")]


def u(text):
    return [{"role": "user", "content": text}]


# Three long documents (600+ tokens once templated), written for these tests.
LONG_A = " ".join(
    f"Section {i}: the harbour town of Vellmar kept {i * 3 + 2} fishing boats, and every spring the "
    f"council counted the nets, repaired {i + 1} piers and wrote the tide tables for the {i}th season."
    for i in range(1, 19))
LONG_B = "\n".join(
    f"def step_{i}(state):\n    # advance the simulation by {i} ticks\n    state['t'] += {i}\n"
    f"    state['log'].append('step {i}')\n    return state\n" for i in range(1, 15))
LONG_C = " ".join(
    f"Le paragraphe {i} décrit la rivière qui traverse la vallée, ses {i + 4} ponts de pierre et les "
    f"moulins qui tournaient encore en {1800 + i * 7}." for i in range(1, 17))

CHATS = [
    u("What is the capital of France?"),
    u("Write a haiku about autumn leaves."),
    u("List five fruits that are red."),
    u("Explain what a hash table is in two sentences."),
    u("Write a Python function that reverses a string."),
    u("Écris une phrase sur la mer en français."),
    u("Wie spät ist es, wenn es Mittag ist? Antworte auf Deutsch."),
    u("¿Cuál es el río más largo del mundo?"),
    u("用中文介绍一下长城。"),
    u("日本の首都はどこですか？"),
    u("Привет! Как дела?"),
    u("Việt Nam có bao nhiêu tỉnh?"),
    u("Give me a numbered list of three steps to boil an egg."),
    u("Write a SQL query that counts the rows of a table named orders."),
    u("What does `int main(void) { return 0; }` do in C?"),
    [{"role": "system", "content": "You are a terse assistant. Answer in one word."},
     {"role": "user", "content": "What colour is the sky on a clear day?"}],
    [{"role": "user", "content": "My name is Ada."},
     {"role": "assistant", "content": "Nice to meet you, Ada!"},
     {"role": "user", "content": "What is my name?"}],
    [{"role": "user", "content": "Let's count. One."},
     {"role": "assistant", "content": "Two."},
     {"role": "user", "content": "Three."},
     {"role": "assistant", "content": "Four."},
     {"role": "user", "content": "Go on."}],
    u("Convert 100 degrees Celsius to Fahrenheit and show the formula."),
    u("- apples\n- pears\n- plums\nSort this list alphabetically and add one more fruit."),
    u("Translate 'good morning' into Italian, Portuguese and Dutch."),
    u("Summarise this:\n\n" + LONG_A),
    u("What does this code do?\n\n```python\n" + LONG_B + "```"),
    u("Résume ce texte en une phrase :\n\n" + LONG_C),
]


def load(rel):
    """(tok, encode, decode, model): tok renders the chat template; encode/decode are the
    tokenizer the engine implements (tokenizer.json through the tokenizers library; AutoTokenizer
    may pick a class that splits some text differently, see make_golden.py)."""
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    if rel.endswith(".gguf"):
        tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=rel)
        model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=rel, **kw)
        encode = lambda text: tok(text, add_special_tokens=False).input_ids
        decode = lambda ids: tok.decode(ids, skip_special_tokens=True)
    else:
        path = os.path.join(MODEL_DIR, rel)
        tok = AutoTokenizer.from_pretrained(path)
        tj = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        model = AutoModelForCausalLM.from_pretrained(path, **kw)
        encode = lambda text: tj.encode(text, add_special_tokens=False).ids
        decode = lambda ids: tj.decode(ids, skip_special_tokens=True)
    model.eval()
    return tok, encode, decode, model


def eos_ids(tok, model):
    ids = set()
    e = model.generation_config.eos_token_id if model.generation_config else None
    for v in ([e] if isinstance(e, int) else (e or [])):
        ids.add(int(v))
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    return ids


@torch.no_grad()
def greedy(model, ids, eos):
    out, margins, past = [], [], None
    x = torch.tensor([ids])
    for _ in range(MAX_NEW):
        r = model(input_ids=x, past_key_values=past, use_cache=True)
        past = r.past_key_values
        logits = r.logits[0, -1].float()
        top2 = torch.topk(logits, 2)
        margins.append(float(top2.values[0] - top2.values[1]))
        t = int(top2.indices[0])
        out.append(t)
        if t in eos:
            break
        x = torch.tensor([[t]])
    return out, margins


def main():
    torch.set_num_threads(1)   # spinning OpenMP barriers crawl on a shared machine
    os.makedirs(OUT_DIR, exist_ok=True)
    only = set(sys.argv[1:])
    for name, rel in MODELS:
        if only and name not in only:
            continue
        tok, encode, decode, model = load(rel)
        eos = eos_ids(tok, model)
        cases = []
        for msgs in CHATS:
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            ids = encode(text)
            toks, margins = greedy(model, ids, eos)
            k = next((i for i, m in enumerate(margins) if m < NEAR_TIE), len(toks))
            body = [t for t in toks[:k] if t not in eos]
            exact_text = decode(body).rstrip("\ufffd")
            cases.append({"messages": msgs, "prompt_tokens": len(ids), "tokens": toks,
                          "margins": [round(m, 4) for m in margins], "exact_tokens": k,
                          "complete": k == len(toks),
                          "text": decode([t for t in toks if t not in eos]),
                          "exact_text": exact_text})
            print(f"{name}: {len(ids):4d} prompt tokens, {len(toks):2d} generated, exact up to {k}", flush=True)
        with open(os.path.join(OUT_DIR, f"{name}.json"), "w") as f:
            json.dump({"model": name, "path": rel, "max_new": MAX_NEW, "near_tie": NEAR_TIE,
                       "transformers_version": transformers.__version__, "torch_version": torch.__version__,
                       "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
