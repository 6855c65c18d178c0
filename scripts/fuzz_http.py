#!/usr/bin/env python3
"""Throws malformed and hostile requests at a running ngx_srt location and checks every answer.

    scripts/fuzz_http.py --port PORT [--prefix /v1] [--iterations N] [--seed S] [--model NAME]

Each iteration sends one request on a fresh connection: a valid chat or completions request
mutated in one or several ways (a field of the wrong type, out of range, huge, deeply nested,
invalid UTF-8, truncated JSON, random bytes, duplicate keys, unknown fields, a wrong method or
content type, a body cut short, a client that hangs up mid-answer). Checks:
  - the answer is 200 with a completion (JSON or SSE ending in [DONE]) or one of 400 404 405 413
    503 with OpenAI's {"error": {"message", "type", "param", "code"}} JSON;
  - nothing hangs (each request has a deadline);
  - at the end no request slot is left in use (/health: running 0, queued 0, every slot free).
Exit status 0 when every check held; otherwise the first failures are printed. t/120-fuzz.t runs
it for a few hundred iterations; SRT_SOAK=1 makes that many thousands.
"""
import argparse
import json
import random
import socket
import sys
import time

OK_ERRORS = {400, 404, 405, 413, 503}


def base_request(rng, model):
    if rng.random() < 0.5:
        return "/chat/completions", {
            "model": model,
            "messages": [{"role": "user", "content": rng.choice(["Hi", "Hello there", "1, 2, 3,", "é ✓ 漢字"])}],
            "max_tokens": rng.randint(1, 4), "temperature": 0}
    prompt = rng.choice(["Hello", "Once upon a time", [1, 2, 3], [33, 28, 216]])
    return "/completions", {"model": model, "prompt": prompt, "max_tokens": rng.randint(1, 4), "temperature": 0}


HOSTILE_VALUES = [
    None, True, False, 0, -1, 1, 2 ** 31, -2 ** 31, 2 ** 63, 1e308, -1e308, 1e-320, 0.5, -0.5, 3.5,
    "", "x", "0", "1e9", "NaN", "\u0000", "a" * 5000, [], [1], [None], ["x"] * 70, {}, {"a": 1},
    [[[[[[[[[[]]]]]]]]]], [2 ** 40], [-5], list(range(300)),
]

FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p",
          "top_k", "min_p", "n", "stop", "stop_token_ids", "seed", "frequency_penalty", "presence_penalty",
          "repetition_penalty", "logit_bias", "ignore_eos", "min_tokens", "logprobs", "top_logprobs", "user",
          "stream", "stream_options"]


def mutate(rng, path, body):
    """Returns (method, path, content_type, raw_body, cut) with one or more mutations applied."""
    method, ctype, cut = "POST", "application/json", None
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not isinstance(body, dict):
            break
        k = rng.random()
        if k < 0.40:
            body[rng.choice(FIELDS)] = rng.choice(HOSTILE_VALUES)
        elif k < 0.48:
            field = rng.choice(["messages", "stop", "logit_bias", "stream_options"])
            body[field] = rng.choice([
                [{"role": rng.choice(["user", "system", "assistant", "tool", "x", 5]),
                  "content": rng.choice(HOSTILE_VALUES)}],
                [{"content": "no role"}], [{"role": "user"}], {"role": "user", "content": "not a list"},
                {"50256": -100}, {"x": 1}, {"1": "a"}, {"include_usage": "yes"}])
        elif k < 0.52:
            body["stream"] = True
            body["stream_options"] = {"include_usage": rng.random() < 0.5}
        elif k < 0.56:
            body["unknown_" + str(rng.randint(0, 99))] = rng.choice(HOSTILE_VALUES)
        elif k < 0.60:
            nest = "1"
            for _ in range(rng.choice([50, 500, 5000])):
                nest = "[" + nest + "]"
            return method, path, ctype, ('{"model":"m","prompt":' + nest + "}").encode(), cut
        elif k < 0.65:
            raw = json.dumps(body).encode()
            return method, path, ctype, raw[:rng.randint(0, max(0, len(raw) - 1))], cut
        elif k < 0.69:
            return method, path, ctype, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))), cut
        elif k < 0.72:
            raw = json.dumps(body).encode().replace(b"Hi", b"H\xff\xfe").replace(b"Hello", b"He\xc3llo")
            return method, path, ctype, raw, cut
        elif k < 0.75:
            raw = json.dumps(body)[:-1] + ', "max_tokens": 2, "max_tokens": "x"}'
            return method, path, ctype, raw.encode(), cut
        elif k < 0.79:
            method = rng.choice(["GET", "PUT", "DELETE", "PATCH"])
        elif k < 0.82:
            path = rng.choice(["/chat/completion", "/completions/x", "/models", "/health", "/get_model_info", "/"])
        elif k < 0.85:
            ctype = rng.choice(["text/plain", "application/x-www-form-urlencoded", ""])
        elif k < 0.90:
            cut = rng.choice(["body", "answer"])
        elif k < 0.94:
            body = rng.choice([[], [1, 2], "string", 5, None, True])
        else:
            body["messages"] = [{"role": "user", "content": "x" * rng.choice([10, 3000, 20000])}]
    return method, path, ctype, json.dumps(body).encode(), cut


def exchange(port, method, path, ctype, raw, cut, deadline):
    s = socket.create_connection(("127.0.0.1", port), timeout=deadline)
    head = f"{method} {path} HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n"
    if ctype:
        head += f"Content-Type: {ctype}\r\n"
    head += f"Content-Length: {len(raw)}\r\n\r\n"
    if cut == "body" and raw:
        s.sendall(head.encode() + raw[:len(raw) // 2])
        s.close()
        return None
    s.sendall(head.encode() + raw)
    if cut == "answer":
        s.recv(10)
        s.close()
        return None
    data = b""
    t0 = time.monotonic()
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if time.monotonic() - t0 > deadline:
            raise TimeoutError("the answer did not end in time")
    s.close()
    return data


def dechunk(body):
    out, i = b"", 0
    while True:
        j = body.index(b"\r\n", i)
        n = int(body[i:j].split(b";")[0], 16)
        if n == 0:
            return out
        out += body[j + 2:j + 2 + n]
        i = j + 2 + n + 2


def check(data, method):
    if b"\r\n\r\n" not in data:
        return "no complete header"
    head, body = data.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ")[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = dechunk(body)
    if status == 200:
        if b"text/event-stream" in head:
            if not body.rstrip().endswith(b"data: [DONE]"):
                return f"stream without [DONE]: {body[-200:]!r}"
            return None
        doc = json.loads(body)
        if "choices" not in doc and "data" not in doc and "status" not in doc and "model_path" not in doc:
            return f"200 without choices: {body[:200]!r}"
        return None
    if status not in OK_ERRORS:
        return f"status {status}: {body[:200]!r}"
    if method == "HEAD":
        return None
    doc = json.loads(body)
    e = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(e, dict) or not all(k in e for k in ("message", "type", "param", "code")):
        return f"status {status} without OpenAI error JSON: {body[:200]!r}"
    return None


def health(port, prefix):
    data = exchange(port, "GET", prefix + "/health", "", b"", None, 30)
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prefix", default="/v1")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--model", default="smol")
    ap.add_argument("--deadline", type=float, default=60.0, help="seconds one answer may take")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    failures, counts = [], {}
    slots = health(args.port, args.prefix).get("slots_free")
    for i in range(args.iterations):
        path, body = base_request(rng, args.model)
        method, path, ctype, raw, cut = mutate(rng, path, body)
        try:
            data = exchange(args.port, method, args.prefix + path, ctype, raw, cut, args.deadline)
            if data is None:
                counts["client hung up"] = counts.get("client hung up", 0) + 1
                continue
            why = check(data, method)
            status = data.split(b" ", 2)[1].decode() if b" " in data else "?"
            counts[status] = counts.get(status, 0) + 1
        except (OSError, ValueError, TimeoutError) as e:
            why = f"{type(e).__name__}: {e}"
        if why:
            failures.append(f"iteration {i} ({method} {path}, {raw[:120]!r}): {why}")
    # the scheduler finishes what hung-up clients left, then every slot is free again
    for _ in range(300):
        h = health(args.port, args.prefix)
        if h.get("running") == 0 and h.get("queued") == 0 and h.get("slots_free") == slots:
            break
        time.sleep(0.1)
    print(f"seed {seed}, {args.iterations} requests: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    print(f"health after: {json.dumps(h)}")
    if h.get("running") != 0 or h.get("queued") != 0 or h.get("slots_free") != slots:
        failures.append(f"requests or slots left over ({slots} slots free before): {h}")
    for f in failures[:20]:
        print("FAIL " + f)
    print("ok" if not failures else f"{len(failures)} failures")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
