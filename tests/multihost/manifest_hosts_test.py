#!/usr/bin/env python3
"""Fake hosts running the multi-node overlay's rendered pods (issue 23; tools/multihost/fake_hosts.py
from_manifest="multi-node", tools/multihost/manifest.py; docs/MULTIHOST.md "Tests without a
cluster"): 2 fake hosts, host 0 the expertd DaemonSet pod + the LeaderWorkerSet leader pod
(inferd + gateway), host 1 expertd + the worker pod's inferd. Checks:
  - every process's command line (/proc/PID/cmdline) is the golden's command + args with only
    what a kubelet fills in replaced: $(POD_IP) by the host's address, $(LWS_WORKER_INDEX) by its
    index, $(MOESTREAM_GROUP) by 0, the mounted paths by the host's directories, the image's
    build dir by the build dir; the pods' DNS names stay (the gateway's
    --worker=moestream-0-1.moestream:50051), resolved by the host's own /etc/hosts (the root
    namespace's is untouched);
  - the init container peer-files rendered each host's map: byte for byte the ConfigMap template
    with @GROUP@ = 0 (hosts: the pods' DNS names), mode 0400, and its weights identity is that
    of the model each host runs (`moe ownership` of the host's copy) and of the plan's model
    (models/glm-tiny-chat-q4); the token copies are mode 0400 and one token;
  - the model and config directories are read-only in the hosts' mount namespaces (the pods
    mount them readOnly);
  - a greedy chat completion through host 0's gateway equals a one-host stack's answer
    (deploy/start.sh's args) and sent RunExperts traffic to host 1 (its eth0 received > 10 kB);
    then rounds of 2 concurrent ones (each its one-host answer) until both of the gateway's
    workers generated (the leader's inferd over the pod's unix socket, host 1's over TCP); the
    gateway's /metrics count moe_worker_peer_remote_jobs_total and _served_jobs_total > 0 for
    each worker, moe_worker_peer_fallback_jobs_total, _failed_calls_total and
    _refused_calls_total 0;
  - cleanup: no namespace or temp dir of the run left.
Exit 77 (ctest SKIP_RETURN_CODE) when not root, namespaces cannot be made, the services or moe are
not built, inferd has no --peer-listen, or PyYAML is missing.

    tests/multihost/manifest_hosts_test.py [BUILD_DIR]"""
import json
import os
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "multihost"))
import fake_hosts as fh  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multihost_test_util as tu  # noqa: E402
from multihost_test_util import check  # noqa: E402

SKIP = tu.SKIP
DEADLINE_S = 90
PROMPTS = ("Who are you?", "Count from one to ten.")
MAX_TOKENS = 24
OVERLAY = "multi-node"
PLAN_MODEL = "models/glm-tiny-chat-q4"  # deploy/k8s plan.json's model: the demo container
PEER_COUNTERS = ("remote_jobs", "served_jobs", "fallback_jobs", "failed_calls", "refused_calls")


def summary(st, j):
    if st != 200 or not isinstance(j, dict):
        raise AssertionError(f"HTTP {st}: {str(j)[:300]}")
    ch = j["choices"][0]
    return ch["message"].get("content"), ch.get("finish_reason"), j["usage"]["completion_tokens"]


def metric_sum(m, name):
    return sum(v for key, v in m.items() if key == name or key.startswith(name + "{"))


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")[:-1]]


def golden_argv(docs, kind, role, container, host, build):
    """The golden's command + args of a container, with the kubelet's substitutions only."""
    import k8s_common as k
    for d in docs:
        for _, r, t in k.pod_templates(d):
            if d["kind"] != kind or r != role:
                continue
            for c in t["spec"]["containers"]:
                if c["name"] != container:
                    continue
                subst = {"$(POD_IP)": host.addr, "$(LWS_WORKER_INDEX)": str(host.index), "$(MOESTREAM_GROUP)": "0"}
                paths = {p: os.path.join(host.dir, d2) for p, d2 in k.POD_PATHS.items()}
                out = []
                for a in c["command"] + c.get("args", []):
                    for var, val in subst.items():
                        a = a.replace(var, val)
                    out.append(k.remap_paths(a, paths).replace("/opt/moestream/build", build))
                return out
    raise AssertionError(f"no {kind} {role} container {container} in the golden")


def references(build, pid):
    want = {}
    with fh.FakeCluster(1, build=build, tag=f"mfref{pid}") as ref:
        for p in PROMPTS:
            want[p] = summary(*ref.chat_inproc(p, MAX_TOKENS, timeout=60, ignore_eos=True))
    check(all(w[0] and w[2] == MAX_TOKENS for w in want.values()) and len({w[0] for w in want.values()}) == 2,
          f"one host (deploy/start.sh's args): {len(PROMPTS)} different answers of {MAX_TOKENS} tokens")
    return want


def manifest_checks(build, pid, want):
    import k8s_common as k
    import ownership_template
    docs = k.load_docs(k.golden_path(OVERLAY))
    conf = next(d for d in docs if d["kind"] == "ConfigMap" and "moestream.conf" in d.get("data", {}))
    plan = json.loads(conf["data"]["plan.json"])
    template = conf["data"]["ownership-map.template.json"]
    check(plan["model"]["dir"] == PLAN_MODEL, f"the golden's plan.json names {PLAN_MODEL}")
    t0 = time.time()
    with fh.FakeCluster(2, build=build, tag=f"mf{pid}", from_manifest=OVERLAY) as c:
        t_up = time.time() - t0
        h0, h1 = c.hosts
        check(sorted(h0.procs) == ["expertd", "gateway", "inferd0"] and sorted(h1.procs) == ["expertd", "inferd0"],
              f"up in {t_up:.1f} s: host 0 runs expertd + the leader pod's inferd and gateway, host 1 expertd + "
              f"the worker pod's inferd")
        roles = {"expertd": ("DaemonSet", None, "expertd"), "inferd0": ("LeaderWorkerSet", None, "inferd"),
                 "gateway": ("LeaderWorkerSet", "leader", "gateway")}
        for h in c.hosts:
            for name, p in h.procs.items():
                kind, role, cname = roles[name]
                role = role or (None if kind == "DaemonSet" else "leader" if h.index == 0 else "worker")
                want_argv = golden_argv(docs, kind, role, cname, h, build)
                got = cmdline(p.pid)
                if got != want_argv:
                    raise AssertionError(f"host {h.index} {name}: runs {got}, the golden renders {want_argv}")
        check(True, "every process's argv is the golden's (DaemonSet expertd, LWS leader inferd + gateway, "
                    "worker inferd) with only $(POD_IP), $(LWS_WORKER_INDEX), $(MOESTREAM_GROUP) and the "
                    "mounted paths filled in")
        gw = cmdline(h0.procs["gateway"].pid)
        inf1 = cmdline(h1.procs["inferd0"].pid)
        check("--worker=moestream-0-1.moestream:50051" in gw and f"--listen={h1.addr}:50051" in inf1
              and f"--peer-listen={h1.addr}:7100" in inf1 and "--host-index=1" in inf1
              and not any(a.startswith("--peer-deadline-ms") for a in inf1),
              "the gateway addresses host 1's inferd by its pod DNS name; host 1's inferd listens on its pod IP, "
              "index 1 (no harness PEER_FLAGS)")
        with open("/etc/hosts") as f:
            root_hosts = f.read()
        resolved = h0.exec_in(["getent", "hosts", "moestream-0-1.moestream"], check=False).stdout.split()
        check(resolved[:1] == [h1.addr] and "moestream-0-1" not in root_hosts,
              f"in host 0's mount namespace moestream-0-1.moestream resolves to {resolved[:1]} (its /etc/hosts); "
              f"the root namespace's /etc/hosts is untouched")

        rendered = template.replace("@GROUP@", "0")
        tokens = set()
        for h in c.hosts:
            with open(h.ownership_map) as f:
                text = f.read()
            m = json.loads(text)
            check(text == rendered and m["hosts"] == ownership_template.expected_hosts("moestream", 2, 7100, "0")
                  and os.stat(h.ownership_map).st_mode & 0o777 == 0o400,
                  f"host {h.index}: the map is the template rendered by peer-files (@GROUP@ 0, hosts {m['hosts']}), "
                  f"mode 0400")
            fresh = ownership_template.make(c.bin("tools/moe/moe"), h.model, m["hosts"], m["epoch"])
            plan_m = ownership_template.make(c.bin("tools/moe/moe"), os.path.join(ROOT, PLAN_MODEL), m["hosts"],
                                             m["epoch"])
            check(m["weights"] == fresh["weights"] == plan_m["weights"] == c.map_weights,
                  f"host {h.index}: the map's weights identity {m['weights']} is the host's model's and "
                  f"{PLAN_MODEL}'s")
            check(os.stat(h.token_file).st_mode & 0o777 == 0o400, f"host {h.index}: the token copy is mode 0400")
            with open(h.token_file) as f:
                tokens.add(f.read())
        check(len(tokens) == 1 and len(tokens.pop().strip()) >= 16, "both hosts have the one random token")

        ro = [h1.exec_in(["touch", os.path.join(d, ".w")], check=False).returncode != 0
              for d in (h1.model, os.path.join(h1.dir, "etc"))]
        check(all(ro) and h1.exec_in(["touch", os.path.join(h1.run_dir, ".w")], check=False).returncode == 0,
              "in host 1's mount namespace the model and config directories are read-only (readOnly mounts), "
              "the socket directory writable")

        rx0 = c.wire_bytes(1)["rx"]
        got = summary(*c.chat_inproc(PROMPTS[0], MAX_TOKENS, timeout=60, ignore_eos=True))
        rx = c.wire_bytes(1)["rx"] - rx0
        check(got == want[PROMPTS[0]], f"{PROMPTS[0]!r} through host 0's gateway: the one-host answer "
                                       f"{got[0][:40]!r}...")
        check(rx > 10_000, f"RunExperts traffic reached host 1: its eth0 received {rx} B during that request")
        # Concurrent requests: the gateway's least-loaded routing gives each of its two workers one
        # (the leader's inferd over the pod's unix socket, host 1's over TCP by its DNS name).
        workers = {}
        for rnd in range(1, 4):
            results = {}

            def one(p):
                try:
                    results[p] = summary(*c.chat_inproc(p, MAX_TOKENS, timeout=60, ignore_eos=True))
                except AssertionError as e:
                    results[p] = str(e)
            threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in PROMPTS]
            for t in threads:
                t.start()
            for t in threads:
                t.join(65)
            for p in PROMPTS:
                if results.get(p) != want[p]:
                    raise AssertionError(f"concurrent {p!r}: {results.get(p)!r}, one host: {want[p]!r}")
            t0 = time.time()
            while time.time() - t0 < 5:  # the gateway's probes bring the workers' Stats (about 1 s)
                m = c.metrics(0)
                workers = {key.split('worker="', 1)[1].rstrip('"}'): v for key, v in m.items()
                           if key.startswith("moe_worker_tokens_total{")}
                if sum(workers.values()) >= MAX_TOKENS * (1 + 2 * rnd):
                    break
                time.sleep(0.2)
            if len(workers) == 2 and all(v > 0 for v in workers.values()):
                break
        check(len(workers) == 2 and all(v > 0 for v in workers.values()),
              f"{rnd} round(s) of {len(PROMPTS)} concurrent requests, each the one-host answer; both gateway "
              f"workers generated ({', '.join(f'{w}: {v:.0f} tokens' for w, v in workers.items())})")
        t0 = time.time()
        while True:
            m = c.metrics(0)
            per = {n: {key: v for key, v in m.items() if key.startswith(f"moe_worker_peer_{n}_total{{")}
                   for n in PEER_COUNTERS}
            counts = {n: sum(v.values()) for n, v in per.items()}
            if all(len(per[n]) == 2 and all(v > 0 for v in per[n].values()) for n in ("remote_jobs", "served_jobs")):
                break
            if time.time() - t0 > 10:
                raise AssertionError(f"not every worker sent and served RunExperts jobs after 10 s: {per}")
            time.sleep(0.2)
        check(counts["fallback_jobs"] == 0 and counts["failed_calls"] == 0 and counts["refused_calls"] == 0,
              f"gateway /metrics: moe_worker_peer_remote_jobs_total {counts['remote_jobs']:.0f} (> 0 from each "
              f"worker), served {counts['served_jobs']:.0f}, fallback {counts['fallback_jobs']:.0f}, failed calls "
              f"{counts['failed_calls']:.0f}, refused {counts['refused_calls']:.0f}")


def main():
    build = tu.build_dir(sys.argv[1:])
    try:
        import yaml  # noqa: F401
    except ImportError:
        print("SKIP: no PyYAML (the goldens)")
        return SKIP
    why = tu.preflight(build, tu.SERVICES + ("tools/moe/moe",), inferd_flags=("--peer-listen",))
    if why:
        print(f"SKIP: {why}")
        return SKIP
    sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
    sys.path.insert(0, os.path.join(ROOT, "tools", "k8s"))
    pid = os.getpid()

    def body():
        want = references(build, pid)
        manifest_checks(build, pid, want)
    return tu.run("fake hosts from the manifest", DEADLINE_S, {f"mfref{pid}", f"mf{pid}"}, body)


if __name__ == "__main__":
    sys.exit(main())
