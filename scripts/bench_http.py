#!/usr/bin/env python3
"""HTTP-path overhead of ngx_http_srt_module, against nginx's own `return 200`, in the same run.

    scripts/bench_http.py [--model .cache/models/tiny-llama] [--threads 1] [--duration 4]
                          [--concurrency 1,4] [--port 28670] [--stream-tokens 64] [--stream-requests 20]
                          [--json FILE]

It starts a private nginx (prefix under /tmp, stopped at the end) with one server and these
locations, all served by the same worker:
    = /return200   `return 200` with a small JSON body: the anchor (what nginx itself costs)
    /v1/           srt_model MODEL (the tiny checkpoint: the model's own time is small, so what
                   remains is the HTTP path: body parsing, validation, chat template,
                   tokenization, shared-memory hand-off, wake-ups, detokenization, JSON/SSE)
    = /metrics     srt_metrics on: the scheduler's own TTFT / ITL / e2e histograms
Every case sends the same request body over keep-alive connections (raw sockets, one client
process per connection) at a fixed concurrency for --duration seconds after a 1 s warm-up:
    return200        POST /return200 with the completions body (nginx discards it)
    completions      POST /v1/completions, prompt = --prompt-ids token ids, max_tokens 1
    chat             POST /v1/chat/completions, one short user message, max_tokens 1
and reports requests/s, p50/p99 latency and the ratio to return200.

Model time, two anchors:
  offline  build/bin/srt-bench-sched on the same model, same threads, one request at a time, same
           prompt length, 1 output token: wall time / requests (scheduler + model, no HTTP, no IPC);
  in-run   the scheduler's own e2e latency histogram (/metrics, difference over the case): from the
           request's arrival in the scheduler to its finish.
"module adds" = p50(model request) - p50(return200) - model time (concurrency 1).
CPU time per request of the nginx worker and of the scheduler process (/proc/PID/task/*/schedstat
over each case) is reported too: unlike latency, it does not grow when the machine is busy.

SSE: --stream-requests streamed completions of --stream-tokens tokens (ignore_eos), one at a time.
Inter-token latency as the client sees it (time between SSE events) against the per-token decode
time of the same scheduler offline (srt-bench-sched, one request, same output length) and the
scheduler's in-run ITL histogram: "streaming adds" = client ITL - offline ITL.

The radix cache is off on both sides (every case repeats one prompt, which would otherwise be
served from the cache online but not offline).
"""
import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_nginx import PrivateNginx  # noqa: E402


class Conn:
    """A keep-alive HTTP/1.1 connection on a raw socket: the client costs as little as it can."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.timing = None   # the last response's Server-Timing header (bytes)

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise ConnectionError("server closed the connection")
        self.buf += d

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            self._fill()

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        d = bytes(self.buf[:n])
        del self.buf[:n]
        return d

    def request(self, raw, on_chunk=None):
        """Send one request; return (status, body). on_chunk(bytes) sees each chunk as it arrives."""
        self.sock.sendall(raw)
        status = int(self._line().split()[1])
        clen, chunked, close = None, False, False
        self.timing = None
        while True:
            line = self._line()
            if not line:
                break
            k, _, v = line.partition(b":")
            k, v = k.strip().lower(), v.strip().lower()
            if k == b"content-length":
                clen = int(v)
            elif k == b"transfer-encoding" and b"chunked" in v:
                chunked = True
            elif k == b"connection" and v == b"close":
                close = True
            elif k == b"server-timing":
                self.timing = v   # parsed by the caller, after its clock stopped
        parts = []
        if chunked:
            while True:
                n = int(self._line().split(b";")[0], 16)
                if n == 0:
                    while self._line():
                        pass
                    break
                d = self._take(n)
                self._take(2)
                if on_chunk:
                    on_chunk(d)
                parts.append(d)
        elif clen is not None:
            parts.append(self._take(clen))
        if close:
            raise ConnectionError("server asked to close the connection")
        return status, b"".join(parts)


def http_request(path, body):
    data = json.dumps(body, separators=(",", ":")).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def client(args):
    """One connection: requests back to back; latencies (ns) of those started in [t0, t1)."""
    port, raw, t0, t1 = args
    c = Conn(port)
    lat, errors, first_error, timing = [], 0, "", []
    while True:
        now = time.monotonic()
        if now >= t1:
            break
        s = time.perf_counter_ns()
        try:
            status, body = c.request(raw)
        except (OSError, ValueError) as e:
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"
            c = Conn(port)
            continue
        e = time.perf_counter_ns()
        if status != 200:
            errors += 1
            first_error = first_error or f"HTTP {status}: {body[:200]!r}"
        elif now >= t0:
            lat.append(e - s)
            if c.timing:
                t = {n.decode(): float(d) * 1e3 for n, d in re.findall(rb"([\w-]+);dur=([\d.]+)", c.timing)}
                timing.append(dict(t, total=(e - s) / 1e3))
    return lat, errors, first_error, timing


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    f = int(k)
    return xs[f] if f + 1 >= len(xs) else xs[f] + (xs[f + 1] - xs[f]) * (k - f)


def scrape(port):
    """{metric: (sum, count)} of the scheduler's histograms."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for m in re.finditer(r"^srt:(\w+)_(sum|count)\{[^}]*\} (\S+)$", text, re.M):
        s, c = out.get(m.group(1), (0.0, 0.0))
        out[m.group(1)] = (float(m.group(3)), c) if m.group(2) == "sum" else (s, float(m.group(3)))
    return out


def cpu_ns(pid):
    """CPU time of every thread of a process, in ns (schedstat: exact, not tick-rounded)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
        except OSError:
            pass
    return total


def procs_of(master):
    """(worker pid, scheduler pid) among nginx master's descendants, by their titles (the scheduler
    is a child of the master's helper process)."""
    worker = sched = None
    pending, seen = [str(master)], []
    while pending:
        kids = subprocess.run(["pgrep", "-P", pending.pop()], capture_output=True, text=True).stdout.split()
        pending += kids
        seen += kids
    for p in seen:
        title = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ")
        if b"worker process" in title:
            worker = int(p)
        elif b"srt scheduler" in title:
            sched = int(p)
    return worker, sched


def hist_mean_us(before, after, name):
    s0, c0 = before.get(name, (0, 0))
    s1, c1 = after.get(name, (0, 0))
    return (s1 - s0) / (c1 - c0) * 1e6 if c1 > c0 else float("nan")


def run_case(port, raw, conc, duration, warm=1.0, pids=()):
    t0 = time.monotonic() + warm
    cpu = []
    with mp.get_context("fork").Pool(conc) as pool:
        job = pool.map_async(client, [(port, raw, t0, t0 + duration)] * conc)
        time.sleep(max(0.0, t0 - time.monotonic()))
        cpu0 = [cpu_ns(p) for p in pids]
        time.sleep(max(0.0, t0 + duration - time.monotonic()))
        cpu = [(cpu_ns(p) - c) for p, c in zip(pids, cpu0)]
        res = job.get()
    lat = [x for r in res for x in r[0]]
    errors = sum(r[1] for r in res)
    first = next((r[2] for r in res if r[2]), "")
    timing = [t for r in res for t in r[3]]
    seg = {}
    if timing:
        # per request: what the client waited for beyond the scheduler's own time
        seg["outside_model_p50_us"] = pct([t["total"] - t["srt-model"] for t in timing], 50)
        for k in ("srt-parse", "srt-handoff", "srt-model", "srt-notify"):
            seg[k + "_p50_us"] = pct([t[k] for t in timing], 50)
        # the rest: reading the request, writing the response, the client itself
        seg["rest_p50_us"] = pct([t["total"] - sum(t[k] for k in ("srt-parse", "srt-handoff", "srt-model", "srt-notify"))
                                  for t in timing], 50)
    return {"timing": seg,"requests": len(lat), "errors": errors, "first_error": first, "rps": len(lat) / duration,
            "p50_us": pct(lat, 50) / 1e3, "p99_us": pct(lat, 99) / 1e3, "mean_us": statistics.fmean(lat) / 1e3 if lat else float("nan"),
            "cpu_us_per_req": [c / 1e3 / max(1, len(lat)) for c in cpu]}


def stream_case(port, raw, n_req):
    """Streamed requests one at a time: ITL between SSE token events, tokens per event."""
    c = Conn(port)
    itl, events, e2e, tpot, tokens = [], 0, [], [], 0
    for _ in range(n_req):
        stamps = []

        def on_chunk(d):
            t = time.perf_counter_ns()
            for ev in d.split(b"\n\n"):
                if ev.startswith(b"data: {") and b'"index"' in ev:
                    stamps.append(t)
        s = time.perf_counter_ns()
        status, body = c.request(raw, on_chunk)
        e2e.append(time.perf_counter_ns() - s)
        if status != 200:
            sys.exit(f"bench_http: streamed request failed: HTTP {status} {body[:200]!r}")
        n = int(re.findall(rb'"completion_tokens":\s*(\d+)', body)[-1])
        tokens += n
        events += len(stamps)
        itl += [(b - a) / 1e3 for a, b in zip(stamps, stamps[1:])]
        if n > 1 and len(stamps) > 1:
            tpot.append((stamps[-1] - stamps[0]) / 1e3 / (n - 1))
    return {"events": events, "tokens": tokens, "itl_p50_us": pct(itl, 50), "itl_p99_us": pct(itl, 99),
            "itl_mean_us": statistics.fmean(itl) if itl else float("nan"), "tpot_p50_us": pct(tpot, 50),
            "e2e_p50_ms": pct(e2e, 50) / 1e6}


def bench_sched(args, input_len, output_len, num):
    cmd = [args.bench_sched, args.model, "--dataset", "random", "--radix", "off", "--num", str(num),
           "--input-len", str(input_len), "--output-len", str(output_len), "--max-running", "1",
           "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    kv = dict(x.split("=", 1) for x in out.split())
    return {"cmd": " ".join(cmd), "per_request_us": float(kv["wall_s"]) / num * 1e6,
            "itl_mean_us": float(kv["itl_mean_ms"]) * 1e3, "ttft_mean_us": float(kv["ttft_mean_ms"]) * 1e3}


NGINX_HTTP = """    keepalive_requests 10000000;
    keepalive_timeout 300s;
"""

NGINX_LOCATIONS = """        location = /return200 {{ default_type application/json; return 200 '{{"ok":true}}'; }}
        location = /metrics {{ srt_metrics on; }}
        location = /health {{ srt_model {model} name=tiny; srt_device cpu; srt_threads {threads}; srt_radix_cache off; srt_scheduler_spin {spin}; }}
        location /v1/ {{
            srt_model {model} name=tiny;
            srt_device cpu;
            srt_threads {threads};
            srt_radix_cache off;
            srt_context_length 2048;
            srt_max_running_requests 64;
            srt_server_timing on;
            srt_scheduler_spin {spin};
        }}
"""


def case_bodies(n_prompt_ids):
    """The completions prompt (token ids) and each case's (path, body)."""
    ids = [1] + [100 + (i * 7919) % 40000 for i in range(1, n_prompt_ids)]
    return ids, {
        "return200": ("/return200", {"model": "tiny", "prompt": ids, "max_tokens": 1, "temperature": 0}),
        "completions": ("/v1/completions", {"model": "tiny", "prompt": ids, "max_tokens": 1, "temperature": 0}),
        "chat": ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}],
                                          "max_tokens": 1, "temperature": 0}),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, ".cache/models/tiny-llama"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--duration", type=float, default=4.0, help="seconds measured per case (after 1 s warm-up)")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--port", type=int, default=28670)
    ap.add_argument("--prompt-ids", type=int, default=8, help="prompt length of the completions case")
    ap.add_argument("--stream-tokens", type=int, default=64)
    ap.add_argument("--stream-requests", type=int, default=20)
    ap.add_argument("--offline-requests", type=int, default=2000)
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--module", default=os.path.join(ROOT, "build/nginx/ngx_http_srt_module.so"))
    ap.add_argument("--bench-sched", default=os.path.join(ROOT, "build/bin/srt-bench-sched"))
    ap.add_argument("--bench-chan", default=os.path.join(ROOT, "build/bin/srt-bench-chan"))
    ap.add_argument("--json", default=None, help="write every figure here as JSON")
    ap.add_argument("--spin", default="off", help="srt_scheduler_spin for the model (off, 200us, ...)")
    ap.add_argument("--pin", type=int, default=None, metavar="CPU",
                    help="run nginx (worker and scheduler) and the clients on this one CPU: every hand-off "
                         "then stays on one CPU, which takes the cost of waking an idle CPU out of the figures")
    args = ap.parse_args()
    for p in (args.module, args.bench_sched, args.model):
        if not os.path.exists(p):
            sys.exit(f"bench_http: {p} missing (make; scripts/make_tiny_models.py)")
    concs = [int(x) for x in args.concurrency.split(",")]
    if args.pin is not None:
        # children inherit the affinity: the worker, the helper and the scheduler process
        os.sched_setaffinity(0, {args.pin})
    R = {"load_before": open("/proc/loadavg").read().split()[:3]}
    locations = NGINX_LOCATIONS.format(model=os.path.abspath(args.model), threads=args.threads, spin=args.spin)
    with PrivateNginx(args.nginx, args.module, "srt-bench-http.", args.port, locations, NGINX_HTTP) as ngx:
        ngx.wait_ready("/health")
        master = ngx.master
        worker, sched = procs_of(master)
        if not worker or not sched:
            sys.exit("bench_http: cannot find the nginx worker and the scheduler process")
        ids, bodies = case_bodies(args.prompt_ids)
        # prompt length of the chat case after the template, for the offline anchor
        c = Conn(args.port)
        st, body = c.request(http_request(*bodies["chat"]))
        if st != 200:
            sys.exit(f"bench_http: chat request failed: {st} {body[:300]!r}")
        chat_prompt = json.loads(body)["usage"]["prompt_tokens"]
        st, body = c.request(http_request(*bodies["completions"]))
        if st != 200:
            sys.exit(f"bench_http: completions request failed: {st} {body[:300]!r}")
        c.sock.close()

        R["cases"] = {}
        for name in ("return200", "completions", "chat"):
            for conc in concs:
                before = scrape(args.port)
                r = run_case(args.port, http_request(*bodies[name]), conc, args.duration, pids=(worker, sched))
                after = scrape(args.port)
                if name != "return200":
                    r["sched_e2e_mean_us"] = hist_mean_us(before, after, "e2e_request_latency_seconds")
                R["cases"][f"{name} c={conc}"] = r
                print(f"{name:12} c={conc}: {r['rps']:8.0f} req/s  p50 {r['p50_us']:8.1f} us  p99 {r['p99_us']:8.1f} us"
                      f"  errors {r['errors']}" + (f"  sched e2e mean {r['sched_e2e_mean_us']:.1f} us" if 'sched_e2e_mean_us' in r else ""),
                      f"  cpu us/req worker {r['cpu_us_per_req'][0]:.1f} scheduler {r['cpu_us_per_req'][1]:.1f}", flush=True)
                if r["errors"]:
                    print(f"  first error: {r['first_error']}", flush=True)
                if r["timing"]:
                    t = r["timing"]
                    print(f"{'':12}      Server-Timing p50 us: parse {t['srt-parse_p50_us']:.1f}  handoff {t['srt-handoff_p50_us']:.1f}"
                          f"  model {t['srt-model_p50_us']:.1f}  notify {t['srt-notify_p50_us']:.1f}  rest {t['rest_p50_us']:.1f};"
                          f"  client latency minus model {t['outside_model_p50_us']:.1f}", flush=True)

        sbody = {"model": "tiny", "prompt": ids, "max_tokens": args.stream_tokens, "temperature": 0,
                 "ignore_eos": True, "stream": True,
                 "stream_options": {"include_usage": True}}
        before = scrape(args.port)
        R["stream"] = stream_case(args.port, http_request("/v1/completions", sbody), args.stream_requests)
        after = scrape(args.port)
        R["stream"]["sched_itl_mean_us"] = hist_mean_us(before, after, "inter_token_latency_seconds")
        nbody = dict(sbody, stream=False)
        del nbody["stream_options"]
        R["nostream"] = run_case(args.port, http_request("/v1/completions", nbody), 1, 2.0, warm=0.5)

    # offline anchors, after nginx is gone, on the same machine
    R["offline"] = {
        "completions": bench_sched(args, args.prompt_ids, 1, args.offline_requests),
        "chat": bench_sched(args, chat_prompt, 1, args.offline_requests),
        "decode": bench_sched(args, args.prompt_ids, args.stream_tokens, args.stream_requests),
    }
    R["chat_prompt_tokens"] = chat_prompt
    # the floor: one request's round trip through the channel between two processes (no HTTP,
    # no model), with the same scheduler spin
    spin_us = 0 if args.spin == "off" else int(args.spin[:-2]) * (1000 if args.spin.endswith("ms") else 1)
    out = subprocess.run([args.bench_chan, "--spin", str(spin_us), "--requests", "20000"],
                         capture_output=True, text=True, check=True).stdout
    R["chan_floor"] = {k: float(v) for k, v in (x.split("=", 1) for x in out.split())}
    R["load_after"] = open("/proc/loadavg").read().split()[:3]

    cs = R["cases"]
    print(f"\nmodel {args.model}, srt_threads {args.threads}, {args.duration:g} s per case, load average "
          f"{' '.join(R['load_before'])} -> {' '.join(R['load_after'])}")
    print("| case | concurrency | req/s | p50 us | p99 us | req/s vs return 200 | scheduler e2e mean us (in run) | nginx worker CPU us/request | scheduler CPU us/request |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key, r in cs.items():
        name, conc = key.split(" c=")
        base = cs[f"return200 c={conc}"]
        print(f"| {name} | {conc} | {r['rps']:.0f} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | "
              f"{r['rps'] / base['rps']:.3f} | {r.get('sched_e2e_mean_us', float('nan')):.1f} | "
              f"{r['cpu_us_per_req'][0]:.1f} | {r['cpu_us_per_req'][1] if name != 'return200' else 0:.1f} |")
    print("\nmodule's added latency at concurrency 1 (p50 - p50(return 200) - model time):")
    print("| case | prompt tokens | p50 - return200 p50 us | offline model us/request | module adds (offline anchor) us | module adds (in-run scheduler e2e) us | module adds (per request, Server-Timing) us |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    added = {}
    for name, plen in (("completions", args.prompt_ids), ("chat", chat_prompt)):
        if f"{name} c=1" not in cs:
            continue
        d = cs[f"{name} c=1"]["p50_us"] - cs["return200 c=1"]["p50_us"]
        off = R["offline"][name]["per_request_us"]
        inrun = cs[f"{name} c=1"]["sched_e2e_mean_us"]
        t = cs[f"{name} c=1"]["timing"]
        per_req = t["outside_model_p50_us"] - cs["return200 c=1"]["p50_us"] if t else float("nan")
        added[name] = {"http_minus_anchor_us": d, "offline_us": off, "added_offline_us": d - off, "added_inrun_us": d - inrun,
                       "added_per_request_us": per_req}
        print(f"| {name} | {plen} | {d:.1f} | {off:.1f} | {d - off:.1f} | {d - inrun:.1f} | **{per_req:.1f}** |")
    R["added"] = added
    fl = R["chan_floor"]
    print(f"\nchannel floor (build/bin/srt-bench-chan --spin {spin_us}: two processes, no HTTP, no model): round trip p50 "
          f"{fl['rtt_p50_us']:.1f} us (hand-off {fl['handoff_p50_us']:.1f}, notify {fl['notify_p50_us']:.1f}), p99 {fl['rtt_p99_us']:.1f} us")
    for name in added:
        a = added[name]["added_per_request_us"]
        print(f"  {name}: module adds {a:.1f} us per request = channel floor {fl['rtt_p50_us']:.1f} + "
              f"{a - fl['rtt_p50_us']:.1f} us of HTTP-side work (parse, template, tokenize, detokenize, JSON)")
    print("\nnginx worker CPU per request, module minus return 200 (concurrency 1; load-independent):")
    for name in ("completions", "chat"):
        if f"{name} c=1" in cs:
            w = cs[f"{name} c=1"]["cpu_us_per_req"][0] - cs["return200 c=1"]["cpu_us_per_req"][0]
            sc = cs[f"{name} c=1"]["cpu_us_per_req"][1]
            off = R["offline"][name]["per_request_us"]
            added[name]["worker_cpu_added_us"] = w
            print(f"  {name}: worker +{w:.1f} us; scheduler process {sc:.1f} us/request vs offline {off:.1f} us "
                  f"(+{sc - off:.1f} us: channel pick-up, result hand-off, wake-ups)")
    s, dec, ns = R["stream"], R["offline"]["decode"], R["nostream"]
    print(f"\nSSE: {args.stream_requests} streamed requests x {args.stream_tokens} tokens, one at a time "
          f"({s['tokens']} tokens in {s['events']} SSE events: a token that ends inside a UTF-8 character is held "
          f"back and sent with the next)")
    print(f"client time per output token (first to last event / (tokens - 1)) p50 {s['tpot_p50_us']:.1f} us vs offline "
          f"decode {dec['itl_mean_us']:.1f} us: streaming path adds {s['tpot_p50_us'] - dec['itl_mean_us']:.1f} us per token "
          f"({s['tpot_p50_us'] - s['sched_itl_mean_us']:.1f} us vs the in-run scheduler ITL)")
    print(f"client ITL p50 {s['itl_p50_us']:.1f} us, p99 {s['itl_p99_us']:.1f} us, mean {s['itl_mean_us']:.1f} us; "
          f"scheduler ITL in run (mean) {s['sched_itl_mean_us']:.1f} us; offline decode per token (mean) {dec['itl_mean_us']:.1f} us")
    print(f"streaming adds {s['itl_p50_us'] - dec['itl_mean_us']:.1f} us per token (client ITL p50 - offline decode); "
          f"{s['itl_p50_us'] - s['sched_itl_mean_us']:.1f} us vs the in-run scheduler ITL")
    print(f"streamed e2e p50 {s['e2e_p50_ms']:.2f} ms vs the same request not streamed p50 {ns['p50_us'] / 1e3:.2f} ms")
    print("\noffline anchors:")
    for k, v in R["offline"].items():
        print(f"  {k}: {v['cmd']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(R, f, indent=1)
    shutil.rmtree(ngx.pfx, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
