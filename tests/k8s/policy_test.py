#!/usr/bin/env python3
"""Project policy on every golden (tests/k8s/golden/*.yaml, i.e. what each overlay renders):

  resources   every container (init containers too) requests memory == its memory limit, and
              requests cpu; expertd / inferd / gateway get exactly the figure tools/k8s/plan_limits.py
              computes from the plan.json + moestream.conf in the rendered moestream-config (the
              plan expertd --plan and inferd --plan apply), and the committed memory-plan.yaml
              files are what plan_limits.py makes of their plan.json now;
  model       every mount of the model directory, and of the config, is readOnly, the model
              volume is the same hostPath in every pod, and every path the config names under
              /models lies in that mount;
  sockets     expertd's --socket lies in a hostPath directory that every inferd pod mounts at
              the same path, and inferd's expertd (config or flag) is that socket; every gateway
              --worker is an inferd --listen of the same overlay (and every inferd a gateway's
              worker), on a volume both containers share (hostPath, or the pod's own volume) or a TCP port the worker pod declares;
  selectors   each workload's selector matches its own pod template, each Service / PDB /
              NetworkPolicy / InferencePool / affinity selector matches a pod template of the
              overlay, each ServiceMonitor a Service, each HTTPRoute backend a pool, no two
              workloads select each other's pods, configMap volumes name a ConfigMap present;
  isolation   no hostNetwork / hostPID / hostIPC / hostPort / privileged; expertd never listens on
              TCP except its metrics exporter on the pod IP (components/expertd-metrics);
  probes      every container has liveness and readiness probes (gateway: HTTP /health and
              /metrics on its port; a unix-socket server: a check of its own socket)."""
import configparser
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "k8s"))
import k8s_common as k  # noqa: E402
import plan_limits  # noqa: E402

SERVICES = ("expertd", "inferd", "gateway")


def binary_of(c):
    cmd = c.get("command") or []
    base = os.path.basename(cmd[0]) if cmd else ""
    return base if base in SERVICES else None


def flag_values(args, name):
    """Values of --name=V / --name V in args (the FlagSet forms)."""
    out = []
    for i, a in enumerate(args):
        if a.startswith(f"--{name}="):
            out.append(a.split("=", 1)[1])
        elif a == f"--{name}" and i + 1 < len(args):
            out.append(args[i + 1])
    return out


def selector_matches(sel, labels):
    if not sel:
        return False
    ml = sel.get("matchLabels", sel if "matchExpressions" not in sel and "matchLabels" not in sel else {})
    if any(labels.get(kk) != vv for kk, vv in ml.items()):
        return False
    for e in sel.get("matchExpressions", []):
        v = labels.get(e["key"])
        op = e["operator"]
        if op == "In" and v not in e["values"] or op == "NotIn" and v in e["values"]:
            return False
        if op == "Exists" and v is None or op == "DoesNotExist" and v is not None:
            return False
    return True


class Overlay:
    def __init__(self, name, docs):
        self.name, self.docs = name, docs
        self.problems = []
        self.pods = []  # (where, role, template, workload doc)
        for d in docs:
            for where, role, t in k.pod_templates(d):
                self.pods.append((where, role, t, d))
        self.configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        conf_maps = [c for c in self.configmaps.values() if "moestream.conf" in c.get("data", {})]
        if len(conf_maps) != 1:
            self.bad(f"{len(conf_maps)} ConfigMaps hold moestream.conf (want 1)")
            self.conf, self.conf_map = "", None
        else:
            self.conf_map = conf_maps[0]
            self.conf = self.conf_map["data"]["moestream.conf"]

    def bad(self, msg):
        self.problems.append(f"{self.name}: {msg}")

    def servers(self):
        """(where, template, container, binary, expanded args) of every moestream container."""
        for where, role, t, d in self.pods:
            for c in k.containers(t["spec"]):
                b = binary_of(c)
                if b:
                    extra = {"MOESTREAM_GROUP": "0", "POD_IP": "$(POD_IP)"}
                    env = k.container_env(c, t, extra)
                    yield where, t, c, b, [k.expand(a, env) for a in c.get("args", [])]


def mounts_of(t, c, volume):
    return [m for m in c.get("volumeMounts", []) if m["name"] == volume]


def volume(t, name):
    for v in t["spec"].get("volumes", []):
        if v["name"] == name:
            return v
    return None


def volume_at(t, c, path):
    """(volume, mount) of the container whose mountPath is the longest prefix of path."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[1]["mountPath"]):
                best = (volume(t, m["name"]), m)
    return best


def check_resources(o):
    figures = None
    if o.conf_map is not None and "plan.json" in o.conf_map["data"]:
        import json
        plan = json.loads(o.conf_map["data"]["plan.json"])
        try:
            figures = plan_limits.figures(plan, o.conf, plan_limits.parse_bytes("384M"))
        except ValueError as e:
            o.bad(f"plan.json of {o.conf_map['metadata']['name']}: {e}")
    else:
        o.bad("the rendered config has no plan.json")
    for where, role, t, d in o.pods:
        for c in k.containers(t["spec"]):
            r = c.get("resources", {})
            req, lim = r.get("requests", {}), r.get("limits", {})
            who = f"{where} container {c['name']}"
            if "memory" not in lim or req.get("memory") != lim.get("memory"):
                o.bad(f"{who}: memory request {req.get('memory')} != limit {lim.get('memory')}")
            if "cpu" not in req:
                o.bad(f"{who}: no cpu request")
            b = binary_of(c)
            if b and figures is not None:
                want = f"{figures[b]['mib']}Mi"
                if lim.get("memory") != want:
                    o.bad(f"{who}: memory {lim.get('memory')}, the plan gives {b} {want} ({figures[b]['breakdown']})")
    mp = [d for d in o.docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "moestream-memory-plan"]
    if figures is not None and mp:
        for b in SERVICES:
            if mp[0]["data"].get(f"{b}-memory") != f"{figures[b]['mib']}Mi":
                o.bad(f"ConfigMap moestream-memory-plan {b}-memory {mp[0]['data'].get(f'{b}-memory')} is not the "
                      f"rendered plan's {figures[b]['mib']}Mi (run tools/k8s/render_goldens.sh)")


def check_committed_memory_plans(problems):
    base_conf = os.path.join(k.ROOT, "deploy", "k8s", "base", "moestream.conf")
    for dirpath, _, files in os.walk(os.path.join(k.ROOT, "deploy", "k8s")):
        if "plan.json" in files:
            rel = os.path.relpath(os.path.join(dirpath, "plan.json"), k.ROOT)
            import io
            import contextlib
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = plan_limits.main(["--plan", rel, "--conf", os.path.relpath(base_conf, k.ROOT)]) \
                    if os.getcwd() == k.ROOT else None
            if rc is None:
                problems.append("check_committed_memory_plans must run from the repository root")
                return
            have = os.path.join(dirpath, "memory-plan.yaml")
            if rc != 0 or not os.path.exists(have) or open(have).read() != out.getvalue():
                problems.append(f"{os.path.relpath(have, k.ROOT)} is not what tools/k8s/plan_limits.py makes of {rel} "
                                "(run tools/k8s/render_goldens.sh)")


def check_model_and_config(o):
    model_paths = set()
    for where, role, t, d in o.pods:
        for c in k.containers(t["spec"]):
            for m in c.get("volumeMounts", []):
                v = volume(t, m["name"]) or {}
                hp = v.get("hostPath", {}).get("path")
                if m["mountPath"].startswith("/models") or hp == "/var/lib/moestream/model" or "configMap" in v:
                    if m.get("readOnly") is not True:
                        o.bad(f"{where} container {c['name']}: mount of {m['name']} at {m['mountPath']} is not readOnly")
                if m["mountPath"].startswith("/models"):
                    model_paths.add((hp, m["mountPath"]))
                if "configMap" in v and v["configMap"]["name"] not in o.configmaps:
                    o.bad(f"{where}: volume {m['name']} names ConfigMap {v['configMap']['name']}, not in the overlay")
    if len(model_paths) != 1:
        o.bad(f"the model directory is mounted from several places: {sorted(map(str, model_paths))}")
    for where, t, c, b, args in o.servers():
        cfg = flag_values(args, "config")
        if len(cfg) != 1:
            o.bad(f"{where} {b}: --config given {len(cfg)} times")
            continue
        va = volume_at(t, c, cfg[0])
        if not va or "configMap" not in (va[0] or {}) or va[0]["configMap"]["name"] != o.conf_map["metadata"]["name"] \
                or os.path.relpath(cfg[0], va[1]["mountPath"]) != "moestream.conf":
            o.bad(f"{where} {b}: --config {cfg[0]} is not moestream.conf of the mounted config ConfigMap")
        sect = plan_limits.conf_section(o.conf, b)
        for key in ("model", "tokenizer", "plan"):
            for p in [sect[key]] if key in sect else []:
                if key == "tokenizer" and p == "byte":
                    continue
                hit = volume_at(t, c, p)
                if not hit:
                    o.bad(f"{where} {b}: [{b}] {key} = {p} lies in no mount of the container")
                elif key == "plan" and os.path.basename(p) not in o.conf_map["data"]:
                    o.bad(f"{where} {b}: [{b}] plan = {p}: the config ConfigMap has no {os.path.basename(p)}")


def check_sockets(o):
    servers = list(o.servers())
    expertd_socks = {}
    for where, t, c, b, args in servers:
        if b == "expertd":
            socks = flag_values(args, "socket")
            if len(socks) != 1:
                o.bad(f"{where}: expertd --socket given {len(socks)} times")
                continue
            va = volume_at(t, c, socks[0])
            hp = (va[0] or {}).get("hostPath", {}).get("path") if va else None
            if not hp:
                o.bad(f"{where}: expertd socket {socks[0]} is not in a hostPath volume (inferd pods could not reach it)")
            expertd_socks[socks[0]] = (hp, va[1]["mountPath"] if va else None)
    if len(expertd_socks) != 1:
        o.bad(f"expertd sockets: {sorted(expertd_socks)} (want exactly one path)")
        return
    (sock, (hostdir, mountdir)), = expertd_socks.items()
    listens = {}  # address -> (where, template, container)
    for where, t, c, b, args in servers:
        if b != "inferd":
            continue
        x = flag_values(args, "expertd") or ([plan_limits.conf_section(o.conf, "inferd")["expertd"]]
                                              if "expertd" in plan_limits.conf_section(o.conf, "inferd") else [])
        x = x[-1] if x else ""
        if x.removeprefix("unix:") != sock:
            o.bad(f"{where}: inferd's expertd is '{x}', expertd listens on unix:{sock}")
        va = volume_at(t, c, sock)
        if not va or (va[0] or {}).get("hostPath", {}).get("path") != hostdir or va[1]["mountPath"] != mountdir:
            o.bad(f"{where}: inferd does not mount hostPath {hostdir} at {mountdir} (expertd's socket directory)")
        for addr in flag_values(args, "listen"):
            listens[addr] = (where, t, c)
    named = set()
    for where, t, c, b, args in servers:
        if b == "gateway":
            for w in flag_values(args, "worker"):
                named.add(w if w.startswith("unix:") else "$(POD_IP):" + w.rsplit(":", 1)[-1])
    for addr, (lw, lt, lc) in sorted(listens.items()):
        if addr not in named:
            o.bad(f"{lw}: inferd listens on {addr}, which no gateway --worker names (a worker nobody uses)")
    for where, t, c, b, args in servers:
        if b != "gateway":
            continue
        workers = flag_values(args, "worker")
        if not workers:
            o.bad(f"{where}: gateway has no --worker")
        for w in workers:
            if w.startswith("unix:"):
                if w not in listens:
                    o.bad(f"{where}: gateway --worker {w}: no inferd listens there (inferd: {sorted(listens)})")
                    continue
                lw, lt, lc = listens[w]
                mine, theirs = volume_at(t, c, w[5:]), volume_at(lt, lc, w[5:])
                same_pod = lt is t
                if not mine or not theirs or mine[1]["mountPath"] != theirs[1]["mountPath"]:
                    o.bad(f"{where}: gateway and {lw} do not mount the directory of {w} at the same path")
                elif not same_pod and (mine[0] or {}).get("hostPath") != (theirs[0] or {}).get("hostPath"):
                    o.bad(f"{where}: gateway and {lw} reach {w} through different volumes")
                elif same_pod and mine[0]["name"] != theirs[0]["name"]:
                    o.bad(f"{where}: gateway and inferd of one pod reach {w} through different volumes")
            else:
                m = re.fullmatch(r"(.+):(\d+)", w)
                tcp = [(lw, lc) for a, (lw, lt, lc) in listens.items() if m and a == f"$(POD_IP):{m.group(2)}"]
                if not tcp:
                    o.bad(f"{where}: gateway --worker {w}: no inferd listens on the pod IP at that port")
                for lw, lc in tcp:
                    if not any(p.get("containerPort") == int(m.group(2)) for p in lc.get("ports", [])):
                        o.bad(f"{lw}: inferd listens on port {m.group(2)} without declaring it")


def check_selectors(o):
    templates = [(where, t.get("metadata", {}).get("labels", {})) for where, role, t, d in o.pods]
    for d in o.docs:
        kind, name = d["kind"], k.name_of(d)
        if kind in ("Deployment", "DaemonSet", "StatefulSet"):
            sel = d["spec"]["selector"]
            own = d["spec"]["template"]["metadata"].get("labels", {})
            if not selector_matches(sel, own):
                o.bad(f"{name}: selector {sel} does not match its template labels {own}")
            for d2 in o.docs:
                if d2 is not d and d2["kind"] in ("Deployment", "DaemonSet", "StatefulSet") and \
                        selector_matches(sel, d2["spec"]["template"]["metadata"].get("labels", {})):
                    o.bad(f"{name}: its selector also selects the pods of {k.name_of(d2)}")
        sel = None
        if kind == "Service":
            sel = d["spec"].get("selector")
        elif kind == "PodDisruptionBudget":
            sel = d["spec"]["selector"]
        elif kind == "NetworkPolicy":
            sel = d["spec"]["podSelector"]
            for rule in d["spec"].get("ingress", []):
                for peer in rule.get("from", []):
                    if "podSelector" in peer and not any(selector_matches(peer["podSelector"], l) for _, l in templates):
                        o.bad(f"{name}: ingress peer {peer['podSelector']} matches no pod template")
        elif kind == "InferencePool":
            sel = d["spec"]["selector"]
            port = d["spec"]["targetPorts"][0]["number"]
            for where, role, t, _ in o.pods:
                if selector_matches(sel, t.get("metadata", {}).get("labels", {})):
                    if not any(p.get("containerPort") == port for c in t["spec"]["containers"] for p in c.get("ports", [])):
                        o.bad(f"{name}: pool member {where} has no containerPort {port}")
        elif kind == "ServiceMonitor":
            svcs = [s for s in o.docs if s["kind"] == "Service"
                    and selector_matches(d["spec"]["selector"], s["metadata"].get("labels", {}))]
            if not svcs:
                o.bad(f"{name}: selects no Service")
            ports = {p.get("name") for s in svcs for p in s["spec"]["ports"]}
            for e in d["spec"]["endpoints"]:
                if e.get("port") not in ports:
                    o.bad(f"{name}: endpoint port {e.get('port')} is no port of the Services it selects")
        elif kind == "HTTPRoute":
            pools = {p["metadata"]["name"] for p in o.docs if p["kind"] == "InferencePool"}
            for rule in d["spec"]["rules"]:
                for b in rule.get("backendRefs", []):
                    if b.get("kind") == "InferencePool" and b["name"] not in pools:
                        o.bad(f"{name}: backend InferencePool {b['name']} is not in the overlay")
        if sel is not None and not any(selector_matches(sel, l) for _, l in templates):
            o.bad(f"{name}: selector {sel} matches no pod template of the overlay")
        if kind == "Service":
            for p in d["spec"]["ports"]:
                tp = p.get("targetPort")
                if isinstance(tp, str) and not any(
                        selector_matches(sel, t.get("metadata", {}).get("labels", {})) and
                        any(cp.get("name") == tp for c in t["spec"]["containers"] for cp in c.get("ports", []))
                        for _, _, t, _ in o.pods):
                    o.bad(f"{name}: targetPort {tp} is no named port of the pods it selects")
    for where, role, t, d in o.pods:
        aff = t["spec"].get("affinity", {})
        for kind in ("podAffinity", "podAntiAffinity"):
            for term in aff.get(kind, {}).get("requiredDuringSchedulingIgnoredDuringExecution", []):
                if kind == "podAffinity" and not any(selector_matches(term["labelSelector"], l) for _, l in templates):
                    o.bad(f"{where}: {kind} {term['labelSelector']} matches no pod template")


def check_isolation(o, metrics_allowed):
    for where, role, t, d in o.pods:
        s = t["spec"]
        for f in ("hostNetwork", "hostPID", "hostIPC"):
            if s.get(f):
                o.bad(f"{where}: {f}")
        for c in k.containers(s):
            if (c.get("securityContext") or {}).get("privileged"):
                o.bad(f"{where} {c['name']}: privileged")
            for p in c.get("ports", []):
                if "hostPort" in p:
                    o.bad(f"{where} {c['name']}: hostPort {p['hostPort']}")
    for where, t, c, b, args in o.servers():
        if b != "expertd":
            continue
        ports = c.get("ports", [])
        metrics = flag_values(args, "metrics-addr")
        if any(a.startswith("--peer-listen") for a in args):
            o.bad(f"{where}: expertd opens a peer TCP port (--peer-listen)")
        if not metrics_allowed and (ports or metrics):
            o.bad(f"{where}: expertd has TCP ports {ports} / --metrics-addr {metrics} in an overlay without "
                  "components/expertd-metrics")
        for p in ports:
            if p.get("name") != "metrics" or [f"$(POD_IP):{p['containerPort']}"] != metrics:
                o.bad(f"{where}: expertd port {p} is not its metrics exporter on the pod IP ({metrics})")


def check_probes(o):
    for where, role, t, d in o.pods:
        for c in t["spec"]["containers"]:
            who = f"{where} container {c['name']}"
            for p in ("livenessProbe", "readinessProbe"):
                if p not in c:
                    o.bad(f"{who}: no {p}")
    for where, t, c, b, args in o.servers():
        who = f"{where} {b}"
        env = k.container_env(c, t)
        if b == "gateway":
            port = next((p for p in c.get("ports", []) if p.get("containerPort") == 8000), None)
            paths = {c.get(p, {}).get("httpGet", {}).get("path") for p in ("livenessProbe", "readinessProbe")}
            if not port or paths != {"/health", "/metrics"} or c["readinessProbe"]["httpGet"]["path"] != "/health":
                o.bad(f"{who}: probes {paths} (want readiness /health, liveness /metrics on port 8000)")
            for p in ("livenessProbe", "readinessProbe"):
                hp = c.get(p, {}).get("httpGet", {}).get("port")
                if hp not in (8000, port and port.get("name")):
                    o.bad(f"{who}: {p} on port {hp}, the gateway serves {port}")
            continue
        sockets = [a[5:] for a in flag_values(args, "listen") if a.startswith("unix:")] + flag_values(args, "socket")
        for p in ("livenessProbe", "readinessProbe"):
            probe = c.get(p, {})
            if sockets:
                cmd = " ".join(probe.get("exec", {}).get("command", []))
                cmd = re.sub(r"\$([A-Za-z_][A-Za-z0-9_]*)", lambda m: env.get(m.group(1), m.group(0)), cmd)
                if f"test -S {sockets[0]}" not in cmd:
                    o.bad(f"{who}: {p} '{cmd}' does not check its socket {sockets[0]}")
            elif "tcpSocket" not in probe:
                o.bad(f"{who}: a TCP server without a tcpSocket {p}")


def main():
    problems = []
    goldens = k.load_goldens()
    for name, docs in goldens.items():
        o = Overlay(name, docs)
        kustom = open(os.path.join(k.OVERLAYS_DIR, name, "kustomization.yaml")).read()
        metrics_allowed = "expertd-metrics" in kustom
        if o.conf_map is not None:
            check_resources(o)
            check_model_and_config(o)
            check_sockets(o)
        check_selectors(o)
        check_isolation(o, metrics_allowed)
        check_probes(o)
        problems += o.problems
        print(f"{name}: {len(o.pods)} pod templates, {sum(1 for _ in o.servers())} moestream containers checked")
    os.chdir(k.ROOT)
    check_committed_memory_plans(problems)
    k.fail(problems, "policy")
    print(f"policy: {len(goldens)} overlays pass")


if __name__ == "__main__":
    main()
