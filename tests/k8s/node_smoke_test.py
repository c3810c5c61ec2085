#!/usr/bin/env python3
"""The rendered pods run: for the single-node and multi-node goldens, every moestream container
(expertd, the inferd workers, the gateway) is started as a process on this host with the args,
moestream.conf and plan.json the golden renders - the pods' paths (/models/model, /etc/moestream,
/run/moestream, /run/moestream-pod, /run/moestream-peer, /etc/moestream-peer-token) moved under a
temporary directory, the pod IP and the LWS pod host names (<lws>-0, <lws>-0-1) replaced by
127.0.0.1 and a free port per (pod, port) - with the model directory (the committed demo
container models/glm-tiny-chat-q4) mounted read-only when run as root (a private mount
namespace: unshare -m). The init containers run first, as written (not root: chown is a no-op),
each Secret volume a directory with a fresh random `token` (mode 0400): in the multi-node pods
peer-files renders the group's ownership map from the ConfigMap template (its hosts must be
group 0's pods; the test then points them at the local peer ports) and copies the token (0400).
Then the gateway's /health must list every worker alive and one chat completion must answer;
with expert parallelism (inferd --peer-listen) the gateway's /metrics must count RunExperts
jobs sent and served and no fallback, failed or refused call. Proves what the other k8s tests
cannot: expertd and inferd accept the plan (expertd --plan, inferd --plan: the model check,
budgets), the sockets meet, the config works from a read-only model directory, the map template
matches the model (weights identity) and the group's inferds compute each other's experts.

    tests/k8s/node_smoke_test.py BUILD_DIR      (exit 77 when BUILD_DIR has no built services)"""
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "k8s"))
import k8s_common as k  # noqa: E402
import ownership_template  # noqa: E402
from policy_test import Overlay  # noqa: E402

OVERLAYS = ("single-node", "multi-node")
MODEL = os.path.join(k.ROOT, "models", "glm-tiny-chat-q4")
DEADLINE_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pod_host(role, d, where):
    """The pod's name as its peers and gateway address it: LWS's <lws>-0 (leader) and <lws>-0-1
    (the worker of group 0), the workload for others."""
    if d["kind"] == "LeaderWorkerSet":
        name = d["metadata"]["name"]
        return f"{name}-0" if role == "leader" else f"{name}-0-1"
    return where


# The pods' paths -> directories of the temporary directory.
PATHS = k.POD_PATHS


def processes(o, tmp):
    """([(name, binary, argv)] in start order: expertd once, the inferds, the gateways;
    [(name, argv, env)] of the init containers, one per distinct command; the path map; the
    port map {(pod host, pod port): local port})."""
    paths = {p: f"{tmp}/{d}" for p, d in PATHS.items()}
    ports = {}

    def remap_paths(a):
        return k.remap_paths(a, paths)

    def remap(a, host):
        a = remap_paths(a)
        m = re.fullmatch(r"(--listen=|--worker=|--peer-listen=)(\$\(POD_IP\)|[a-z0-9-]+(?:\.[a-z0-9-]+)+):(\d+)", a)
        if m:
            h = host if m.group(2) == "$(POD_IP)" else m.group(2).split(".")[0]
            port = ports.setdefault((h, int(m.group(3))), free_port())
            a = f"{m.group(1)}127.0.0.1:{port}"
        return a

    out, inits, seen_expertd = [], [], False
    for where, role, t, d, c, b, args in o.servers_full():
        if b == "expertd":
            if seen_expertd:
                continue
            seen_expertd = True
        out.append((f"{b}:{where}:{c['name']}", b, [remap(a, pod_host(role, d, where)) for a in args]))
    for where, role, t, d in o.pods:
        for ic in t["spec"].get("initContainers", []):
            env = k.pod_env(d, role, ic, t)
            argv = [remap_paths(k.expand(a, env)) for a in (ic.get("command") or []) + (ic.get("args") or [])]
            if all(argv != a for _, a, _ in inits):
                inits.append((f"init:{where}:{ic['name']}", argv, {n: remap_paths(v) for n, v in env.items()}))
    order = {"expertd": 0, "inferd": 1, "gateway": 2}
    out.sort(key=lambda p: order[p[1]])
    return out, inits, paths, ports


def run_inits(o, tmp, inits, paths):
    """The init containers as processes (root: as written; not root: chown a no-op), with each
    Secret volume a directory whose `token` is a fresh random token, mode 0400 (a Secret the
    operator created: docs/KUBERNETES.md)."""
    for where, role, t, d in o.pods:
        for v, mount in k.secret_mounts(t):
            if mount in paths:
                sdir = paths[mount]
                if not os.path.exists(f"{sdir}/token"):
                    os.makedirs(sdir, exist_ok=True)
                    with open(f"{sdir}/token", "w") as f:
                        f.write(secrets.token_hex(24) + "\n")
                    os.chmod(f"{sdir}/token", 0o400)
    env = dict(os.environ)
    if os.geteuid() != 0:
        shim = f"{tmp}/shim"
        os.makedirs(shim, exist_ok=True)
        with open(f"{shim}/chown", "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(f"{shim}/chown", 0o755)
        env["PATH"] = shim + os.pathsep + env.get("PATH", "")
    for name, argv, ienv in inits:
        r = subprocess.run(argv, env=dict(env, **ienv), capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"{name}: {' '.join(argv)[:200]} exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
    return [n for n, _, _ in inits]


def local_map(o, plist, ports):
    """The ownership map the init containers rendered: its hosts must be the group's pods
    (<lws>-0.<lws>:7100, <lws>-0-1.<lws>:7100); rewritten to the local ports those pods'
    inferds got. None when no inferd has --ownership-map."""
    maps = {a.split("=", 1)[1] for _, b, args in plist if b == "inferd" for a in args if a.startswith("--ownership-map=")}
    if not maps:
        return None
    lws = next(d for d in o.docs if d["kind"] == "LeaderWorkerSet")
    want = ownership_template.expected_hosts(lws["metadata"]["name"], lws["spec"]["leaderWorkerTemplate"]["size"],
                                             7100, group="0")
    for path in maps:
        with open(path) as f:
            m = json.load(f)
        if m["hosts"] != want:
            raise RuntimeError(f"{path}: the init container rendered hosts {m['hosts']}, group 0's pods are {want}")
        local = []
        for h in m["hosts"]:
            name, port = h.split(".")[0], int(h.rsplit(":", 1)[1])
            if (name, port) not in ports:
                raise RuntimeError(f"{path}: host {h} is no pod's --peer-listen")
            local.append(f"127.0.0.1:{ports[(name, port)]}")
        m["hosts"] = local
        mode = os.stat(path).st_mode & 0o777
        os.chmod(path, 0o600)
        with open(path, "w") as f:
            json.dump(m, f)
        os.chmod(path, mode)
    return want


def metrics_sum(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


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
        for d in ("etc", "run", "pod", "peer", "model"):
            os.makedirs(f"{tmp}/{d}")
        shutil.copytree(MODEL, f"{tmp}/model-src", ignore=shutil.ignore_patterns(".moestream-verified"))
        if read_only:
            subprocess.run(["mount", "--bind", f"{tmp}/model-src", f"{tmp}/model"], check=True)
            subprocess.run(["mount", "-o", "remount,bind,ro", f"{tmp}/model"], check=True)
        else:
            os.rmdir(f"{tmp}/model")
            os.symlink(f"{tmp}/model-src", f"{tmp}/model")
        plist, inits, paths, ports = processes(o, tmp)
        with open(f"{tmp}/etc/moestream.conf", "w") as f:
            conf = o.conf
            for old in sorted(paths, key=len, reverse=True):
                conf = re.sub(re.escape(old) + r"(?=/|\s|$)", paths[old], conf)
            f.write(conf)
        for key, val in o.conf_map["data"].items():
            if key != "moestream.conf":
                with open(f"{tmp}/etc/{key}", "w") as f:
                    f.write(val)
        ran_inits = run_inits(o, tmp, inits, paths)
        peer_hosts = local_map(o, plist, ports)
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
            peers = ""
            if peer_hosts:
                # The gateway polls the workers' Stats: wait for the RunExperts of that answer.
                def sent():
                    return metrics_sum(base, "moe_worker_peer_remote_jobs_total") > 0 and \
                        metrics_sum(base, "moe_worker_peer_served_jobs_total") > 0
                wait(sent, "moe_worker_peer_remote_jobs_total and _served_jobs_total > 0 on /metrics", procs, timeout=30)
                counts = {n: int(metrics_sum(base, f"moe_worker_peer_{n}_total"))
                          for n in ("remote_jobs", "served_jobs", "fallback_jobs", "failed_calls", "refused_calls")}
                if counts["fallback_jobs"] or counts["failed_calls"] or counts["refused_calls"]:
                    raise RuntimeError(f"expert parallelism: peer calls failed or were refused: {counts}")
                peers = f"; expert parallel over {peer_hosts} (as 127.0.0.1 ports): {counts}"
            return f"{len(plist)} processes ({', '.join(b for _, b, _ in plist)}), {n_workers} workers alive, " \
                   f"init containers {ran_inits}, model dir {'read-only' if read_only else 'writable (not root)'}; " \
                   f"answer {text!r}{peers}"
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
