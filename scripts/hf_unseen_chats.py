#!/usr/bin/env python3
"""Greedy tokens of srt-generate against HF transformers' on 20 chats that are in no fixture:
an exactness check beyond t/170-hf-exact.t's 24 (which a change could be tuned to).

Each chat is rendered with the model's chat template and tokenized by transformers, as
scripts/make_chat_fixtures.py does; HF (float32, eager attention, the GGUF dequantized by
transformers) decodes greedily for 48 tokens keeping each step's top-2 margin, and
srt-generate --prompt-ids decodes the same ids. A chat counts as equal when srt's tokens are
HF's up to the first step whose HF margin is below 0.05 (there float rounding may pick either
token). Arguments after the options go to srt-generate (e.g. --numerics fast, which should
fail some chats: a check that cannot fail proves nothing).

    /path/to/python-with-torch scripts/hf_unseen_chats.py [--model GGUF] [--srt build/bin/srt-generate] [srt args...]

Needs torch, transformers, gguf, tokenizers, accelerate (a scratch venv; not part of make test).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_chat_fixtures as fx  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_NEW = 48
u = fx.u   # one user message


LONG = " ".join(f"Im Jahr {1900 + i} baute die Gemeinde {i + 2} neue Häuser am Fluss, und der Bürgermeister "
                f"schrieb einen Bericht über {i * 5} Familien." for i in range(1, 30))
CHATS = [
    u("Name three planets and one fact about each."),
    u("¿Cuál es la diferencia entre un gato y un perro? Responde en español."),
    u("用中文写一句关于春天的话。"),
    u("Напиши короткое стихотворение о зиме."),
    u("Write a SQL query that counts rows in a table named orders."),
    u("Give me a bash one-liner that finds all .txt files."),
    [{"role": "system", "content": "Reply only with valid JSON."},
     {"role": "user", "content": "Give an object with keys name and age for a fictional cat."}],
    [{"role": "user", "content": "I have 3 apples."}, {"role": "assistant", "content": "Okay, you have 3 apples."},
     {"role": "user", "content": "I eat one. How many are left?"}],
    u("Translate 'good morning, my friend' into Italian."),
    u("Write a JavaScript function that returns the maximum of an array."),
    u("What are the steps to boil an egg? Use a numbered list."),
    u("Explain recursion to a ten-year-old."),
    u("Fasse diesen Text zusammen: " + LONG),
    u("Quelle est la hauteur de la tour Eiffel ?"),
    u("Write a limerick about a programmer who loves coffee."),
    u("What is 17 times 23? Show your work."),
    u("def fib(n):\n    # complete this function\n"),
    u("List the days of the week in Portuguese."),
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Describe your ship."}],
    u("Why is the sky blue? Answer in one paragraph."),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="SmolLM2-135M-Instruct.Q4_1.gguf", help="a GGUF in SRT_MODEL_DIR")
    ap.add_argument("--srt", default=os.path.join(ROOT, "build/bin/srt-generate"))
    ap.add_argument("--threads", default="2")
    args, srt_args = ap.parse_known_args()
    fx.MAX_NEW = MAX_NEW
    tok, encode, decode, model = fx.load(args.model)
    eos = fx.eos_ids(tok, model)
    equal = compared = 0
    for i, chat in enumerate(CHATS):
        ids = encode(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
        hf, margins = fx.greedy(model, ids, eos)
        n = next((k for k, m in enumerate(margins) if m < fx.NEAR_TIE), len(hf))   # tokens before the first near tie
        out = subprocess.run([args.srt, "--model", os.path.join(fx.MODEL_DIR, args.model), "--prompt-ids",
                              ",".join(map(str, ids)), "--ids", "--max-tokens", str(len(hf)), "--threads",
                              args.threads] + srt_args, capture_output=True, text=True, check=True).stdout
        srt = [int(t) for t in out.replace(",", " ").split()]
        same = srt[:n] == hf[:n]
        equal += same
        compared += n
        print(f"chat {i:2d}: prompt {len(ids):4d} tokens, HF determined for {n:2d} of {len(hf)}: "
              f"{'equal' if same else 'DIFFERENT at ' + str(next(k for k in range(n) if srt[k:k+1] != hf[k:k+1]))}",
              flush=True)
    print(f"{equal} of {len(CHATS)} chats equal HF up to its first near tie, {compared} tokens compared")
    return 0 if equal == len(CHATS) else 1


if __name__ == "__main__":
    torch.set_num_threads(2)
    sys.exit(main())
