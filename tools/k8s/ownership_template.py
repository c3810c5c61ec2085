#!/usr/bin/env python3
"""The ownership-map template of the multi-node overlay (docs/KUBERNETES.md, "multi-node").

    tools/k8s/ownership_template.py [--moe build/tools/moe/moe] [--model DIR] [--size 2] [--epoch 1]
        [--heat FILE] [--replicate-share X] [--lws moestream] [--port 7100]
        [--out deploy/k8s/overlays/multi-node/ownership-map.template.json]

Runs `moe ownership` (the map inferd --ownership-map reads: the model's weights identity, the
epoch, the hosts in index order, (layer, expert) -> host) for the model every node holds, with
the hosts of one LeaderWorkerSet group named by their pod DNS names under LWS's headless Service
and the group index left as @GROUP@:

    host 0 (the leader, LWS_WORKER_INDEX 0)   <lws>-@GROUP@.<lws>:<port>
    host i (worker i)                         <lws>-@GROUP@-<i>.<lws>:<port>

Each pod's init container `peer-files` (overlays/multi-node/lws.yaml) replaces @GROUP@ by the
pod's group-index label, so every group gets a map of its own hosts. --model defaults to the
model the overlay's plan.json names (the demo container models/glm-tiny-chat-q4); for a real
model give its converted container (the same bytes every node holds at /var/lib/moestream/model:
the weights identity is checked at inferd start), raise --epoch for every new map of a running
set, and re-render the goldens (tools/k8s/render_goldens.sh). --heat / --replicate-share are
moe ownership's (balance by a running expertd's heat, replicate the hottest share).

The template is written with one row of `owner` per line (moe ownership writes one number per
line); tests/k8s/policy_test.py checks it against the rendered LeaderWorkerSet (size, names,
port) and, with moe built, against the model's weights identity."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OVERLAY = os.path.join(ROOT, "deploy", "k8s", "overlays", "multi-node")
DEFAULT_OUT = os.path.join(OVERLAY, "ownership-map.template.json")
PLACEHOLDER = "@GROUP@"
FORMAT = "moestream-ownership/1"


def host_name(lws, index, port, group=PLACEHOLDER):
    """The peer address of pod `index` of a group: LWS names the leader <lws>-<group> and worker i
    <lws>-<group>-<i>, hostname = pod name, subdomain = the headless Service <lws>."""
    pod = f"{lws}-{group}" if index == 0 else f"{lws}-{group}-{index}"
    return f"{pod}.{lws}:{port}"


def expected_hosts(lws, size, port, group=PLACEHOLDER):
    return [host_name(lws, i, port, group) for i in range(size)]


def plan_model(plan_path=os.path.join(OVERLAY, "plan.json")):
    with open(plan_path) as f:
        d = json.load(f)["model"]["dir"]
    return d if os.path.isabs(d) else os.path.join(ROOT, d)


def dumps(m):
    """JSON of the map, keys sorted, each row of a list of lists on one line."""
    items = []
    for key in sorted(m):
        v = m[key]
        if isinstance(v, list) and v and all(isinstance(r, list) for r in v):
            rows = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in v)
            items.append(f" {json.dumps(key)}: [\n{rows}\n ]")
        else:
            items.append(f" {json.dumps(key)}: {json.dumps(v)}")
    return "{\n" + ",\n".join(items) + "\n}\n"


def make(moe, model, hosts, epoch, heat=None, replicate_share=None):
    """The map moe ownership writes for these hosts (a dict)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "map.json")
        argv = [moe, "ownership", f"--model={model}", f"--hosts={','.join(hosts)}", f"--epoch={epoch}", f"--out={out}"]
        if heat:
            argv.append(f"--heat={heat}")
        if replicate_share is not None:
            argv.append(f"--replicate-share={replicate_share}")
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
        with open(out) as f:
            return json.load(f)


def check(m, lws, size, port):
    """Problems of a template against the group it is for ([] when fine)."""
    p = []
    if m.get("format") != FORMAT:
        p.append(f"format {m.get('format')!r}, not {FORMAT!r}")
    want = expected_hosts(lws, size, port)
    if m.get("hosts") != want:
        p.append(f"hosts {m.get('hosts')}, the group's pods are {want}")
    n = len(m.get("hosts") or [])
    for l, row in enumerate(m.get("owner") or []):
        if any(not isinstance(h, int) or h < 0 or h >= n for h in row):
            p.append(f"owner[{l}] names a host outside 0..{n - 1}")
            break
    if not isinstance(m.get("epoch"), int) or m["epoch"] < 1:
        p.append(f"epoch {m.get('epoch')!r} (want an integer >= 1)")
    return p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moe", default=os.path.join(ROOT, "build", "tools", "moe", "moe"))
    ap.add_argument("--model", help="the converted container every node holds (default: the overlay plan.json's)")
    ap.add_argument("--size", type=int, default=2, help="pods per group (the LeaderWorkerSet's size)")
    ap.add_argument("--epoch", type=int, default=1, help="the map's epoch (raise it for every new map)")
    ap.add_argument("--heat", help="moe ownership --heat (moe heat --json of a running expertd)")
    ap.add_argument("--replicate-share", type=float, help="moe ownership --replicate-share")
    ap.add_argument("--lws", default="moestream", help="the LeaderWorkerSet's name (= its headless Service)")
    ap.add_argument("--port", type=int, default=7100, help="inferd --peer-listen port")
    ap.add_argument("--out", default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    if a.size < 2:
        ap.error("--size: a group of one pod has no peers")
    model = a.model or plan_model()
    hosts = expected_hosts(a.lws, a.size, a.port)
    try:
        m = make(a.moe, model, hosts, a.epoch, a.heat, a.replicate_share)
    except (RuntimeError, OSError) as e:
        print(f"ownership_template.py: {e}", file=sys.stderr)
        return 1
    problems = check(m, a.lws, a.size, a.port)
    if problems:
        print("ownership_template.py: moe ownership wrote an unexpected map: " + "; ".join(problems), file=sys.stderr)
        return 1
    text = dumps(m)
    assert json.loads(text) == m
    with open(a.out, "w") as f:
        f.write(text)
    print(f"[k8s] {os.path.relpath(a.out, ROOT)}: epoch {m['epoch']}, {a.size} hosts ({', '.join(hosts)}), "
          f"weights {m['weights']}, model {os.path.relpath(model, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
