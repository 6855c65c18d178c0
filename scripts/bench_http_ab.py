#!/usr/bin/env python3
"""Same-run A/B of nginx module builds on one bench_http.py case, rounds interleaved.

    scripts/bench_http_ab.py [--rounds 6] [--case completions|chat] [--conc 4] [--duration 4]
                             BEFORE.so AFTER.so [MORE.so ...]

Each round starts every module's private nginx in turn (order reversed every other round) with
bench_http.py's locations (tiny-llama, srt_threads 1, radix cache off), measures the case for
--duration s and stops it; the medians over rounds are printed relative to the first module.
On a shared 2-core VM single runs swing by 20-30%: interleaving is what makes a few percent
visible. Build a module at another commit with a worktree and `make nginx-module`.
"""
import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_http as bh  # noqa: E402
from bench_nginx import PrivateNginx  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--conc", type=int, default=4)
    ap.add_argument("--case", default="completions", choices=("completions", "chat"))
    ap.add_argument("--port", type=int, default=28770)
    ap.add_argument("--model", default=os.path.join(ROOT, ".cache/models/tiny-llama"))
    ap.add_argument("--nginx", default="/usr/sbin/nginx")
    ap.add_argument("mods", nargs="+")
    a = ap.parse_args()
    mods = [os.path.abspath(m) for m in a.mods]
    locs = bh.NGINX_LOCATIONS.format(model=os.path.abspath(a.model), threads=1, spin="off")
    _, bodies = bh.case_bodies(8)   # bench_http.py's default --prompt-ids
    res = {m: [] for m in mods}
    for rnd in range(a.rounds):
        for m in (mods if rnd % 2 == 0 else mods[::-1]):
            with PrivateNginx(a.nginx, m, "srt-ab.", a.port, locs, bh.NGINX_HTTP) as ngx:
                ngx.wait_ready("/health")
                w, s = bh.procs_of(ngx.master)
                r = bh.run_case(a.port, bh.http_request(*bodies[a.case]), a.conc, a.duration, pids=(w, s))
                if r["errors"]:
                    sys.exit(f"bench_http_ab: {m}: {r['first_error']}")
                t = r["timing"] or {}
                res[m].append((r["rps"], r["cpu_us_per_req"][1], t.get("srt-model_p50_us", 0)))
                print(f"round {rnd} {os.path.basename(m):28} {r['rps']:7.0f} req/s  scheduler CPU "
                      f"{r['cpu_us_per_req'][1]:7.1f} us/req  srt-model p50 {t.get('srt-model_p50_us', 0):7.0f} us", flush=True)
    print(f"{a.case} c={a.conc}, {a.rounds} rounds x {a.duration:g} s, medians:")
    base = statistics.median(x[0] for x in res[mods[0]])
    for m, v in res.items():
        rps = statistics.median(x[0] for x in v)
        print(f"  {os.path.basename(m):28} {rps:7.0f} req/s ({rps / base:.3f})  scheduler CPU "
              f"{statistics.median(x[1] for x in v):7.1f} us/req  srt-model p50 {statistics.median(x[2] for x in v):6.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
