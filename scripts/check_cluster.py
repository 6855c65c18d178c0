#!/usr/bin/env python3
"""Checks of srt_prefix_affinity and graceful drain on a real cluster (three ngx_srt nodes on
127.0.0.2-4, an nginx front on 127.0.0.1), printing TAP-style "ok"/"not ok" lines for
t/160-affinity.t. Standard library only.

  affinity     a multi-turn workload through the front: every turn after the first lands where
               the conversation's previous turn went (the front says why in X-Srt-Route), the
               nodes' prefix-cache hit rate is at least 0.9 of one node's and above round
               robin's
  kill         a node killed with SIGKILL mid-run: every request is answered (200) or cleanly
               failed (an HTTP error, or a stream closed without [DONE]), none hangs, and the
               killed node's conversations move to the others
  drain        a node sent `nginx -s quit` mid-run: its in-flight requests finish with 200,
               /health on a connection opened before says 503 "draining", new requests go to
               the other nodes and all succeed
  reload       the front reloaded with its servers reordered: no prefix credited to the wrong one
  fuzz         hostile requests through the front (scripts/fuzz_http.py): no front worker crashes

    scripts/check_cluster.py --model .cache/models/tiny-llama --port 2610 [--only kill]
"""
import argparse
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving  # noqa: E402
import cluster  # noqa: E402

FAILS = 0


def ok(cond, name):
    global FAILS
    print(("ok " if cond else "not ok ") + name, flush=True)
    if not cond:
        FAILS += 1
    return cond


def bench_args(port, **kw):
    argv = ["--base-url", f"http://127.0.0.1:{port}", "--model", "m", "--dataset-name", "multi-turn",
            "--warmup-requests", "0", "--timeout", "60"]
    for k, v in kw.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    ap_args = bench_serving_args(argv)
    return ap_args


def bench_serving_args(argv):
    """bench_serving's argument parser, without running it."""
    holder = {}
    real_run = bench_serving.run_multiturn
    real_report = bench_serving.report

    def grab(args, convs):
        holder["args"], holder["convs"] = args, convs
        return [], 1.0

    bench_serving.run_multiturn = grab
    bench_serving.report = lambda args, results, duration: {"failed": 0}
    try:
        bench_serving.main(argv)
    finally:
        bench_serving.run_multiturn = real_run
        bench_serving.report = real_report
    return holder["args"], holder["convs"]


def node_of(r):
    """The node that answered, from X-Srt-Route: "$upstream_addr $srt_prefix_affinity", where
    $upstream_addr lists every peer tried ("127.0.0.2:2611, 127.0.0.3:2611 prefix 96/120")."""
    addrs = re.findall(r"\d+\.\d+\.\d+\.\d+:\d+", r.route or "")
    return addrs[-1] if addrs else ""


def why_of(r):
    m = re.search(r"\d+:\d+ (\S+) \d+/\d+$", r.route or "")
    return m.group(1) if m else ""


def conversations(results_by_conv):
    """[(node of each turn)] per conversation."""
    return [[node_of(r) for r in rs] for rs in results_by_conv]


def run_convs(args, convs, on_turn=None):
    """Like bench_serving.run_multiturn, keeping each conversation's results in order."""
    import urllib.parse
    url = urllib.parse.urlparse(args.base_url)
    by_conv = [[] for _ in convs]

    def chat(i):
        system, users, out_len = convs[i]
        msgs = [{"role": "system", "content": system}]
        for t, u in enumerate(users):
            msgs.append({"role": "user", "content": u})
            r = bench_serving.send(args, url, list(msgs), 0, out_len)
            by_conv[i].append(r)
            if on_turn:
                on_turn(i, t, r)
            msgs.append({"role": "assistant", "content": r.text if r.ok else ""})

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=args.max_concurrency or len(convs)) as ex:
        list(ex.map(chat, range(len(convs))))
    return by_conv


def hit_rate(by_conv):
    rs = [r for rs in by_conv for r in rs if r.ok and r.usage_prompt]
    p = sum(r.usage_prompt for r in rs)
    return sum(r.usage_cached or 0 for r in rs) / p if p else 0.0


def check_affinity(a, tmp):
    rates = {}
    for mode in ("single", "round-robin", "affinity"):
        c = cluster.Cluster(f"{tmp}/{mode}", a.model, port=a.port, mode=mode)
        try:
            c.start()
            args, convs = bench_args(a.port, mt_conversations=9, mt_turns=4, mt_system_prompts=3,
                                     mt_system_len=256, mt_user_len=32, mt_output_len=16,
                                     max_concurrency=3, tokenizer=a.tokenizer or "")
            by_conv = run_convs(args, convs)
            rates[mode] = hit_rate(by_conv)
            ok(all(r.ok for rs in by_conv for r in rs), f"{mode}: every request answered")
            if mode == "affinity":
                nodes = conversations(by_conv)
                stay = sum(1 for n in nodes for t in range(1, len(n)) if n[t] == n[t - 1])
                turns = sum(len(n) - 1 for n in nodes)
                ok(stay == turns, f"affinity: each later turn went where its conversation was "
                                  f"({stay}/{turns})")
                ok(len({x for n in nodes for x in n}) >= 2,
                   f"affinity: conversations spread over nodes ({sorted({x for n in nodes for x in n})})")
                why = [why_of(r) for rs in by_conv for r in rs[1:]]
                ok(all(w == "prefix" for w in why), f"affinity: later turns routed by prefix ({set(why)})")
        finally:
            c.stop()
    ok(rates["affinity"] >= 0.9 * rates["single"],
       f"affinity hit rate {rates['affinity']:.3f} >= 0.9 x single node {rates['single']:.3f}")
    ok(rates["affinity"] > rates["round-robin"] + 0.1,
       f"affinity hit rate {rates['affinity']:.3f} clearly above round robin {rates['round-robin']:.3f}")


def check_kill(a, tmp):
    c = cluster.Cluster(f"{tmp}/kill", a.model, port=a.port, mode="affinity")
    try:
        c.start()
        args, convs = bench_args(a.port, mt_conversations=9, mt_turns=6, mt_system_prompts=3,
                                 mt_system_len=256, mt_user_len=32, mt_output_len=48,
                                 max_concurrency=6, tokenizer=a.tokenizer or "")
        killed = {}
        victim = f"{c.addrs[0]}:{c.node_port}"
        lock = threading.Lock()

        def on_turn(i, t, r):
            # kill the node as soon as a conversation's second turn was served there
            with lock:
                if not killed and t >= 1 and node_of(r) == victim:
                    killed["at"] = time.perf_counter()
                    c.kill_node(0)

        t0 = time.time()
        by_conv = run_convs(args, convs, on_turn)
        rs = [r for x in by_conv for r in x]
        ok(bool(killed), f"kill: node {victim} was killed with SIGKILL mid-run")
        ok(not c.nodes[0].alive(), "kill: it is gone")
        # failed cleanly: an error status, or a stream cut short (its header had gone out:
        # nginx retries on another peer only while nothing went to the client)
        clean = all(r.ok or r.error.startswith(("HTTP 5", "ConnectionError", "RemoteDisconnected",
                                                 "IncompleteRead", "ConnectionResetError"))
                    for r in rs)
        ok(sum(not r.ok for r in rs) <= 6, "kill: at most the requests streaming from it failed")
        ok(clean, "kill: every request answered or cleanly failed ("
           + f"{sum(r.ok for r in rs)} ok, {sum(not r.ok for r in rs)} failed: "
           + ", ".join(sorted({r.error[:40] for r in rs if not r.ok})) + ")")
        ok(not any("timed out" in r.error for r in rs), "kill: no request hung")
        ok(time.time() - t0 < 120, f"kill: the run ended ({time.time() - t0:.1f} s)")
        moved = [x for x in by_conv if any(node_of(r) == victim for r in x)]
        ok(len(moved) > 0 and all(x[-1].ok and node_of(x[-1]) != victim for x in moved),
           f"kill: the {len(moved)} conversations the killed node had moved to the others and finished there")
        late = [r for r in rs if killed and r.start > killed["at"] + 0.5]
        # the run may end within 0.5 s of the kill (all of it takes 0.7 s here, and some runs
        # sent nothing later): the killed node's conversations are sent again, from their first
        # turn, once 0.5 s have passed
        if killed:
            time.sleep(max(0.0, killed["at"] + 0.6 - time.perf_counter()))
            again = [convs[i] for i, x in enumerate(by_conv) if any(node_of(r) == victim for r in x)]
            late += [r for x in run_convs(args, again) for r in x]
        ok(len(late) > 0 and all(r.ok for r in late),
           f"kill: every request sent after it ({len(late)}) succeeded")
    finally:
        c.stop()


def check_drain(a, tmp):
    c = cluster.Cluster(f"{tmp}/drain", a.model, port=a.port, mode="round-robin")
    try:
        c.start()
        node = c.addrs[1]
        # a connection opened before the drain: its request arrives during it
        probe = socket.create_connection((node, c.node_port), timeout=10)
        res = {}

        # 1900 tokens each (1.2 s here for both; 1200 took 0.75 s, about when the quit went
        # out 0.7 s in, so they often ended before the drain began)
        def long_request(k):
            body = json.dumps({"model": "m", "prompt": "hello " * 40, "max_tokens": 1900,
                               "temperature": 0, "ignore_eos": True})
            try:
                st, b = cluster.request(node, c.node_port, "POST", "/v1/completions", body, timeout=120)
                res[k] = (st, json.loads(b).get("usage", {}).get("completion_tokens"))
            except Exception as e:  # noqa: BLE001
                res[k] = ("error", repr(e))

        ths = [threading.Thread(target=long_request, args=(k,)) for k in range(2)]
        for t in ths:
            t.start()
        # the quit goes out once both run, as the node's /health shows
        running = None
        for _ in range(1000):
            try:
                st, b = cluster.request(node, c.node_port, "GET", "/v1/health", timeout=5)
                running = json.loads(b).get("running") if st == 200 else None
            except (OSError, ValueError):
                pass
            if running == 2:
                break
            time.sleep(0.01)
        ok(running == 2, f"drain: both long requests run on {node} (running {running})")
        ok(c.nodes[1].signal("quit"), f"drain: nginx -s quit sent to {node}")
        time.sleep(0.3)
        probe.sendall(b"GET /v1/health HTTP/1.0\r\nHost: x\r\n\r\n")
        got = b""
        while True:
            d = probe.recv(65536)
            if not d:
                break
            got += d
        probe.close()
        ok(got.startswith(b"HTTP/1.1 503") and b'"draining"' in got,
           "drain: /health says 503 draining: " + got.split(b"\r\n\r\n", 1)[-1][:80].decode(errors="replace"))
        try:
            socket.create_connection((node, c.node_port), timeout=5).close()
            refused = False
        except OSError:
            refused = True
        ok(refused, "drain: the draining node accepts no new connection")
        # the front moves on: everything it sends now succeeds elsewhere
        args, convs = bench_args(a.port, mt_conversations=4, mt_turns=3, mt_system_prompts=2,
                                 mt_system_len=64, mt_user_len=16, mt_output_len=8, max_concurrency=4,
                                 tokenizer=a.tokenizer or "")
        rs = [r for x in run_convs(args, convs) for r in x]
        ok(all(r.ok for r in rs), f"drain: {len(rs)} requests through the front during the drain, all 200")
        ok(not any(node_of(r) == f"{node}:{c.node_port}" for r in rs),
           "drain: none of them was answered by the draining node")
        print(f"# drain: {sum(node + ':' in (r.route or '') for r in rs)} of them tried it first and moved on")
        for t in ths:
            t.join(150)
        ok(all(res.get(k) == (200, 1900) for k in range(2)),
           f"drain: the requests in flight finished whole: {res}")
        for _ in range(100):
            if not c.nodes[1].alive():
                break
            time.sleep(0.1)
        ok(not c.nodes[1].alive(), "drain: then the node exited")
    finally:
        c.stop()


def check_reload(a, tmp):
    """A reload that reorders the upstream's servers: no prefix is credited to a server that
    never saw it (the tree's peer bits are per position in the list)."""
    c = cluster.Cluster(f"{tmp}/reload", a.model, port=a.port, mode="affinity")
    try:
        c.start()
        body = json.dumps({"model": "m", "max_tokens": 2, "temperature": 0,
                           "messages": [{"role": "user", "content": "reload check " * 20}]})
        import http.client

        def ask():
            h = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
            h.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            r = h.getresponse()
            r.read()
            route = r.getheader("X-Srt-Route") or ""
            h.close()
            return r.status, route

        st1, r1 = ask()
        st2, r2 = ask()
        ok(st1 == 200 and st2 == 200 and r2.split(" ")[0] == r1.split(" ")[0] and " prefix " in r2,
           f"reload: the same prompt twice goes to the same node by prefix ({r1} / {r2})")
        conf = os.path.join(c.front.prefix, "conf/nginx.conf")
        with open(conf) as f:
            text = f.read()
        lines = [ln for ln in text.splitlines() if ln.strip().startswith("server 127.0.0.")]
        for old, new in zip(lines, reversed(lines)):
            text = text.replace(old, "@@" + new.strip(), 1)
        text = text.replace("@@", "        ")
        with open(conf, "w") as f:
            f.write(text)
        first = r1.split(" ")[0]
        ok(c.front.signal("reload"), "reload: the front's servers reversed and reloaded")
        time.sleep(1.5)
        st3, r3 = ask()
        ok(st3 == 200 and not (" prefix " in r3 and r3.split(" ")[0] != first),
           f"reload: no prefix credited to a server that never had it ({r3}, first went to {first})")
    finally:
        c.stop()


def check_fuzz(a, tmp):
    """Hostile requests through the front (scripts/fuzz_http.py): the balancer parses, renders
    and tokenizes every body before the node sees it; no front worker may crash."""
    import subprocess
    c = cluster.Cluster(f"{tmp}/fuzz", a.model, port=a.port, mode="affinity")
    try:
        c.start()
        r = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_http.py"),
                            "--port", str(a.port), "--iterations", "300", "--model", "m", "--seed", "18"],
                           capture_output=True, text=True, timeout=300)
        ok(r.returncode == 0, "fuzz: 300 hostile requests through the front, every answer well-formed: "
           + (r.stdout.strip().splitlines() or [""])[0])
        with open(os.path.join(c.front.prefix, "logs/error.log")) as f:
            log = f.read()
        ok("exited on signal" not in log and "[alert]" not in log, "fuzz: no front worker crashed")
    finally:
        c.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=2610)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--only", default=None, help="affinity, kill, drain, reload or fuzz")
    a = ap.parse_args()
    if a.tokenizer is None and os.path.exists(os.path.join(a.model, "tokenizer.json")):
        a.tokenizer = os.path.join(a.model, "tokenizer.json")
    tmp = tempfile.mkdtemp(prefix="srt-check-")
    os.chmod(tmp, 0o755)   # the nodes' workers write under it (cluster.py)
    for name, fn in (("affinity", check_affinity), ("kill", check_kill), ("drain", check_drain),
                     ("reload", check_reload), ("fuzz", check_fuzz)):
        if a.only in (None, name):
            try:
                fn(a, tmp)
            except Exception as e:  # noqa: BLE001 - a crash of the check is a failure
                ok(False, f"{name}: {type(e).__name__}: {e}")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
