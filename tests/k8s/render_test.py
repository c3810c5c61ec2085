#!/usr/bin/env python3
"""Every overlay of deploy/k8s/overlays, rendered with kustomize v5.5.0 (kubectl kustomize),
equals its committed golden tests/k8s/golden/<overlay>.yaml byte for byte, and every golden has
its overlay. Without a renderer of that version it exits 77 (ctest SKIP) naming what it tried;
tools/k8s/install_kubectl.sh (deploy/setup.sh) installs one. Regenerate the goldens with
tools/k8s/render_goldens.sh."""
import difflib
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import k8s_common as k  # noqa: E402


def main():
    problems = []
    names = k.overlays()
    if not names:
        k.fail(["no overlays under deploy/k8s/overlays"], "render")
    for g in sorted(os.listdir(k.GOLDEN_DIR)):
        if g.endswith(".yaml") and g[:-5] not in names:
            problems.append(f"tests/k8s/golden/{g} has no overlay deploy/k8s/overlays/{g[:-5]}")
    renderer, why = k.find_renderer()
    if renderer is None:
        print(f"SKIP: no kustomize {k.KUSTOMIZE_VERSION} renderer (kubectl or kustomize) found: {why}. "
              "Install it with tools/k8s/install_kubectl.sh (deploy/setup.sh does); the goldens are still "
              "validated and policy-checked by k8s_validate, k8s_policy and k8s_flags.")
        k.fail(problems, "render")
        sys.exit(k.SKIP)
    print(f"renderer: {why}")
    for o in names:
        try:
            got = k.render(renderer, o)
        except RuntimeError as e:
            problems.append(str(e))
            continue
        p = k.golden_path(o)
        want = open(p, "rb").read() if os.path.exists(p) else b""
        if got != want:
            diff = difflib.unified_diff(want.decode().splitlines(), got.decode().splitlines(),
                                        f"tests/k8s/golden/{o}.yaml", f"rendered overlays/{o}", lineterm="", n=2)
            shown = "\n".join(list(diff)[:60])
            problems.append(f"overlay {o} differs from its golden (run tools/k8s/render_goldens.sh):\n{shown}")
        else:
            print(f"ok: {o} ({len(got)} bytes) equals tests/k8s/golden/{o}.yaml")
    k.fail(problems, "render")
    print(f"render: {len(names)} overlays equal their goldens")


if __name__ == "__main__":
    main()
