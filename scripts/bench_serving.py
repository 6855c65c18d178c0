#!/usr/bin/env python3
"""Online serving benchmark for any OpenAI-compatible server (ngx_srt, llama.cpp's server,
SGLang, vLLM), in the spirit of SGLang's bench_serving. Standard library only.

It sends --num-prompts requests to /v1/completions (or /v1/chat/completions with --chat),
streamed by default, with Poisson arrivals at --request-rate (inf = all at once) and at most
--max-concurrency in flight, and reports request and token throughput plus TTFT, ITL, TPOT
and end-to-end latency percentiles.

Datasets
  random                   prompts of random words; lengths drawn from
                           [input_len * range_ratio, input_len], outputs likewise
  generated-shared-prefix  --gsp-num-groups groups, each a long shared system prompt
                           followed by --gsp-prompts-per-group short questions (the
                           workload where a prefix cache pays off)
  multi-turn               --mt-conversations chats of --mt-turns turns each (chat API): one of
                           --mt-system-prompts shared system prompts, then user turns, each
                           request carrying the whole history including the server's own
                           earlier answers (like SGLang's multi-turn benchmark). A chat's turns
                           are sequential; --max-concurrency chats run at once. The report adds
                           the prefix-cache hit rate, cached_tokens / prompt_tokens, from usage

Lengths are in tokens when --tokenizer points at a tokenizer.json and the `tokenizers`
package is importable; otherwise one random word counts as one token (approximately).
Output lengths are enforced with max_tokens and ignore_eos (unless --disable-ignore-eos);
the output token count comes from the server's usage when it reports one.

Examples
  scripts/bench_serving.py --base-url http://127.0.0.1:8080 --dataset-name random \\
      --num-prompts 64 --random-input-len 256 --random-output-len 64 --max-concurrency 16
  scripts/bench_serving.py --base-url http://127.0.0.1:8000 --dataset-name generated-shared-prefix \\
      --gsp-num-groups 4 --gsp-prompts-per-group 16 --output-file out.json
  scripts/bench_serving.py --base-url http://127.0.0.1:8080 --dataset-name multi-turn \\
      --mt-conversations 24 --mt-turns 4 --max-concurrency 6
"""
import argparse
import http.client
import json
import math
import random
import statistics
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case "
    "point government company number group problem fact water room mother area money story month lot "
    "right study book job word business issue side kind head house service friend father power hour game "
    "line end member law car city community name president team minute idea kid body information back "
    "parent face others level office door health art war history party result change morning reason "
    "research girl guy moment air teacher force education river stone light garden music winter market"
).split()


class Tok:
    """Counts and trims tokens with a tokenizer.json, or treats a word as a token."""

    def __init__(self, path):
        self.tk = None
        if path:
            try:
                from tokenizers import Tokenizer  # optional
                self.tk = Tokenizer.from_file(path)
            except Exception as e:  # noqa: BLE001 - report and fall back
                print(f"bench_serving: tokenizer {path} unusable ({e}); counting words", file=sys.stderr)

    def make_text(self, rng, n_tokens):
        if n_tokens <= 0:
            return ""
        words = [rng.choice(WORDS) for _ in range(n_tokens)]
        text = " ".join(words)
        if self.tk is None:
            return text
        ids = self.tk.encode(text, add_special_tokens=False).ids
        while len(ids) < n_tokens:
            text += " " + " ".join(rng.choice(WORDS) for _ in range(n_tokens - len(ids)))
            ids = self.tk.encode(text, add_special_tokens=False).ids
        return self.tk.decode(ids[:n_tokens])

    def count(self, text):
        if self.tk is None:
            return len(text.split())
        return len(self.tk.encode(text, add_special_tokens=False).ids)


def dataset_random(args, tok, rng):
    reqs = []
    for _ in range(args.num_prompts):
        lo_in = max(1, int(args.random_input_len * args.random_range_ratio))
        lo_out = max(1, int(args.random_output_len * args.random_range_ratio))
        n_in = rng.randint(lo_in, max(lo_in, args.random_input_len))
        n_out = rng.randint(lo_out, max(lo_out, args.random_output_len))
        reqs.append((tok.make_text(rng, n_in), n_in, n_out))
    return reqs


def dataset_gsp(args, tok, rng):
    reqs = []
    for _ in range(args.gsp_num_groups):
        system = tok.make_text(rng, args.gsp_system_prompt_len)
        for _ in range(args.gsp_prompts_per_group):
            q = tok.make_text(rng, args.gsp_question_len)
            reqs.append((system + "\n" + q, args.gsp_system_prompt_len + args.gsp_question_len, args.gsp_output_len))
    rng.shuffle(reqs)
    return reqs[: args.num_prompts] if args.num_prompts else reqs


def dataset_multiturn(args, tok, rng):
    """Conversations: (system prompt, [user turn texts], output length)."""
    systems = [tok.make_text(rng, args.mt_system_len) for _ in range(args.mt_system_prompts)]
    convs = []
    for c in range(args.mt_conversations):
        users = [f"[{c}.{t}] " + tok.make_text(rng, args.mt_user_len) for t in range(args.mt_turns)]
        convs.append((systems[c % len(systems)], users, args.mt_output_len))
    return convs


class Result:
    __slots__ = ("ok", "error", "prompt_len", "output_len", "ttft", "itl", "latency", "start",
                 "text", "usage_prompt", "usage_cached", "route")

    def __init__(self):
        self.ok = False
        self.error = ""
        self.prompt_len = 0
        self.output_len = 0
        self.ttft = 0.0
        self.itl = []
        self.latency = 0.0
        self.start = 0.0
        self.text = ""
        self.usage_prompt = None
        self.usage_cached = None
        self.route = None


def send(args, url, prompt, prompt_len, out_len):
    r = Result()
    r.prompt_len = prompt_len
    body = {"model": args.model, "max_tokens": out_len, "temperature": args.temperature,
            "stream": not args.disable_stream}
    if isinstance(prompt, list):
        body["messages"] = prompt
    elif args.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if not args.disable_ignore_eos:
        body["ignore_eos"] = True
    if not args.disable_stream:
        body["stream_options"] = {"include_usage": True}
    if args.extra_body:
        body.update(args.extra_body)
    chat = args.chat or isinstance(prompt, list)
    path = url.path.rstrip("/") + ("/v1/chat/completions" if chat else "/v1/completions")
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if body["stream"] else "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(url.hostname, url.port or (443 if url.scheme == "https" else 80), timeout=args.timeout)
    r.start = time.perf_counter()
    try:
        conn.request("POST", path, body=data, headers=headers)
        resp = conn.getresponse()
        r.route = resp.getheader("X-Srt-Route")
        if resp.status != 200:
            r.error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}"
            return r
        chunks, usage_out, last, usage, done = 0, None, r.start, None, False
        if body["stream"]:
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                msg = json.loads(payload)
                if msg.get("usage"):
                    usage = msg["usage"]
                    usage_out = usage.get("completion_tokens")
                text = ""
                for ch in msg.get("choices") or []:
                    text += ch.get("text") or (ch.get("delta") or {}).get("content") or ""
                r.text += text
                if text:
                    now = time.perf_counter()
                    if chunks == 0:
                        r.ttft = now - r.start
                    else:
                        r.itl.append(now - last)
                    last = now
                    chunks += 1
        else:
            msg = json.loads(resp.read())
            r.ttft = time.perf_counter() - r.start
            usage = msg.get("usage") or {}
            usage_out = usage.get("completion_tokens")
            for ch in msg.get("choices") or []:
                r.text += ch.get("text") or (ch.get("message") or {}).get("content") or ""
            chunks = done = 1
        if not done:
            raise ConnectionError("the stream ended without [DONE]")
        if usage:
            r.usage_prompt = usage.get("prompt_tokens")
            r.usage_cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            if r.usage_prompt:
                r.prompt_len = r.usage_prompt
        r.latency = time.perf_counter() - r.start
        r.output_len = usage_out if usage_out is not None else chunks
        r.ok = True
    except Exception as e:  # noqa: BLE001 - a failed request is a data point
        r.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return r


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    f, c = math.floor(k), math.ceil(k)
    return xs[f] if f == c else xs[f] + (xs[c] - xs[f]) * (k - f)


def run(args, reqs):
    url = urllib.parse.urlparse(args.base_url)
    results = [None] * len(reqs)
    sem = threading.Semaphore(args.max_concurrency or len(reqs) or 1)
    rng = random.Random(args.seed + 1)

    def task(i):
        try:
            results[i] = send(args, url, *reqs[i])
        finally:
            sem.release()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(len(reqs), args.max_concurrency or len(reqs)) or 1) as ex:
        for i in range(len(reqs)):
            if args.request_rate != float("inf") and i > 0:
                time.sleep(rng.expovariate(args.request_rate))
            sem.acquire()
            ex.submit(task, i)
    duration = time.perf_counter() - t0
    return results, duration


def run_multiturn(args, convs):
    """Each conversation's turns in order, the server's answers fed back; at most
    --max-concurrency conversations at once. Results in completion order."""
    url = urllib.parse.urlparse(args.base_url)
    results, lock = [], threading.Lock()

    def chat(conv):
        system, users, out_len = conv
        msgs = [{"role": "system", "content": system}]
        for u in users:
            msgs.append({"role": "user", "content": u})
            r = send(args, url, list(msgs), 0, out_len)
            with lock:
                results.append(r)
            # a failed turn leaves an empty answer: the conversation goes on, as a user's would
            msgs.append({"role": "assistant", "content": r.text if r.ok else ""})

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.max_concurrency or len(convs) or 1) as ex:
        list(ex.map(chat, convs))
    return results, time.perf_counter() - t0


def report(args, results, duration):
    ok = [r for r in results if r and r.ok]
    failed = [r for r in results if not r or not r.ok]
    ms = 1000.0
    ttft = [r.ttft * ms for r in ok]
    itl = [x * ms for r in ok for x in r.itl]
    e2e = [r.latency * ms for r in ok]
    tpot = [(r.latency - r.ttft) / (r.output_len - 1) * ms for r in ok if r.output_len > 1]
    out_tokens = sum(r.output_len for r in ok)
    in_tokens = sum(r.prompt_len for r in ok)
    m = {
        "backend_url": args.base_url, "dataset": args.dataset_name, "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency, "completed": len(ok), "failed": len(failed),
        "duration_s": duration, "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration if duration else 0,
        "input_throughput": in_tokens / duration if duration else 0,
        "output_throughput": out_tokens / duration if duration else 0,
        "total_throughput": (in_tokens + out_tokens) / duration if duration else 0,
        "mean_ttft_ms": statistics.fmean(ttft) if ttft else float("nan"),
        "median_ttft_ms": pct(ttft, 50), "p99_ttft_ms": pct(ttft, 99),
        "mean_itl_ms": statistics.fmean(itl) if itl else float("nan"),
        "median_itl_ms": pct(itl, 50), "p95_itl_ms": pct(itl, 95), "p99_itl_ms": pct(itl, 99),
        "mean_tpot_ms": statistics.fmean(tpot) if tpot else float("nan"), "median_tpot_ms": pct(tpot, 50),
        "mean_e2e_ms": statistics.fmean(e2e) if e2e else float("nan"),
        "median_e2e_ms": pct(e2e, 50), "p99_e2e_ms": pct(e2e, 99),
    }
    usage = [r for r in ok if r.usage_prompt]
    if usage:
        m["prompt_tokens"] = sum(r.usage_prompt for r in usage)
        m["cached_tokens"] = sum(r.usage_cached or 0 for r in usage)
        m["cache_hit_rate"] = m["cached_tokens"] / m["prompt_tokens"]
    w = 50
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=w, c="="))
    rows = [
        ("Backend", args.base_url), ("Dataset", args.dataset_name),
        ("Traffic request rate", args.request_rate), ("Max request concurrency", args.max_concurrency or "unlimited"),
        ("Successful requests", len(ok)), ("Failed requests", len(failed)),
        ("Benchmark duration (s)", f"{duration:.2f}"),
        ("Total input tokens", in_tokens), ("Total generated tokens", out_tokens),
        ("Request throughput (req/s)", f"{m['request_throughput']:.2f}"),
        ("Input token throughput (tok/s)", f"{m['input_throughput']:.2f}"),
        ("Output token throughput (tok/s)", f"{m['output_throughput']:.2f}"),
        ("Total token throughput (tok/s)", f"{m['total_throughput']:.2f}"),
    ]
    if "cache_hit_rate" in m:
        rows.append(("Prefix cache hit rate", f"{m['cache_hit_rate']:.3f}"))
    for k, v in rows:
        print(f"{k:<36}{v:>14}")
    for title, keys in (("Time to First Token", ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms")),
                        ("Inter-token Latency", ("mean_itl_ms", "median_itl_ms", "p95_itl_ms", "p99_itl_ms")),
                        ("Time per Output Token (excl. 1st)", ("mean_tpot_ms", "median_tpot_ms")),
                        ("End-to-End Latency", ("mean_e2e_ms", "median_e2e_ms", "p99_e2e_ms"))):
        print("{s:{c}^{n}}".format(s=title, n=w, c="-"))
        for k in keys:
            stat, what = k[:-3].split("_", 1)
            label = f"{stat.capitalize()} {what.upper()} (ms)"
            print(f"{label:<36}{m[k]:>14.2f}")
    print("=" * w)
    if failed:
        errs = {}
        for r in failed:
            e = r.error if r else "not sent"
            errs[e] = errs.get(e, 0) + 1
        for e, n in sorted(errs.items(), key=lambda x: -x[1])[:5]:
            print(f"failed x{n}: {e}", file=sys.stderr)
    return m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default=None, help="model name (default: first of /v1/models)")
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--dataset-name", choices=("random", "generated-shared-prefix", "multi-turn"),
                    default="random")
    ap.add_argument("--num-prompts", type=int, default=100)
    ap.add_argument("--random-input-len", type=int, default=256)
    ap.add_argument("--random-output-len", type=int, default=64)
    ap.add_argument("--random-range-ratio", type=float, default=1.0)
    ap.add_argument("--gsp-num-groups", type=int, default=4)
    ap.add_argument("--gsp-prompts-per-group", type=int, default=16)
    ap.add_argument("--gsp-system-prompt-len", type=int, default=1024)
    ap.add_argument("--gsp-question-len", type=int, default=32)
    ap.add_argument("--gsp-output-len", type=int, default=32)
    ap.add_argument("--mt-conversations", type=int, default=24)
    ap.add_argument("--mt-turns", type=int, default=4)
    ap.add_argument("--mt-system-prompts", type=int, default=4)
    ap.add_argument("--mt-system-len", type=int, default=512)
    ap.add_argument("--mt-user-len", type=int, default=48)
    ap.add_argument("--mt-output-len", type=int, default=32)
    ap.add_argument("--tokenizer", default=None, help="tokenizer.json for exact token lengths (optional)")
    ap.add_argument("--request-rate", type=float, default=float("inf"), help="requests/s, Poisson (inf: all at once)")
    ap.add_argument("--max-concurrency", type=int, default=0, help="most requests in flight (0: unlimited)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--disable-ignore-eos", action="store_true")
    ap.add_argument("--disable-stream", action="store_true")
    ap.add_argument("--extra-body", type=json.loads, default=None,
                    help='JSON object merged into every request, e.g. \'{"logit_bias": {"2": -100}}\' '
                         "for servers without ignore_eos")
    ap.add_argument("--warmup-requests", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--output-file", default=None, help="append the metrics as one JSON line")
    ap.add_argument("--tag", default=None, help="free text stored with the JSON line")
    args = ap.parse_args(argv)

    url = urllib.parse.urlparse(args.base_url)
    if args.model is None:
        try:
            conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
            conn.request("GET", url.path.rstrip("/") + "/v1/models")
            data = json.loads(conn.getresponse().read())
            args.model = data["data"][0]["id"]
        except Exception as e:  # noqa: BLE001
            print(f"bench_serving: cannot list models at {args.base_url} ({e}); pass --model", file=sys.stderr)
            return 2
    rng = random.Random(args.seed)
    tok = Tok(args.tokenizer)
    if args.dataset_name == "random":
        reqs = dataset_random(args, tok, rng)
    elif args.dataset_name == "multi-turn":
        reqs = dataset_multiturn(args, tok, rng)
    else:
        reqs = dataset_gsp(args, tok, rng)
    if not reqs:
        print("bench_serving: empty dataset", file=sys.stderr)
        return 2
    for i in range(args.warmup_requests):
        w = send(args, url, "warm up " + str(i), 3, 4)
        if not w.ok:
            print(f"bench_serving: warm-up request failed: {w.error}", file=sys.stderr)
            return 1
    if args.dataset_name == "multi-turn":
        results, duration = run_multiturn(args, reqs)
    else:
        results, duration = run(args, reqs)
    m = report(args, results, duration)
    if args.output_file:
        m["tag"] = args.tag
        m["model"] = args.model
        with open(args.output_file, "a") as f:
            f.write(json.dumps(m) + "\n")
    return 0 if m["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
