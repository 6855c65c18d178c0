#!/usr/bin/env python3
"""How far SmolLM2's logits move when every matmul's input x is rounded to a fixed point per
32-element block, against HF's own float32: the evidence for or against an integer-dot exact path.

HF transformers runs the model (its Q4_1 GGUF dequantized, eager attention) in float64 as the
reference, on the project's own chats (make_chat_fixtures.CHATS), every position of each prompt
scored at once. Each variant is compared with it:
  - f32: HF's float32 model, what the exact path's fixtures are made with;
  - fixed24 / fixed16 / fixed8: float64, but the input of every nn.Linear rounded per 32-block
    to a signed integer of at most 8355711 / 32767 / 127 (three / two / one balanced base-256
    digits) times a power-of-two scale, the largest that keeps the block's maximum in range.
Per variant: the largest |logit - reference| over every chat, position and token, and how
many positions' argmax differs from the reference's, with the largest reference top-2 margin
among them (an engine is HF-exact only while the steps it differs on are near ties).

    /path/to/python-with-torch scripts/activation_rounding_error.py

Needs torch, transformers, gguf, tokenizers, accelerate (as make_chat_fixtures.py); SRT_MODEL_DIR as there.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_chat_fixtures as fx  # noqa: E402

LIMIT = {24: 8355711, 16: 32767, 8: 127}


def fixed_point(x, bits):
    """x rounded per 32-block to an integer of magnitude <= LIMIT[bits] times 2^e"""
    b = x.reshape(-1, 32)
    lim = LIMIT[bits]
    top = b.abs().amax(dim=1, keepdim=True).clamp_min(1e-300)
    e = torch.floor(torch.log2(top)) - (math.log2(lim + 1) - 1)
    e = torch.where(torch.round(top * torch.pow(2.0, -e)) > lim, e + 1, e)
    return (torch.round(b * torch.pow(2.0, -e)) * torch.pow(2.0, e)).reshape(x.shape)


ROUND = [None]   # the bits the patched nn.Linear rounds its input to, or None
_linear = torch.nn.Linear.forward


def _rounded_linear(self, x):
    if ROUND[0] and x.shape[-1] % 32 == 0:
        x = fixed_point(x, ROUND[0])
    return _linear(self, x)


def main():
    torch.set_num_threads(os.cpu_count() or 1)
    tok, encode, _, model = fx.load("SmolLM2-135M-Instruct.Q4_1.gguf")
    prompts = [encode(tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)) for c in fx.CHATS]

    def scores(m):
        with torch.no_grad():
            return [m(torch.tensor([ids])).logits[0].double() for ids in prompts]

    torch.nn.Linear.forward = _rounded_linear
    variants = {"f32": scores(model)}
    model = model.to(torch.float64)
    ref = scores(model)
    for bits in (24, 16, 8):
        ROUND[0] = bits
        variants[f"fixed{bits}"] = scores(model)
    ROUND[0] = None
    print(f"{len(prompts)} chats, {sum(map(len, prompts))} positions (prompt lengths {min(map(len, prompts))}"
          f"-{max(map(len, prompts))}); reference: the same model in float64")
    for name, got in variants.items():
        err = max(float((g - r).abs().max()) for g, r in zip(got, ref))
        n_diff, worst = 0, 0.0
        for g, r in zip(got, ref):
            top2 = r.topk(2, dim=-1).values
            margin = top2[:, 0] - top2[:, 1]
            differ = g.argmax(-1) != r.argmax(-1)
            n_diff += int(differ.sum())
            if differ.any():
                worst = max(worst, float(margin[differ].max()))
        print(f"{name:>8}: max |logit - reference| {err:.2e}; argmax differs at {n_diff} positions"
              + (f", reference margin there up to {worst:.3g}" if n_diff else ""))


if __name__ == "__main__":
    main()
