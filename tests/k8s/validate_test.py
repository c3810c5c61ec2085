#!/usr/bin/env python3
"""Every object of every golden (tests/k8s/golden/*.yaml) validates against pinned schemas with
unknown fields rejected: Kubernetes kinds against kubernetes-validate's strict schemas of
Kubernetes 1.32 (bundled in the PyPI package, pinned in deploy/requirements-test.txt: no
network), the CRD kinds (LeaderWorkerSet, InferencePool, HTTPRoute, ServiceMonitor) against
tests/k8s/schemas/*.json (closed objects; pod templates inside them are Kubernetes' strict
PodTemplateSpec). A kind without a schema fails. Before that, canaries prove the strictness: a
copy of each validated kind with one unknown field must fail."""
import copy
import json
import os
import sys

import jsonschema
import kubernetes_validate
import referencing
from kubernetes_validate import utils as kv_utils

sys.path.insert(0, os.path.dirname(__file__))
import k8s_common as k  # noqa: E402

K8S_VERSION = "1.32.0"
CRDS = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset-leaderworkerset.x-k8s.io-v1.json",
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-inference.networking.k8s.io-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-gateway.networking.k8s.io-v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring.coreos.com-v1.json",
}


def crd_validators():
    defs = kv_utils.schema_contents(f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/_definitions.json", K8S_VERSION)
    registry = referencing.Registry().with_resource(defs["$id"], referencing.Resource.from_contents(defs))
    out = {}
    for key, fname in CRDS.items():
        with open(os.path.join(k.SCHEMA_DIR, fname)) as f:
            schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(schema)
        out[key] = jsonschema.Draft202012Validator(schema, registry=registry)
    return out


def errors_of(doc, crd):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in crd:
        return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in sorted(crd[key].iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path)) or '(root)'}: {e.message}"]
    except kv_utils.SchemaNotFoundError as e:
        return [f"no schema: {e.message} (add one to tests/k8s/schemas/ and CRDS)"]
    return []


def canary(doc):
    """The same object with an unknown field where a misspelling would go."""
    bad = copy.deepcopy(doc)
    spec = bad.get("spec")
    if isinstance(spec, dict):
        tmpl = spec.get("template") or spec.get("leaderWorkerTemplate", {}).get("workerTemplate")
        if tmpl and tmpl.get("spec", {}).get("containers"):
            tmpl["spec"]["containers"][0]["imagePullPolicyy"] = "Always"  # deep inside a pod template
        else:
            spec["replicaz"] = 1
    else:
        bad["dataa"] = {}
    return bad


def main():
    crd = crd_validators()
    goldens = k.load_goldens()
    problems, checked, kinds = [], 0, {}
    for overlay, docs in goldens.items():
        for d in docs:
            kinds.setdefault((d["apiVersion"], d["kind"]), d)
    for key, d in sorted(kinds.items()):
        if not errors_of(canary(d), crd):
            problems.append(f"canary: {key[1]} ({key[0]}) with an unknown field passed validation: not strict")
    for overlay, docs in goldens.items():
        for d in docs:
            for e in errors_of(d, crd):
                problems.append(f"{overlay}: {k.name_of(d)} ({d['apiVersion']}): {e}")
            checked += 1
    k.fail(problems, "validate")
    print(f"validate: {checked} objects of {len(goldens)} goldens valid (Kubernetes {K8S_VERSION} strict, "
          f"{len(CRDS)} CRD schemas); {len(kinds)} kinds' unknown-field canaries rejected")


if __name__ == "__main__":
    main()
