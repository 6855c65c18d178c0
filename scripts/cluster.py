#!/usr/bin/env python3
"""Several ngx_srt nodes behind one nginx front, on this machine. Standard library only.

Nodes listen on 127.0.0.2, 127.0.0.3, ... (loopback addresses Linux answers without setup),
the front on 127.0.0.1. The front is plain nginx: proxy_pass to an upstream{} whose balancer
is srt_prefix_affinity (cache-aware), nginx's round robin, or a single node.

    from cluster import Cluster
    c = Cluster("/tmp/cl", model=".../tiny-llama", nodes=3, port=2610, mode="affinity")
    c.start(); ...; c.kill_node(1); c.drain_node(2); c.stop()

Run as a script it starts a cluster and waits (Ctrl-C stops it):
    scripts/cluster.py --model .cache/models/tiny-llama --mode affinity --port 2610
"""
import argparse
import http.client
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NGINX = os.environ.get("TEST_NGINX_BINARY", "/usr/sbin/nginx")
MODULE = os.environ.get("TEST_NGINX_SRT_MODULE", os.path.join(ROOT, "build/nginx/ngx_http_srt_module.so"))
# As the test harnesses do: under a root master the workers (and the scheduler) run as
# TEST_NGINX_WORKER_USER (scripts/srt-user.sh makes one that can read the models), else root.
USER = ("user %s;" % (os.environ.get("TEST_NGINX_WORKER_USER") or "root")) if os.geteuid() == 0 else ""

COMMON = """
load_module {module};
{user}
master_process on;
daemon on;
worker_processes {workers};
pid {p}/logs/nginx.pid;
error_log {p}/logs/error.log info;
events {{ worker_connections 1024; }}
"""

TEMPS = """
    client_body_temp_path {p}/client_body_temp;
    proxy_temp_path {p}/proxy_temp;
    fastcgi_temp_path {p}/fastcgi_temp;
    uwsgi_temp_path {p}/uwsgi_temp;
    scgi_temp_path {p}/scgi_temp;
"""

NODE = COMMON + """
http {{
    access_log off;
""" + TEMPS + """
    srt_temp_path {p}/srt_temp;
    server {{
        listen {addr}:{port};
        location /v1/ {{
            srt_model {model} name=m;
            srt_device cpu;
            srt_threads 1;
            srt_context_length {ctx};
            srt_max_total_tokens {kv};
            srt_max_running_requests 16;
            srt_wait_ready 60s;
            add_header X-Srt-Load $srt_load always;
        }}
        location = /metrics {{ srt_metrics on; }}
    }}
}}
"""

FRONT = COMMON + """
http {{
    log_format route '$upstream_addr $status $srt_prefix_affinity';
    access_log {p}/logs/access.log route;
""" + TEMPS + """
    client_body_buffer_size 1m;
    upstream llm {{
        {balancer}
{servers}
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        location /v1/ {{
            proxy_pass http://llm;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 120s;
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 3;
            add_header X-Srt-Route "$upstream_addr $srt_prefix_affinity" always;
        }}
    }}
}}
"""


def request(host, port, method, path, body=None, timeout=30):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class Nginx:
    def __init__(self, prefix, conf):
        self.prefix = prefix
        for d in (prefix, os.path.join(prefix, "logs"), os.path.join(prefix, "conf")):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o755)
        with open(os.path.join(prefix, "conf/nginx.conf"), "w") as f:
            f.write(conf)

    def cmd(self, *extra):
        return subprocess.run([NGINX, "-p", self.prefix + "/", "-c", "conf/nginx.conf", *extra],
                              capture_output=True, text=True)

    def start(self):
        r = self.cmd()
        if r.returncode != 0:
            raise RuntimeError(f"nginx in {self.prefix} did not start: {r.stderr.strip()}")

    def master_pid(self):
        try:
            with open(os.path.join(self.prefix, "logs/nginx.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def pids(self):
        """The master and its children (workers, the scheduler supervisor and scheduler)."""
        m = self.master_pid()
        if m is None:
            return []
        out, todo = [], [m]
        while todo:
            p = todo.pop()
            out.append(p)
            try:
                with open(f"/proc/{p}/task/{p}/children") as f:
                    todo += [int(x) for x in f.read().split()]
            except OSError:
                pass
        return out

    def signal(self, sig):
        return self.cmd("-s", sig).returncode == 0

    def kill9(self):
        for p in self.pids():
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def alive(self):
        m = self.master_pid()
        if m is None:
            return False
        # a master killed with SIGKILL stays a zombie until its parent reaps it (in a
        # chroot that can take a while): a zombie does not run, so it is not alive
        try:
            with open(f"/proc/{m}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")

    def stop(self):
        if self.alive():
            self.signal("stop")
            for _ in range(100):
                if not self.alive():
                    return
                time.sleep(0.05)
            self.kill9()


class Cluster:
    def __init__(self, prefix, model, nodes=3, port=2610, mode="affinity", ctx=2048, kv=65536,
                 threshold=4, block=16, workers=1):
        self.prefix, self.model, self.port, self.mode = prefix, os.path.abspath(model), port, mode
        # the workers (another user under a root master) keep request bodies under it
        os.makedirs(prefix, exist_ok=True)
        os.chmod(prefix, 0o755)
        self.addrs = [f"127.0.0.{i + 2}" for i in range(nodes)]
        self.node_port = port + 1
        self.nodes = [Nginx(f"{prefix}/node{i}", NODE.format(
            module=MODULE, user=USER, workers=workers, p=f"{prefix}/node{i}", addr=a, port=self.node_port,
            model=self.model, ctx=ctx, kv=kv)) for i, a in enumerate(self.addrs)]
        used = self.addrs if mode != "single" else self.addrs[:1]
        servers = "\n".join(f"        server {a}:{self.node_port} max_fails=1 fail_timeout=5s;" for a in used)
        balancer = {"affinity": f"srt_prefix_affinity model={self.model} load_threshold={threshold} "
                                f"block={block} tree=8m;",
                    "round-robin": "", "single": ""}[mode]
        self.front = Nginx(f"{prefix}/front", FRONT.format(
            module=MODULE, user=USER, workers=2, p=f"{prefix}/front", port=port, balancer=balancer, servers=servers))

    def start(self, timeout=120):
        for n in self.nodes:
            n.start()
        self.front.start()
        deadline = time.time() + timeout
        for a in self.addrs:
            while True:
                try:
                    st, _ = request(a, self.node_port, "GET", "/v1/health", timeout=5)
                    if st == 200:
                        break
                except OSError:
                    pass
                if time.time() > deadline:
                    raise RuntimeError(f"node {a} not ready after {timeout}s")
                time.sleep(0.1)

    def node_metric(self, i, name):
        """Sum of a node's metric samples, from /metrics (None when the node is gone)."""
        try:
            st, body = request(self.addrs[i], self.node_port, "GET", "/metrics", timeout=5)
        except OSError:
            return None
        total = 0.0
        for line in body.decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def kill_node(self, i):
        self.nodes[i].kill9()

    def drain_node(self, i):
        self.nodes[i].signal("quit")

    def stop(self):
        self.front.stop()
        for n in self.nodes:
            n.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--mode", choices=("affinity", "round-robin", "single"), default="affinity")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--port", type=int, default=2610)
    ap.add_argument("--prefix", default="/tmp/srt-cluster")
    a = ap.parse_args()
    c = Cluster(a.prefix, a.model, a.nodes, a.port, a.mode)
    c.start()
    print(f"front http://127.0.0.1:{a.port}/v1/, nodes {', '.join(c.addrs)} port {c.node_port}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
