"""Starts and stops a local serving stack for tests and the load tool:
[expertd +] N inferd workers (unix sockets in a temp dir) + one gateway on
127.0.0.1. With `expertd_model` (a converted container) one expertd owns the
routed experts and every worker gets them from it (--expertd); the workers
must then run the engine-backed inferd over the same container. `expertd_args`
go to expertd as well (e.g. --plan FILE with expertd_budget=None).

All traffic stays on loopback / unix sockets. Every wait is bounded; every
process started here is stopped (SIGTERM, then SIGKILL after a timeout) by
Stack.stop(), which also runs at interpreter exit.
"""
import atexit
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request


def convert_container(build_dir, model_src, prefix):
    """`moe convert` of a model directory into a fresh temp dir; returns (tmp, container)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    container = os.path.join(tmp, "model")
    subprocess.run([os.path.join(build_dir, "tools/moe/moe"), "convert", f"--in={model_src}",
                    f"--out={container}"], check=True, capture_output=True, timeout=120)
    return tmp, container


class Stack:
    def __init__(self, build_dir, workers=2, worker_bin=None, worker_args=(), gateway_args=(),
                 startup_timeout=30.0, expertd_model=None, expertd_budget="16M", expertd_args=()):
        self.build_dir = build_dir
        self.tmp = tempfile.mkdtemp(prefix="moe-serving-")
        self.procs = []
        self.logs = []
        self.port = None
        worker_bin = worker_bin or os.path.join(build_dir, "tests/inferd/inferd_toy")
        socks = []
        self.expertd_sock = None
        # Seconds from this constructor's start until each part was ready
        # (expertd / every worker / the gateway): the start-up figures.
        self.ready_s = {}
        t0 = time.time()
        try:
            deadline = time.time() + startup_timeout
            if expertd_model:
                self.expertd_sock = os.path.join(self.tmp, "expertd.sock")
                argv = [os.path.join(build_dir, "services/expertd/expertd"), f"--model={expertd_model}",
                        f"--socket={self.expertd_sock}", *expertd_args]
                if expertd_budget is not None:  # None: the budget comes from expertd_args (--plan)
                    argv.append(f"--budget={expertd_budget}")
                self._spawn("expertd", argv)
                while not os.path.exists(self.expertd_sock):
                    self._check_alive()
                    if time.time() > deadline:
                        raise RuntimeError("expertd did not create its socket in time:\n" + self.log_tail())
                    time.sleep(0.05)
                self.ready_s["expertd"] = time.time() - t0
                worker_args = [*worker_args, f"--expertd=unix:{self.expertd_sock}"]
            for i in range(workers):
                sock = os.path.join(self.tmp, f"inferd{i}.sock")
                socks.append(sock)
                self._spawn(f"inferd{i}", [worker_bin, f"--listen=unix:{sock}", *worker_args])
            while not all(os.path.exists(s) for s in socks):
                self._check_alive()
                if time.time() > deadline:
                    raise RuntimeError("workers did not create their sockets in time:\n" + self.log_tail())
                time.sleep(0.05)
            self.ready_s["workers"] = time.time() - t0
            gw = [os.path.join(build_dir, "services/gateway/gateway"), "--listen=127.0.0.1:0",
                  "--client-poll-ms=2", "--probe-ms=100", "--startup-wait-s=20"]
            gw += [f"--worker=unix:{s}" for s in socks]
            gw += list(gateway_args)
            log = self._spawn("gateway", gw)
            while self.port is None:
                self._check_alive()
                if time.time() > deadline:
                    raise RuntimeError("gateway did not start in time:\n" + self.log_tail())
                with open(log, errors="replace") as f:
                    m = re.search(r"listening on 127\.0\.0\.1:0 \(port (\d+)\)", f.read())
                if m:
                    self.port = int(m.group(1))
                    self.ready_s["gateway"] = time.time() - t0
                else:
                    time.sleep(0.05)
        except Exception:
            self.stop()
            raise
        atexit.register(self.stop)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, name, argv):
        log = os.path.join(self.tmp, f"{name}.log")
        with open(log, "ab") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, p))
        if log not in self.logs:
            self.logs.append(log)
        self.argv = getattr(self, "argv", {})
        self.argv[name] = argv
        return log

    def kill(self, name):
        """SIGKILLs the process `name` ("expertd", "inferd0", ...), as a crash would."""
        for n, p in self.procs:
            if n == name and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=10)

    def restart(self, name):
        """Starts `name` again with its first command line (what respawn.sh / systemd do)."""
        self.procs = [(n, p) for n, p in self.procs if not (n == name and p.poll() is not None)]
        self._spawn(name, self.argv[name])

    def _check_alive(self):
        for name, p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}:\n" + self.log_tail())

    def log_tail(self, n=4000):
        out = []
        for log in self.logs:
            try:
                with open(log, errors="replace") as f:
                    out.append(f"--- {os.path.basename(log)}\n" + f.read()[-n:])
            except OSError:
                pass
        return "\n".join(out)

    def pids(self):
        """{name: pid} of the processes still running."""
        return {name: p.pid for name, p in self.procs if p.poll() is None}

    def kill_worker(self, i):
        name, p = [x for x in self.procs if x[0].startswith("inferd")][i]
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)

    def metrics(self):
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            key, _, val = line.rpartition(" ")
            try:
                out[key] = float(val)
            except ValueError:
                pass
        return out

    def stop(self):
        # Gateway first (it cancels its streams), then the workers.
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.exit_codes = {name: p.returncode for name, p in self.procs}
        self.procs = []
        return self.exit_codes
