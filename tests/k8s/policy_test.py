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
  peers       every inferd with a peer flag has --peer-listen ($(POD_IP):PORT, a declared port named
              peer), --peer-token-file (a copy an init container makes, chown to inferd's uid and
              chmod 0400, from a Secret volume of mode 0400 - or such a Secret volume itself, which
              only root could read), --ownership-map (rendered per group by an init container from
              a ConfigMap template whose hosts are the LeaderWorkerSet's pods <lws>-@GROUP@[-i].<lws>
              :PORT, size of them; with moe built, the plan's model's weights identity) and
              --host-index (its LWS worker index); in a LeaderWorkerSet all inferds or none, and
              restartPolicy RecreateGroupOnPodRestart; canaries (PEER_CANARIES: mutated goldens)
              must each be reported;
  network     every port of a pod an Ingress NetworkPolicy selects is admitted by one of its rules;
              every peer port is in a selected pod and admitted only from pods of the same
              LeaderWorkerSet (podSelector on leaderworkerset.sigs.k8s.io/name); ConfigMaps < 1 MiB;
  isolation   no hostNetwork / hostPID / hostIPC / hostPort / privileged; expertd never listens on
              TCP except its metrics exporter on the pod IP (components/expertd-metrics) and has
              no expert-parallel flag (RunExperts is inferd's);
  probes      every container has liveness and readiness probes (gateway: HTTP /health and
              /metrics on its port; a unix-socket server: a check of its own socket).

    tests/k8s/policy_test.py [BUILD_DIR]     (BUILD_DIR/tools/moe/moe: the weights check)"""
import configparser
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "k8s"))
import k8s_common as k  # noqa: E402
import ownership_template  # noqa: E402
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

    def servers_full(self):
        """(where, role, template, workload, container, binary, expanded args) of every moestream
        container; $(VAR)s filled in as in a pod of group 0 (LWS's labels and env), the pod IP
        left as $(POD_IP)."""
        for where, role, t, d in self.pods:
            for c in k.containers(t["spec"]):
                b = binary_of(c)
                if b:
                    env = k.pod_env(d, role, c, t, {"POD_IP": "$(POD_IP)"})
                    yield where, role, t, d, c, b, [k.expand(a, env) for a in c.get("args", [])]

    def servers(self):
        """(where, template, container, binary, expanded args) of every moestream container."""
        for where, role, t, d, c, b, args in self.servers_full():
            yield where, t, c, b, args


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
    templates = [(where, k.pod_labels(d, role, t)) for where, role, t, d in o.pods]
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
            for where, role, t, w in o.pods:
                if selector_matches(sel, k.pod_labels(w, role, t)):
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
                        selector_matches(sel, k.pod_labels(w, role, t)) and
                        any(cp.get("name") == tp for c in t["spec"]["containers"] for cp in c.get("ports", []))
                        for _, role, t, w in o.pods):
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
        if any(a.startswith(("--peer-", "--ownership-map", "--host-index")) for a in args):
            o.bad(f"{where}: expertd has expert-parallel flags {[a for a in args if a.startswith('--peer-')]}: "
                  "RunExperts is inferd's (expertd keeps no TCP port)")
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


# --- Expert parallelism (inferd --peer-listen, docs/KUBERNETES.md "multi-node") ---------------
PEER_FLAGS = ("peer-listen", "peer-token-file", "ownership-map", "host-index")
TOKEN_MODE = 0o400


def effective_uid(t, c):
    return (c.get("securityContext") or {}).get("runAsUser", (t["spec"].get("securityContext") or {}).get("runAsUser"))


def script_of(c):
    return "\n".join((c.get("command") or []) + (c.get("args") or []))


def secret_mode_ok(v):
    """A Secret volume whose files are mode 0400 (defaultMode, and every item's own mode)."""
    sec = v.get("secret", {})
    if sec.get("defaultMode") != TOKEN_MODE:
        return False
    return all(i.get("mode", TOKEN_MODE) == TOKEN_MODE for i in sec.get("items", []))


def writer_of(o, where, t, c, path, what):
    """The init container of the pod that writes `path` (a file of an emptyDir the container
    mounts) and the path as that init container sees it, or (None, None) after a problem."""
    va = volume_at(t, c, path)
    if not va or va[0] is None:
        o.bad(f"{where} inferd: {what} {path} lies in no volume of the pod")
        return None, None
    v, m = va
    if m.get("readOnly") is not True:
        o.bad(f"{where} inferd: the mount of {what} {path} ({m['name']}) is not readOnly")
    if "emptyDir" not in v:
        return v, None
    if what == "--peer-token-file" and v["emptyDir"].get("medium") != "Memory":
        o.bad(f"{where}: the token's emptyDir {v['name']} is not medium: Memory (the token would be on the node's disk)")
    rel = os.path.relpath(path, m["mountPath"])
    for ic in t["spec"].get("initContainers", []):
        for im in ic.get("volumeMounts", []):
            if im["name"] == v["name"] and not im.get("readOnly"):
                ipath = os.path.join(im["mountPath"], rel)
                if ipath in script_of(ic):
                    return v, (ic, ipath)
    o.bad(f"{where} inferd: {what} {path} is in the emptyDir {v['name']} but no init container of the pod writes it")
    return v, None


def check_token(o, where, t, c, path):
    v, w = writer_of(o, where, t, c, path, "--peer-token-file")
    if v is None:
        return
    uid = effective_uid(t, c)
    if "secret" in v:
        if not secret_mode_ok(v):
            o.bad(f"{where}: --peer-token-file from Secret volume {v['name']} without mode 0400 "
                  f"(defaultMode {v['secret'].get('defaultMode')})")
        if uid not in (0, None):
            o.bad(f"{where}: --peer-token-file straight from Secret volume {v['name']}: its files are root's, "
                  f"so uid {uid} cannot read them at 0400 (and fsGroup makes them 0440, which inferd refuses): "
                  "copy the token in an init container")
        return
    if w is None:
        if "emptyDir" not in v:
            o.bad(f"{where}: --peer-token-file {path} is neither from a Secret volume nor copied from one")
        return
    ic, ipath = w
    script = script_of(ic)
    secrets = [(m, volume(t, m["name"])) for m in ic.get("volumeMounts", [])
               if "secret" in (volume(t, m["name"]) or {})]
    src = [(m, sv) for m, sv in secrets if m["mountPath"].rstrip("/") + "/" in script]
    if not src:
        o.bad(f"{where}: init container {ic['name']} writes the token {ipath} but copies it from no Secret volume")
    for m, sv in src:
        if not secret_mode_ok(sv):
            o.bad(f"{where}: Secret volume {sv['name']} (the peer token) is not mode 0400 "
                  f"(defaultMode {sv['secret'].get('defaultMode')})")
        if m.get("readOnly") is not True:
            o.bad(f"{where}: init container {ic['name']} mounts the Secret {sv['name']} writable")
    # The copy: owned by the uid inferd runs as, readable by it alone.
    if uid not in (0, None) and not re.search(rf"chown {uid}(:\d+)? [^\n]*{re.escape(ipath)}", script):
        o.bad(f"{where}: init container {ic['name']} does not chown the token copy {ipath} to uid {uid}")
    if not re.search(rf"chmod 0?[46]00 [^\n]*{re.escape(ipath)}", script):
        o.bad(f"{where}: init container {ic['name']} does not chmod 0400 (or 0600) the token copy {ipath}")


def check_map(o, where, t, d, c, path, port, moe, made):
    """The ownership map: rendered per group by an init container from the ConfigMap template,
    whose hosts are this LeaderWorkerSet's pods (ownership_template.check), and (moe built)
    whose weights identity is the plan's model's."""
    v, w = writer_of(o, where, t, c, path, "--ownership-map")
    if v is None:
        return
    if w is None:
        o.bad(f"{where}: --ownership-map {path} is not rendered per group by an init container "
              "(a map straight from a ConfigMap gives every group the same hosts)")
        return
    ic, ipath = w
    script = script_of(ic)
    if ownership_template.PLACEHOLDER not in script:
        o.bad(f"{where}: init container {ic['name']} does not fill in {ownership_template.PLACEHOLDER}")
    group_vars = [e["name"] for e in ic.get("env", [])
                  if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == f"metadata.labels['{k.LWS_GROUP_LABEL}']"]
    if not any(re.search(rf"\$\{{?{n}\b", script) for n in group_vars):
        o.bad(f"{where}: init container {ic['name']} fills the map in with no variable from the "
              f"{k.LWS_GROUP_LABEL} label")
    keys = []
    for m in ic.get("volumeMounts", []):
        cv = volume(t, m["name"]) or {}
        if "configMap" in cv:
            cm = o.configmaps.get(cv["configMap"]["name"], {}).get("data", {})
            for key in cm:
                if os.path.join(m["mountPath"], key) in script:
                    keys.append((cv["configMap"]["name"], key, cm[key]))
    tmpl = [x for x in keys if x[1].endswith(".json")]
    if len(tmpl) != 1:
        o.bad(f"{where}: init container {ic['name']} reads {len(tmpl)} map templates from ConfigMaps (want 1)")
        return
    cm_name, key, text = tmpl[0]
    try:
        m = json.loads(text)
    except ValueError as e:
        o.bad(f"{where}: ConfigMap {cm_name} {key}: not JSON ({e})")
        return
    if d["kind"] != "LeaderWorkerSet":
        o.bad(f"{where}: an expert-parallel inferd outside a LeaderWorkerSet (no group to name the hosts by)")
        return
    size = d["spec"]["leaderWorkerTemplate"].get("size", 1)
    for p in ownership_template.check(m, d["metadata"]["name"], size, port):
        o.bad(f"{where}: ConfigMap {cm_name} {key}: {p} (tools/k8s/ownership_template.py)")
    if moe and o.conf_map is not None and "plan.json" in o.conf_map["data"]:
        model = json.loads(o.conf_map["data"]["plan.json"])["model"]["dir"]
        model = model if os.path.isabs(model) else os.path.join(k.ROOT, model)
        key2 = (model, tuple(m.get("hosts") or []))
        if key2 not in made:
            try:
                made[key2] = ownership_template.make(moe, model, list(key2[1]), 1)
            except (RuntimeError, OSError) as e:
                made[key2] = e
        fresh = made[key2]
        if isinstance(fresh, Exception):
            o.bad(f"{where}: moe ownership for the plan's model: {fresh}")
        elif fresh.get("weights") != m.get("weights") or \
                [len(r) for r in fresh.get("owner", [])] != [len(r) for r in m.get("owner", [])]:
            o.bad(f"{where}: ConfigMap {cm_name} {key} is for weights {m.get('weights')} "
                  f"({len(m.get('owner', []))} layers), the plan's model {os.path.relpath(model, k.ROOT)} is "
                  f"{fresh.get('weights')} ({len(fresh.get('owner', []))} layers): run tools/k8s/ownership_template.py")


def check_peers(o, moe, made):
    """Every inferd with a peer flag has them all: --peer-listen on the pod IP at a declared port,
    --peer-token-file a 0400 copy of a Secret (or a 0400 Secret volume inferd can read),
    --ownership-map rendered for its group, --host-index its LWS worker index; in a
    LeaderWorkerSet every inferd has them or none does, and a group with them is restarted
    as a whole. The peer port's NetworkPolicy: check_network."""
    by_workload = {}
    for where, role, t, d, c, b, args in o.servers_full():
        if b != "inferd":
            continue
        given = {f: flag_values(args, f) for f in PEER_FLAGS}
        extra = [a for a in args if a.startswith("--peer-") and a.split("=", 1)[0][2:] not in PEER_FLAGS]
        on = any(given.values()) or bool(extra)
        by_workload.setdefault(k.name_of(d), []).append((where, on))
        if not on:
            continue
        for f, vals in given.items():
            if len(vals) != 1:
                o.bad(f"{where} inferd: --{f} given {len(vals)} times (the peer flags go together)")
        if any(len(v) != 1 for v in given.values()):
            continue
        listen, token, mp, index = (given[f][0] for f in PEER_FLAGS)
        m = re.fullmatch(r"\$\(POD_IP\):(\d+)", listen)
        if not m:
            o.bad(f"{where} inferd: --peer-listen={listen}, not $(POD_IP):PORT (the pod IP only, never a wildcard)")
            continue
        port = int(m.group(1))
        decl = [p for p in c.get("ports", []) if p.get("containerPort") == port]
        if not decl or decl[0].get("name") != "peer" or decl[0].get("protocol", "TCP") != "TCP":
            o.bad(f"{where} inferd: --peer-listen port {port} is not declared as containerPort {port} named peer (TCP)")
        if any(a.rsplit(":", 1)[-1] == str(port) for a in flag_values(args, "listen")):
            o.bad(f"{where} inferd: --listen and --peer-listen share port {port}")
        want_index = k.lws_runtime(d, role)[1].get("LWS_WORKER_INDEX")
        if index != want_index:
            o.bad(f"{where} inferd: --host-index {index} in a pod of LWS worker index {want_index} "
                  "(want $(LWS_WORKER_INDEX): host i of the map is worker i)")
        check_token(o, where, t, c, token)
        check_map(o, where, t, d, c, mp, port, moe, made)
    for d in o.docs:
        pods = by_workload.get(k.name_of(d), [])
        if not any(on for _, on in pods):
            continue
        off = [w for w, on in pods if not on]
        if off:
            o.bad(f"{k.name_of(d)}: {off} have no peer flags while the group's other inferds do (one model per group)")
        if d["kind"] == "LeaderWorkerSet":
            rp = d["spec"]["leaderWorkerTemplate"].get("restartPolicy")
            if rp != "RecreateGroupOnPodRestart":
                o.bad(f"{k.name_of(d)}: restartPolicy {rp} with expert parallelism (want RecreateGroupOnPodRestart: "
                      "the group is one model)")


def rule_admits(rule, port):
    """Whether an ingress rule admits a containerPort entry (no ports: all of them)."""
    if "ports" not in rule:
        return True
    for p in rule["ports"]:
        if p.get("protocol", "TCP") != port.get("protocol", "TCP"):
            continue
        want = p.get("port")
        if want is None or want == port.get("name"):
            return True
        if isinstance(want, int) and want <= port["containerPort"] <= p.get("endPort", want):
            return True
    return False


def check_network(o):
    """For every pod an Ingress NetworkPolicy selects, every declared port is admitted by some
    rule of the policies that select it (else nothing reaches it); every peer port (inferd
    --peer-listen) is in a pod some policy selects, and each rule that admits it admits only
    pods of the same LeaderWorkerSet (podSelector on its name label, this namespace)."""
    pols = [d for d in o.docs if d["kind"] == "NetworkPolicy" and "Ingress" in d["spec"].get("policyTypes", ["Ingress"])]
    peer_ports = {}  # id(template) -> {port}
    for where, role, t, d, c, b, args in o.servers_full():
        for listen in flag_values(args, "peer-listen") if b == "inferd" else []:
            peer_ports.setdefault(id(t), set()).add(int(listen.rsplit(":", 1)[-1]))
    for where, role, t, d in o.pods:
        labels = k.pod_labels(d, role, t)
        selecting = [p for p in pols if selector_matches(p["spec"]["podSelector"], labels)]
        peers = peer_ports.get(id(t), set())
        if peers and not selecting:
            o.bad(f"{where}: peer port(s) {sorted(peers)} open to every pod of the cluster: no NetworkPolicy selects the pod")
        if not selecting:
            continue
        for c in t["spec"]["containers"]:
            for port in c.get("ports", []):
                rules = [(p, r) for p in selecting for r in p["spec"].get("ingress", []) if rule_admits(r, port)]
                if not rules:
                    o.bad(f"{where} {c['name']}: port {port['containerPort']} ({port.get('name')}) is admitted by no "
                          f"rule of the NetworkPolicies selecting the pod ({[k.name_of(p) for p in selecting]})")
                if port["containerPort"] not in peers:
                    continue
                for p, r in rules:
                    froms = r.get("from")
                    if not froms:
                        o.bad(f"{k.name_of(p)}: admits the peer port {port['containerPort']} of {where} from anywhere")
                        continue
                    for f in froms:
                        ml = (f.get("podSelector") or {}).get("matchLabels", {})
                        if set(f) != {"podSelector"} or d["kind"] != "LeaderWorkerSet" or \
                                ml.get(k.LWS_NAME_LABEL) != d["metadata"]["name"]:
                            o.bad(f"{k.name_of(p)}: admits the peer port {port['containerPort']} of {where} from {f}, "
                                  f"not only the pods of {k.name_of(d)} ({k.LWS_NAME_LABEL}: {d['metadata']['name']})")


def check_configmap_sizes(o):
    for name, cm in o.configmaps.items():
        n = sum(len(v.encode()) for v in (cm.get("data") or {}).values())
        if n > 1 << 20:
            o.bad(f"ConfigMap {name}: {n} bytes of data, over the 1 MiB a ConfigMap may hold")


def _lws(docs):
    return next(d for d in docs if d["kind"] == "LeaderWorkerSet")


def _tmpl(docs, role):
    return _lws(docs)["spec"]["leaderWorkerTemplate"]["leaderTemplate" if role == "leader" else "workerTemplate"]


def _ctr(docs, role, name):
    return next(c for c in k.containers(_tmpl(docs, role)["spec"]) if c["name"] == name)


def _drop_arg(c, prefix):
    c["args"] = [a for a in c["args"] if not a.startswith(prefix)]


def _set_arg(c, prefix, value):
    c["args"] = [value if a.startswith(prefix) else a for a in c["args"]]


def _vol(docs, role, name):
    return next(v for v in _tmpl(docs, role)["spec"]["volumes"] if v["name"] == name)


def _policy(docs, name):
    return next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == name)


def _cm_data(docs):
    return next(d for d in docs if d["kind"] == "ConfigMap" and "moestream.conf" in d.get("data", {}))["data"]


# Each: a change to a golden with expert parallelism that the checks above must report (the
# message fragment they must print): the peer checks prove they can fail.
PEER_CANARIES = [
    ("no token flag", lambda ds: _drop_arg(_ctr(ds, "worker", "inferd"), "--peer-token-file"),
     "--peer-token-file given 0 times"),
    ("no map flag", lambda ds: _drop_arg(_ctr(ds, "leader", "inferd"), "--ownership-map"), "--ownership-map given 0"),
    ("wildcard peer bind", lambda ds: _set_arg(_ctr(ds, "worker", "inferd"), "--peer-listen", "--peer-listen=0.0.0.0:7100"),
     "not $(POD_IP):PORT"),
    ("undeclared peer port", lambda ds: _ctr(ds, "leader", "inferd").pop("ports"), "is not declared as containerPort"),
    ("fixed host index", lambda ds: _set_arg(_ctr(ds, "worker", "inferd"), "--host-index", "--host-index=0"),
     "--host-index 0 in a pod of LWS worker index 1"),
    ("token mode 0444", lambda ds: _vol(ds, "worker", "peer-token")["secret"].update(defaultMode=0o444),
     "is not mode 0400"),
    ("token straight from the Secret", lambda ds: _set_arg(_ctr(ds, "worker", "inferd"), "--peer-token-file",
                                                           "--peer-token-file=/etc/moestream-peer-token/token")
     or _ctr(ds, "worker", "inferd")["volumeMounts"].append(
         {"name": "peer-token", "mountPath": "/etc/moestream-peer-token", "readOnly": True}),
     "cannot read them at 0400"),
    ("token copy not chmod", lambda ds: _ctr(ds, "worker", "peer-files")["args"].__setitem__(
        0, _ctr(ds, "worker", "peer-files")["args"][0].replace("chmod 0400", "chmod 0644")), "does not chmod 0400"),
    ("token on disk", lambda ds: _vol(ds, "leader", "peer")["emptyDir"].pop("medium"), "is not medium: Memory"),
    ("one map for all groups", lambda ds: _cm_data(ds).__setitem__(
        "ownership-map.template.json", _cm_data(ds)["ownership-map.template.json"].replace("@GROUP@", "0")),
     "hosts ["),
    ("map of another size", lambda ds: _lws(ds)["spec"]["leaderWorkerTemplate"].update(size=3), "hosts ["),
    ("group restarts by pod", lambda ds: _lws(ds)["spec"]["leaderWorkerTemplate"].update(restartPolicy="None"),
     "restartPolicy None with expert parallelism"),
    ("one inferd without peers", lambda ds: [_drop_arg(_ctr(ds, "worker", "inferd"), f"--{f}") for f in PEER_FLAGS],
     "have no peer flags while the group's other inferds do"),
    ("no peer NetworkPolicy", lambda ds: ds.remove(_policy(ds, "moestream-peer")), "admitted by no rule"),
    ("no gateway NetworkPolicy", lambda ds: ds.remove(_policy(ds, "moestream-gateway")), "port 8000 (http) is admitted"),
    ("peer port from any namespace", lambda ds: _policy(ds, "moestream-peer")["spec"]["ingress"][0]["from"].append(
        {"namespaceSelector": {}}), "not only the pods of"),
    ("peer port from anywhere", lambda ds: _policy(ds, "moestream-peer")["spec"]["ingress"][0].pop("from"),
     "from anywhere"),
    ("expertd with a peer port", lambda ds: next(d for d in ds if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
     ["containers"][0]["args"].append("--peer-listen=$(POD_IP):7100"), "expertd has expert-parallel flags"),
]


def run_peer_canaries(goldens, moe):
    """PEER_CANARIES on the first golden with expert parallelism: each must be reported."""
    import copy
    base = next((n for n, ds in goldens.items() for d in ds if d["kind"] == "LeaderWorkerSet"
                 and any("--peer-listen" in a for c in k.containers(d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"])
                         for a in c.get("args", []))), None)
    if base is None:
        return ["no golden has an expert-parallel LeaderWorkerSet: the peer canaries have nothing to change"], 0
    problems = []
    for what, mutate, want in PEER_CANARIES:
        docs = copy.deepcopy(goldens[base])
        mutate(docs)
        o = Overlay(base, docs)
        if o.conf_map is not None:
            check_peers(o, "", {})
        check_network(o)
        check_isolation(o, True)
        if not any(want in p for p in o.problems):
            problems.append(f"peer canary '{what}' on {base}: not reported (want '{want}'; got {o.problems[:3]})")
    return problems, len(PEER_CANARIES)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MOE_BUILD_DIR", "")
    moe = os.path.join(build, "tools", "moe", "moe") if build else ""
    moe = moe if moe and os.access(moe, os.X_OK) else ""
    made = {}
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
            check_peers(o, moe, made)
        check_selectors(o)
        check_network(o)
        check_isolation(o, metrics_allowed)
        check_probes(o)
        check_configmap_sizes(o)
        problems += o.problems
        print(f"{name}: {len(o.pods)} pod templates, {sum(1 for _ in o.servers())} moestream containers checked")
    canary_problems, canaries = run_peer_canaries(goldens, moe)
    problems += canary_problems
    os.chdir(k.ROOT)
    check_committed_memory_plans(problems)
    k.fail(problems, "policy")
    print(f"policy: {len(goldens)} overlays pass, {canaries} expert-parallel canaries reported" + (f" (ownership-map templates checked against {moe})" if made else
                                                    "" if moe else " (moe not built: map templates' weights not checked)"))


if __name__ == "__main__":
    main()
