"""Shared helpers of the deploy/k8s tests (tests/k8s/*_test.py, docs/KUBERNETES.md)."""
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OVERLAYS_DIR = os.path.join(ROOT, "deploy", "k8s", "overlays")
GOLDEN_DIR = os.path.join(ROOT, "tests", "k8s", "golden")
SCHEMA_DIR = os.path.join(ROOT, "tests", "k8s", "schemas")
# The renderer the goldens were made with: kubectl's embedded kustomize. Other versions order
# or format some output differently, so only this one is compared byte for byte.
KUSTOMIZE_VERSION = "v5.5.0"
PINNED_KUBECTL = os.path.join(ROOT, ".cache", "kubectl", "v1.32.3", "kubectl")
SKIP = 77  # ctest SKIP_RETURN_CODE of the render test


def overlays():
    return sorted(d for d in os.listdir(OVERLAYS_DIR) if os.path.isfile(os.path.join(OVERLAYS_DIR, d, "kustomization.yaml")))


def golden_path(overlay):
    return os.path.join(GOLDEN_DIR, overlay + ".yaml")


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def load_goldens():
    """{overlay: [documents]} for every overlay; a missing golden is an error."""
    out = {}
    for o in overlays():
        p = golden_path(o)
        if not os.path.exists(p):
            raise SystemExit(f"no golden {os.path.relpath(p, ROOT)} for overlay {o}: run tools/k8s/render_goldens.sh")
        out[o] = load_docs(p)
    return out


def _kustomize_version(cmd, pattern):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, r.stdout)
    return m.group(1) if m else None


def find_renderer():
    """(argv prefix to render a directory, description) of a renderer with kustomize
    KUSTOMIZE_VERSION, or (None, why not). Order: $MOE_KUBECTL, the pinned kubectl of
    tools/k8s/install_kubectl.sh, kubectl on PATH, kustomize on PATH."""
    tried = []
    candidates = []
    if os.environ.get("MOE_KUBECTL"):
        candidates.append(("kubectl", os.environ["MOE_KUBECTL"]))
    candidates.append(("kubectl", PINNED_KUBECTL))
    for name in ("kubectl", "kustomize"):
        for d in os.environ.get("PATH", "").split(os.pathsep):
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                candidates.append((name, p))
                break
    for kind, path in candidates:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            tried.append(f"{path}: missing")
            continue
        if kind == "kubectl":
            v = _kustomize_version([path, "version", "--client"], r"Kustomize Version:\s*(v\d+\.\d+\.\d+)")
            render = [path, "kustomize"]
        else:
            v = _kustomize_version([path, "version"], r"(v\d+\.\d+\.\d+)")
            render = [path, "build"]
        if v == KUSTOMIZE_VERSION:
            return render, f"{path} (kustomize {v})"
        tried.append(f"{path}: kustomize {v or 'unknown'}, not {KUSTOMIZE_VERSION}")
    return None, "; ".join(tried)


def render(renderer, overlay):
    r = subprocess.run(renderer + [os.path.join(OVERLAYS_DIR, overlay)], capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(renderer)} {overlay}: {r.stderr.decode(errors='replace')}")
    return r.stdout


def name_of(doc):
    return f"{doc['kind']}/{doc['metadata']['name']}"


def pod_templates(doc):
    """(where, role, PodTemplateSpec) of every pod template in a workload document."""
    k = doc["kind"]
    if k in ("Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet"):
        yield name_of(doc), None, doc["spec"]["template"]
    elif k == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        if lwt.get("leaderTemplate"):
            yield name_of(doc) + " leaderTemplate", "leader", lwt["leaderTemplate"]
        yield name_of(doc) + " workerTemplate", "worker", lwt["workerTemplate"]


LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def lws_runtime(doc, role, group=0, index=None):
    """(labels, env) the LWS controller and its pod webhook add to a pod of a LeaderWorkerSet
    (kubernetes-sigs/lws: the name / group-index / worker-index labels; LWS_LEADER_ADDRESS,
    LWS_GROUP_SIZE, LWS_WORKER_INDEX in every container and init container), for group `group`:
    the leader is worker 0, the worker template stands for worker `index` (default 1, the first
    of 1..size-1). ({}, {}) for other workloads."""
    if doc.get("kind") != "LeaderWorkerSet":
        return {}, {}
    name = doc["metadata"]["name"]
    ns = doc["metadata"].get("namespace", "default")
    size = doc["spec"]["leaderWorkerTemplate"].get("size", 1)
    index = "0" if role == "leader" else str(1 if index is None else index)
    labels = {LWS_NAME_LABEL: name, LWS_GROUP_LABEL: str(group), LWS_WORKER_LABEL: index}
    env = {"LWS_LEADER_ADDRESS": f"{name}-{group}.{name}.{ns}", "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": index}
    return labels, env


def pod_labels(doc, role, template, index=None):
    """The labels a pod of this template carries once created (the template's + LWS's; index:
    lws_runtime's worker index)."""
    labels = dict(template.get("metadata", {}).get("labels", {}))
    labels.update(lws_runtime(doc, role, index=index)[0])
    return labels


def pod_env(doc, role, container, template, extra=None, index=None):
    """container_env with what the pod knows at run time: LWS's labels and env, then extra
    (index: lws_runtime's worker index)."""
    env = dict(lws_runtime(doc, role, index=index)[1])
    env.update(extra or {})
    return container_env(container, template, env, labels=pod_labels(doc, role, template, index))


def containers(pod_spec, init=True):
    out = list(pod_spec.get("containers", []))
    if init:
        out += pod_spec.get("initContainers", [])
    return out


def expand(text, env):
    """Kubernetes' $(VAR) expansion in command/args ($$ escapes); unknown stay as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def container_env(container, template, extra=None, labels=None):
    """The values of the container's env that a test can know: literal values and labels of the
    pod (fieldRef metadata.labels['k']: labels, default the template's); extra gives values for
    the rest (e.g. the pod IP)."""
    labels = template.get("metadata", {}).get("labels", {}) if labels is None else labels
    env = dict(extra or {})
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
            m = re.fullmatch(r"metadata\.labels\['([^']+)'\]", ref)
            if m and m.group(1) in labels:
                env[e["name"]] = labels[m.group(1)]
    return env


# The pods' mounted paths -> a directory name each: tests that run the rendered pods' processes
# on this machine (node_smoke_test.py, tools/multihost/fake_hosts.py --from-manifest) give each
# its own directory and replace the paths in args and config (remap_paths).
POD_PATHS = {"/models/model": "model", "/etc/moestream": "etc", "/etc/moestream-peer-token": "peer-token",
             "/run/moestream-pod": "pod", "/run/moestream-peer": "peer", "/run/moestream": "run"}


def remap_paths(text, paths):
    """text with each pod path of paths ({pod path: local path}) replaced by its local path where
    it is a whole path (longest first: /run/moestream-pod before /run/moestream)."""
    for old in sorted(paths, key=len, reverse=True):
        text = re.sub(re.escape(old) + r"(?![A-Za-z0-9_.-])", lambda _m, new=paths[old]: new, text)
    return text


def secret_mounts(template):
    """(volume, mountPath) of every Secret volume a container or init container of the pod
    mounts."""
    out = []
    for v in template["spec"].get("volumes", []):
        if "secret" not in v:
            continue
        for c in containers(template["spec"]):
            for m in c.get("volumeMounts", []):
                if m["name"] == v["name"] and (v, m["mountPath"]) not in out:
                    out.append((v, m["mountPath"]))
    return out


def fail(problems, what):
    if problems:
        for p in problems:
            print("FAIL:", p)
        print(f"{what}: {len(problems)} problem(s)")
        sys.exit(1)
