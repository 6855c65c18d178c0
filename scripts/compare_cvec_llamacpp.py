#!/usr/bin/env python3
"""Control vectors: ngx_srt's greedy tokens against llama.cpp's --control-vector-scaled.

Same model file (SmolLM2-135M-Instruct Q4_1 GGUF), same control-vector GGUF
(scripts/make_control_vector.py), same prompt token ids, greedy, EOS ignored. ngx_srt runs
through build/bin/srt-generate (--control-vector-scaled FILE:SCALE --control-vector-layer-range
A B, the srt_control_vector rules) in both numerics: "exact" (f32 activations: HF's numbers)
and "fast" (8-bit activations on the quantized weights: llama.cpp's CPU scheme, the mode that
should match it). llama.cpp runs as its own llama-server (built from source by
scripts/install-bench-deps.sh), started once per (scale, layer range) with the same options,
asked for n_probs 2 (the softmax of the raw logits, so the top-2 gap in log-probabilities is
the logit margin).

For each case it reports where the token sequences first diverge and the top-1/top-2 margins
of both at that step: a divergence at a step where a margin is tiny is a near-tie that
different (equally valid) float summation orders flip; one at a large margin would be a
different computation. A case "matches" when no token differs.

    scripts/compare_cvec_llamacpp.py [--tokens 32] [--threads 2] [--port 2403] [--f32]
                                     [--fixture FILE.json]

--f32 first rewrites the model with every tensor dequantized to F32 (scripts/gguf_to_f32.py; the
same weights) and compares on that file: llama.cpp then keeps its activations in f32 as ngx_srt
does, so only summation order is left between the two and the tokens should be equal but for
near ties. On the quantized file llama.cpp's CPU path rounds activations to 8 bits, which
moves its logits by up to ~0.2 from f32 (see BENCHMARKS.md).

--fixture writes the cases, llama.cpp's tokens and margins, and ngx_srt's, as JSON, plus per
case the raw bytes llama.cpp's tokens decode to up to its first step with a margin below
NEAR_TIE (the whole text when there is none): t/094-cvec-llamacpp.t serves the F32 file through
nginx and compares the texts with those bytes, with no llama.cpp in the test environment."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    "def add(a, b):\n    return",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
]
# (scale, layer start, layer end): llama.cpp's defaults are 1 and n_layer for 0 0 (here: "all")
CASES = [(0.0, 3, 12), (0.5, 3, 12), (1.0, 3, 12), (2.0, 3, 12), (0.5, 0, 0)]
NEAR_TIE = 0.005   # a llama.cpp top-1 minus top-2 logit below this: summation order may flip it


def token_bytes():
    """id -> raw bytes (byte-level BPE: the vocab's strings map back through GPT-2's byte table)"""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bytelevel import byte_decoder
    inv = byte_decoder()
    vocab = json.load(open(os.path.join(ROOT, "t/fixtures/tokenizers/smollm2/tokenizer.json")))["model"]["vocab"]
    return {i: bytes(inv[ch] for ch in t) for t, i in vocab.items()}


def expected_bytes(tb, tokens, margins):
    """the bytes of the tokens before the first near tie, cut at the last whole UTF-8 character"""
    n = next((i for i, m in enumerate(margins) if m < NEAR_TIE), len(tokens))
    b = b"".join(tb[t] for t in tokens[:n])
    while b:
        try:
            b.decode("utf-8")
            break
        except UnicodeDecodeError as e:
            b = b[:e.start]
    return n, b


def tokenize(texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(ROOT, "t/fixtures/tokenizers/smollm2/tokenizer.json"))
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


def srt(model, ids, cv, scale, a, b, numerics, n, threads):
    cmd = [os.path.join(ROOT, "build/bin/srt-generate"), "--model", model, "--prompt-ids",
           ",".join(map(str, ids)), "--max-tokens", str(n), "--ignore-eos", "--ids", "--margins",
           "--numerics", numerics, "--threads", str(threads)]
    if cv:
        cmd += ["--control-vector-scaled", f"{cv}:{scale}"]
        if a or b:
            cmd += ["--control-vector-layer-range", str(a), str(b)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    pairs = [p.split(":") for p in out]
    return [int(t) for t, _ in pairs], [float(m) for _, m in pairs]


class LlamaServer:
    def __init__(self, binary, model, cv, scale, a, b, port, threads):
        args = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
                "-tb", str(threads), "-c", "2048", "--parallel", "1", "-ngl", "0", "--no-warmup"]
        if cv:
            args += ["--control-vector-scaled", f"{cv}:{scale}"]
            if a or b:
                args += ["--control-vector-layer-range", str(a), str(b)]
        self.args = args
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2)
                return
            except Exception:
                if self.p.poll() is not None:
                    break
                time.sleep(0.2)
        self.stop()
        sys.exit(f"llama-server did not come up ({' '.join(args)}); log: {self.log.name}")

    def complete(self, ids, n):
        body = {"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1, "n_probs": 2,
                "return_tokens": True, "cache_prompt": False, "ignore_eos": True}
        req = urllib.request.Request(self.url + "/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        r = json.load(urllib.request.urlopen(req, timeout=600))
        toks, margins = [], []
        for p in r["completion_probabilities"]:
            toks.append(p["id"])
            top = p["top_logprobs"]
            margins.append(top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf"))
        if r.get("tokens") and r["tokens"] != toks:
            sys.exit("llama-server: tokens and completion_probabilities disagree")
        return toks, margins

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait(30)


def first_diff(x, y):
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return i
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=2403)
    ap.add_argument("--model", default=os.path.join(os.environ.get("SRT_MODEL_DIR", os.path.join(ROOT, ".cache/models")),
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llama-server", default=os.environ.get(
        "LLAMA_SERVER", os.path.join(ROOT, ".cache/llama.cpp/build/bin/llama-server")))
    ap.add_argument("--fixture")
    ap.add_argument("--f32", action="store_true")
    ap.add_argument("--llama-only", action="store_true", help="record llama.cpp's side only (for --fixture)")
    o = ap.parse_args()
    if o.f32:
        f32 = os.path.join(tempfile.mkdtemp(prefix="srt-f32-"), os.path.basename(o.model).rsplit(".", 2)[0] + ".F32.gguf")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gguf_to_f32.py"), o.model, f32], check=True)
        o.model = f32
    cvdir = tempfile.mkdtemp(prefix="srt-cvec-")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make_control_vector.py"), cvdir, "1", "1", "29"],
                   check=True)
    cv = os.path.join(cvdir, "cv.gguf")
    ids = tokenize(PROMPTS)
    print(f"# model {o.model}; control vector {cv} (make_control_vector.py, seed 17); {o.tokens} greedy tokens, "
          f"EOS ignored; {o.threads} threads; load average {open('/proc/loadavg').read().split()[0]}")
    ver = subprocess.run([o.llama_server, "--version"], capture_output=True, text=True)
    print(f"# llama.cpp: {o.llama_server}: {' '.join((ver.stdout + ver.stderr).split())}")
    tb = token_bytes()
    rows, fixture = [], {"model": os.path.basename(o.model), "tokens": o.tokens, "prompts": ids,
                         "near_tie": NEAR_TIE, "cases": []}
    for scale, a, b in CASES:
        srv = LlamaServer(o.llama_server, o.model, cv, scale, a, b, o.port, o.threads)
        try:
            for pi, pid in enumerate(ids):
                lt, lm = srv.complete(pid, o.tokens)
                case = {"scale": scale, "layers": [a, b], "prompt": pi, "llama_tokens": lt, "llama_margins": lm}
                case["expect_steps"], eb = expected_bytes(tb, lt, lm)
                case["expect_hex"] = eb.hex()
                for num in () if o.llama_only else ("exact", "fast"):
                    st, sm = srt(o.model, pid, cv, scale, a, b, num, o.tokens, o.threads)
                    d = first_diff(st, lt)
                    case[f"srt_{num}_tokens"], case[f"srt_{num}_margins"], case[f"srt_{num}_first_diff"] = st, sm, d
                    rows.append((scale, f"{a}-{b}" if a or b else "all", pi, num, d,
                                 (sm[d], lm[d]) if d >= 0 else None, min(lm)))
                fixture["cases"].append(case)
        finally:
            srv.stop()
    print("\n| scale | layers | prompt | ngx_srt numerics | same tokens as llama.cpp | first differing step: margin ngx_srt / llama.cpp | smallest llama.cpp margin |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for scale, rng, pi, num, d, m, lmin in rows:
        same = f"all {o.tokens}" if d < 0 else f"first {d}"
        at = "-" if m is None else f"step {d}: {m[0]:.3f} / {m[1]:.3f}"
        print(f"| {scale:g} | {rng} | {pi} | {num} | {same} | {at} | {lmin:.3f} |")
    if o.fixture:
        with open(o.fixture, "w") as f:
            json.dump(fixture, f, indent=1)
        print(f"\nwrote {o.fixture}")


if __name__ == "__main__":
    main()
