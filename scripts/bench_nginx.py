"""A private nginx for the benchmark scripts (bench_http.py, bench_request_hooks.py): a prefix
under /tmp, the module loaded, started as root with `user root;`, stopped at the end (the
master and every child it had gone before the caller goes on). Standard library only.

    with PrivateNginx(nginx, module, "srt-bench-x.", port, locations, http_extra="") as ngx:
        ngx.wait_ready("/health")
        ... ngx.pfx, ngx.master, ngx.children ...
"""
import os
import subprocess
import tempfile
import time
import urllib.request

CONF = """load_module {so};
master_process on;
worker_processes 1;
pid {pfx}/nginx.pid;
error_log {pfx}/error.log notice;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {pfx}/client_body_temp;
    proxy_temp_path {pfx}/proxy_temp;
    fastcgi_temp_path {pfx}/fastcgi_temp;
    uwsgi_temp_path {pfx}/uwsgi_temp;
    scgi_temp_path {pfx}/scgi_temp;
    srt_temp_path {pfx}/srt_temp;
{http_extra}    server {{
        listen 127.0.0.1:{port};
{locations}    }}
}}
"""


class PrivateNginx:
    def __init__(self, nginx, module, prefix, port, locations, http_extra=""):
        """locations, http_extra: nginx.conf text; {pfx} in them is the prefix directory."""
        self.port = port
        self.pfx = tempfile.mkdtemp(prefix=prefix)
        self.conf = os.path.join(self.pfx, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(CONF.format(so=module, pfx=self.pfx, port=port,
                                http_extra=http_extra.replace("{pfx}", self.pfx),
                                locations=locations.replace("{pfx}", self.pfx)))
        self.cmd = [nginx, "-p", self.pfx, "-c", self.conf, "-g", "user root;"]
        self.master, self.children = None, []

    def __enter__(self):
        subprocess.run(self.cmd, check=True)
        self.master = int(open(os.path.join(self.pfx, "nginx.pid")).read())
        self.children = subprocess.run(["pgrep", "-P", str(self.master)], capture_output=True,
                                       text=True).stdout.split()
        return self

    def wait_ready(self, path, tries=300, every=0.1):
        for _ in range(tries):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5).status == 200:
                    return True
            except OSError:
                pass
            time.sleep(every)
        return False

    def __exit__(self, *exc):
        subprocess.run(self.cmd + ["-s", "stop"], check=False)
        for _ in range(100):   # wait for the master and the scheduler to be gone
            alive = [p for p in [str(self.master)] + self.children if os.path.exists(f"/proc/{p}/stat")
                     and open(f"/proc/{p}/stat").read().split(")")[1].split()[0] != "Z"]
            if not alive:
                break
            time.sleep(0.1)
        return False
