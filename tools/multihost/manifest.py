"""The fake hosts' processes as the rendered manifests run them (fake_hosts.py --from-manifest;
docs/MULTIHOST.md "Tests without a cluster").

From the committed golden of an overlay (tests/k8s/golden/<overlay>.yaml, multi-node: a
LeaderWorkerSet of `size` pods + the expertd DaemonSet) each fake host i runs the pods a node of
group 0 runs: the DaemonSet's (expertd, every host) and the LeaderWorkerSet's leader pod (i = 0:
inferd + gateway) or worker pod i (inferd). Their init containers run first, as written. Of the
rendered containers only what a kubelet fills in is replaced:
  - $(VAR) in command/args with the pod's env (k8s_common.pod_env: literal values, labels, LWS's
    labels and env for worker index i, POD_IP = the host's 10.77.K.i+1 address), also given to the
    process as its environment;
  - the mounted paths (k8s_common.POD_PATHS: /etc/moestream, /models/model, /run/moestream,
    /run/moestream-pod, /run/moestream-peer, /etc/moestream-peer-token) by the host's own
    directories (k8s_common.remap_paths), also inside moestream.conf; the image's build dir
    (/opt/moestream/build) by the build dir;
  - each ConfigMap volume is its data written into the host's directory, each Secret volume a
    directory whose `token` is one random token of the cluster, at the volume's defaultMode.
The pods' DNS names (the LWS headless Service: <lws>-0.<lws>, <lws>-0-<i>.<lws>, and their
.<namespace>.svc.cluster.local forms) resolve as cluster DNS would resolve them: a hosts file
naming every host's address is bind-mounted over /etc/hosts in each host's mount namespace, so
the gateway's --worker=<lws>-0-1.<lws>:50051 and the ownership map the init container rendered
(hosts <lws>-0.<lws>:7100, ...) are used as written. The model and config directories are
read-only there (the pods mount them readOnly).

Needs PyYAML (the goldens) and tests/k8s, tools/k8s of this checkout."""
import json
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
sys.path.insert(0, os.path.join(ROOT, "tools", "k8s"))
import k8s_common as k  # noqa: E402
import ownership_template  # noqa: E402
from policy_test import Overlay, binary_of  # noqa: E402

IMAGE_BUILD = "/opt/moestream/build"  # the image's build dir (deploy/k8s: command[0] of every service)
SERVICE_ORDER = {"expertd": 0, "inferd": 1, "gateway": 2}
CONF_KEY = "moestream.conf"  # the one ConfigMap file whose values are pod paths (remapped)


class ManifestError(RuntimeError):
    pass


class Service:
    """One rendered moestream container as a process of a fake host."""

    def __init__(self, name, binary, argv, env, container, pod):
        self.name, self.binary, self.argv, self.env = name, binary, argv, env
        self.container, self.pod = container, pod  # the rendered container and its pod (where)
        self.probe = {}  # its readinessProbe, exec commands' paths remapped

    def port(self, ref):
        """A probe's port: a number or the name of one of the container's ports."""
        if isinstance(ref, int) or str(ref).isdigit():
            return int(ref)
        for p in self.container.get("ports", []):
            if p.get("name") == ref:
                return int(p["containerPort"])
        raise ManifestError(f"{self.pod} container {self.container['name']}: no port named {ref!r}")

    def flag(self, name):
        return [a.split("=", 1)[1] for a in self.argv[1:] if a.startswith(f"--{name}=")]


class Manifest:
    def __init__(self, overlay="multi-node", golden=None):
        self.overlay = overlay
        path = golden or k.golden_path(overlay)
        if not os.path.exists(path):
            raise ManifestError(f"no golden {path} (overlays: {', '.join(k.overlays())})")
        self.golden = path
        self.o = Overlay(overlay, k.load_docs(path))
        lws = [d for d in self.o.docs if d["kind"] == "LeaderWorkerSet"]
        if len(lws) != 1:
            raise ManifestError(f"{overlay}: {len(lws)} LeaderWorkerSets (the fake hosts run one LeaderWorkerSet group)")
        self.lws = lws[0]
        self.lws_name = self.lws["metadata"]["name"]
        self.namespace = self.lws["metadata"].get("namespace", "default")
        self.size = self.lws["spec"]["leaderWorkerTemplate"].get("size", 1)
        if self.o.conf_map is None or "plan.json" not in self.o.conf_map["data"]:
            raise ManifestError(f"{overlay}: no ConfigMap with {CONF_KEY} and plan.json")
        self.plan = json.loads(self.o.conf_map["data"]["plan.json"])
        d = self.plan["model"]["dir"]
        self.model_dir = d if os.path.isabs(d) else os.path.join(ROOT, d)
        self.group = "0"

    # which pods a fake host runs -----------------------------------------------------------------
    def pods_of(self, index):
        """[(where, role, template, doc)] of the pods node `index` of group 0 runs: the DaemonSets'
        and the LeaderWorkerSet's leader (0) or worker (1..size-1) pod."""
        if not 0 <= index < self.size:
            raise ManifestError(f"host {index}: the LeaderWorkerSet has {self.size} pods per group")
        out = []
        for where, role, t, d in self.o.pods:
            if d["kind"] == "DaemonSet" or (d is self.lws and role == ("leader" if index == 0 else "worker")):
                out.append((where, role, t, d))
            elif d["kind"] != "LeaderWorkerSet" and d["kind"] != "DaemonSet":
                raise ManifestError(f"{where}: a {d['kind']} (the fake hosts place DaemonSets and one LWS group)")
        return out

    def paths(self, host_dir):
        """{pod path: the host's directory}."""
        return {p: os.path.join(host_dir, d) for p, d in k.POD_PATHS.items()}

    def dns(self):
        """[(host index, [names])]: each pod's DNS names under the LWS headless Service (what the
        rendered args and the map template address), as cluster DNS answers them."""
        out = []
        for i, hp in enumerate(ownership_template.expected_hosts(self.lws_name, self.size, 7100, group=self.group)):
            short = hp.rsplit(":", 1)[0]  # <pod>.<lws>
            pod = short.split(".")[0]
            out.append((i, [short, f"{short}.{self.namespace}", f"{short}.{self.namespace}.svc.cluster.local", pod]))
        return out

    def _env(self, index, role, t, d, c, addr, paths):
        """The container's environment as the kubelet sets it: what LWS injects and the declared
        env (values, label fieldRefs, status.podIP = addr), paths remapped; nothing else."""
        lws_index = index if d is self.lws else None
        ips = {e["name"]: addr for e in c.get("env", [])
               if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP"}
        env = k.pod_env(d, role, c, t, ips, index=lws_index)
        names = list(k.lws_runtime(d, role, index=lws_index)[1]) + [e["name"] for e in c.get("env", [])]
        return {n: k.remap_paths(env[n], paths) for n in names if n in env}

    def _argv(self, words, env, paths, where, c):
        out = []
        for w in words:
            a = k.remap_paths(k.expand(w, env), paths)
            if re.search(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", a):
                raise ManifestError(f"{where} container {c['name']}: {a!r}: a variable no kubelet here fills in")
            out.append(a)
        return out

    def init_containers(self, index, addr, host_dir):
        """[(name, argv, env)] of the host's pods' init containers, in order (DaemonSets first)."""
        paths, out = self.paths(host_dir), []
        for where, role, t, d in self.pods_of(index):
            for ic in t["spec"].get("initContainers", []):
                env = self._env(index, role, t, d, ic, addr, paths)
                argv = self._argv((ic.get("command") or []) + (ic.get("args") or []), env, paths, where, ic)
                out.append((f"init-{d['kind'].lower()}-{ic['name']}", argv, env))
        return out

    def services(self, index, addr, host_dir, build):
        """[Service] of the host in start order (expertd, inferd, gateway)."""
        paths, out = self.paths(host_dir), []
        for where, role, t, d in self.pods_of(index):
            for c in k.containers(t["spec"], init=False):
                b = binary_of(c)
                if not b:
                    raise ManifestError(f"{where} container {c['name']}: not a moestream service")
                cmd = c.get("command") or []
                if len(cmd) != 1 or not cmd[0].startswith(IMAGE_BUILD + "/"):
                    raise ManifestError(f"{where} container {c['name']}: command {cmd} is not one binary "
                                        f"under {IMAGE_BUILD}")
                env = self._env(index, role, t, d, c, addr, paths)
                argv = [os.path.join(build, cmd[0][len(IMAGE_BUILD) + 1:])] + \
                    self._argv(c.get("args") or [], env, paths, where, c)
                svc = Service(b, b, argv, env, c, where)
                probe = json.loads(json.dumps(c.get("readinessProbe") or {}))
                if "exec" in probe:
                    probe["exec"]["command"] = [k.remap_paths(w, paths) for w in probe["exec"]["command"]]
                svc.probe = probe
                out.append(svc)
        out.sort(key=lambda s: SERVICE_ORDER[s.binary])
        names = [s.binary for s in out]
        if sorted(set(names)) != sorted(names):
            raise ManifestError(f"host {index}: two containers of one service ({names})")
        return out

    def volumes(self, index, host_dir):
        """{'config': [(local dir, {file: text})], 'secret': [(local dir, mode)], 'empty': [dir]}
        of the host's pods' volumes mounted at a pod path (ConfigMap data with moestream.conf's
        pod paths remapped)."""
        paths = self.paths(host_dir)
        out = {"config": [], "secret": [], "empty": [], "readonly": []}
        ro, rw = set(), set()
        for where, role, t, d in self.pods_of(index):
            vols = {v["name"]: v for v in t["spec"].get("volumes", [])}
            for c in k.containers(t["spec"]):
                for m in c.get("volumeMounts", []):
                    v, mp = vols.get(m["name"]), m["mountPath"]
                    if v is None:
                        raise ManifestError(f"{where} container {c['name']}: no volume {m['name']}")
                    if mp not in paths:
                        raise ManifestError(f"{where} container {c['name']}: mount {mp} is no known pod path "
                                            f"(k8s_common.POD_PATHS)")
                    local = paths[mp]
                    if "configMap" in v:
                        cm = self.o.configmaps.get(v["configMap"]["name"])
                        if cm is None:
                            raise ManifestError(f"{where}: no ConfigMap {v['configMap']['name']}")
                        files = {key: (k.remap_paths(val, paths) if key == CONF_KEY else val)
                                 for key, val in cm.get("data", {}).items()}
                        if all(x[0] != local for x in out["config"]):
                            out["config"].append((local, files))
                    elif "secret" in v:
                        if all(x[0] != local for x in out["secret"]):
                            out["secret"].append((local, v["secret"].get("defaultMode", 0o644)))
                    elif "emptyDir" in v:
                        if local not in out["empty"]:
                            out["empty"].append(local)
                    if "configMap" in v or "hostPath" in v:
                        (ro if m.get("readOnly") else rw).add(local)
        # read-only where every container of the host's pods mounts it readOnly (an emptyDir an
        # init container writes stays writable: the harness runs every container in one mount
        # namespace per host)
        out["readonly"] = sorted(ro - rw)
        return out

    def fresh_map(self, moe, model, hosts, epoch):
        """The map `moe ownership` makes of `model` for these hosts (its weights identity is what
        inferd checks a map against)."""
        return ownership_template.make(moe, model, hosts, epoch)
