#!/usr/bin/env python3
"""The rendered pods run: for the single-node and multi-node goldens, every moestream container
(expertd, the inferd workers, the gateway) is started as a process on this host with the args,
moestream.conf and plan.json the golden renders - the pods' paths (/models/model, /etc/moestream,
/run/moestream, /run/moestream-pod) moved under a temporary directory, the pod IP and the LWS
worker host name replaced by 127.0.0.1 and free ports - with the model directory (the committed
demo container models/glm-tiny-chat-q4) mounted read-only when run as root (a private mount
namespace: unshare -m). Then the gateway's /health must list every worker alive and one chat
completion must answer. Proves what the other k8s tests cannot: expertd and inferd accept the
plan (expertd --plan, inferd --plan: the model check, budgets), the sockets meet, the config
works from a read-only model directory.

    tests/k8s/node_smoke_test.py BUILD_DIR      (exit 77 when BUILD_DIR has no built services)"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import k8s_common as k  # noqa: E402
from policy_test import Overlay  # noqa: E402

OVERLAYS = ("single-node", "multi-node")
MODEL = os.path.join(k.ROOT, "models", "glm-tiny-chat-q4")
DEADLINE_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes(o, tmp):
    """[(name, argv)] in start order: expertd once, the inferds, the gateways."""
    paths = {"/models/model": f"{tmp}/model", "/etc/moestream": f"{tmp}/etc", "/run/moestream-pod": f"{tmp}/pod",
             "/run/moestream": f"{tmp}/run"}
    ports = {}

    def remap(a):
        for old in sorted(paths, key=len, reverse=True):
            a = re.sub(re.escape(old) + r"(?=/|$)", paths[old], a)
        m = re.fullmatch(r"(--listen=|--worker=)(\$\(POD_IP\)|[a-z0-9.-]+\.moestream):(\d+)", a)
        if m:
            port = ports.setdefault(m.group(3), free_port())
            a = f"{m.group(1)}127.0.0.1:{port}"
        return a

    out, seen_expertd = [], False
    for where, t, c, b, args in o.servers():
        if b == "expertd":
            if seen_expertd:
                continue
            seen_expertd = True
        out.append((f"{b}:{where}:{c['name']}", b, [remap(a) for a in args]))
    order = {"expertd": 0, "inferd": 1, "gateway": 2}
    out.sort(key=lambda p: order[p[1]])
    return out, paths


def wait(cond, what, procs, timeout=DEADLINE_S):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return
        for name, p, log in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited {p.returncode} while waiting for {what}: {open(log).read()[-1500:]}")
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def http(url, body=None, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def run_overlay(name, build, read_only):
    o = Overlay(name, k.load_docs(k.golden_path(name)))
    with tempfile.TemporaryDirectory(prefix=f"k8s-{name}-") as tmp:
        for d in ("etc", "run", "pod", "model"):
            os.makedirs(f"{tmp}/{d}")
        shutil.copytree(MODEL, f"{tmp}/model-src", ignore=shutil.ignore_patterns(".moestream-verified"))
        if read_only:
            subprocess.run(["mount", "--bind", f"{tmp}/model-src", f"{tmp}/model"], check=True)
            subprocess.run(["mount", "-o", "remount,bind,ro", f"{tmp}/model"], check=True)
        else:
            os.rmdir(f"{tmp}/model")
            os.symlink(f"{tmp}/model-src", f"{tmp}/model")
        plist, paths = processes(o, tmp)
        with open(f"{tmp}/etc/moestream.conf", "w") as f:
            conf = o.conf
            for old in sorted(paths, key=len, reverse=True):
                conf = re.sub(re.escape(old) + r"(?=/|\s|$)", paths[old], conf)
            f.write(conf)
        for key, val in o.conf_map["data"].items():
            if key != "moestream.conf":
                with open(f"{tmp}/etc/{key}", "w") as f:
                    f.write(val)
        listen = free_port()
        procs = []
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        try:
            for i, (pname, b, args) in enumerate(plist):
                if b == "gateway":
                    args = args + [f"--listen=127.0.0.1:{listen}"]
                log = f"{tmp}/{i}-{b}.log"
                with open(log, "w") as lf:
                    p = subprocess.Popen([os.path.join(build, "services", b, b)] + args, stdout=lf,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)
                procs.append((pname, p, log))
                if b == "expertd":
                    sock = next(a.split("=", 1)[1] for a in args if a.startswith("--socket="))
                    wait(lambda: os.path.exists(sock), f"{pname}'s socket", procs)
                elif b == "inferd":
                    addr = next(a.split("=", 1)[1] for a in args if a.startswith("--listen="))
                    if addr.startswith("unix:"):
                        wait(lambda: os.path.exists(addr[5:]), f"{pname}'s socket", procs)
                    else:
                        host, port = addr.rsplit(":", 1)
                        wait(lambda: socket.socket().connect_ex((host, int(port))) == 0, f"{pname}'s port", procs)
            n_workers = sum(1 for _, b, _ in plist if b == "inferd")
            base = f"http://127.0.0.1:{listen}"

            def healthy():
                try:
                    st, j = http(base + "/health", timeout=2)
                    return st == 200 and j.get("workers_alive") == n_workers
                except OSError:
                    return False
            wait(healthy, f"/health with {n_workers} workers alive", procs)
            st, j = http(base + "/v1/chat/completions", {
                "model": "moestream", "messages": [{"role": "user", "content": "Who are you?"}], "max_tokens": 16,
                "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}})
            text = (j.get("choices") or [{}])[0].get("message", {}).get("content") if st == 200 else None
            if not text:
                raise RuntimeError(f"chat completion: HTTP {st}: {j}")
            return f"{len(plist)} processes ({', '.join(b for _, b, _ in plist)}), {n_workers} workers alive, " \
                   f"model dir {'read-only' if read_only else 'writable (not root)'}; answer {text!r}"
        finally:
            for _, p, _ in reversed(procs):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for pname, p, log in reversed(procs):
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            if read_only:
                subprocess.run(["umount", f"{tmp}/model"], check=False)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MOE_BUILD_DIR", "")
    missing = [s for s in ("expertd", "inferd", "gateway") if not os.access(os.path.join(build, "services", s, s), os.X_OK)]
    if not build or missing:
        print(f"SKIP: no built {', '.join(missing) or 'services'} in '{build}' (build the project first)")
        sys.exit(k.SKIP)
    can_ns = os.geteuid() == 0 and shutil.which("unshare") and \
        subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0
    if can_ns and os.environ.get("MOE_K8S_SMOKE_NS") != "1":
        # A private mount namespace for the read-only bind mount of the model directory.
        r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, __file__, build],
                           env=dict(os.environ, MOE_K8S_SMOKE_NS="1"))
        sys.exit(r.returncode)
    read_only = os.environ.get("MOE_K8S_SMOKE_NS") == "1"
    problems = []
    for name in OVERLAYS:
        try:
            print(f"ok: {name}: {run_overlay(name, os.path.abspath(build), read_only)}")
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
            problems.append(f"{name}: {e}")
    k.fail(problems, "node smoke")
    print(f"node smoke: {len(OVERLAYS)} overlays' pods ran as processes and answered")


if __name__ == "__main__":
    main()
