#!/usr/bin/env bash
# Regenerates what deploy/k8s and tests/k8s derive from their sources:
#   1. with --moe PATH: the serving plans (moe plan ... --out) of deploy/k8s, with the flags below,
#      and the multi-node overlay's ownership-map template (tools/k8s/ownership_template.py: moe
#      ownership for the plan's model and 2 hosts, epoch 1);
#   2. each plan's memory figures (tools/k8s/plan_limits.py -> memory-plan.yaml beside it);
#   3. tests/k8s/golden/<overlay>.yaml: kubectl kustomize deploy/k8s/overlays/<overlay>.
# A real model's map template (its own epoch, heat, group size): run ownership_template.py
# yourself, then this script without --moe.
# The renderer must be kustomize v5.5.0 (tools/k8s/install_kubectl.sh installs kubectl v1.32.3);
# KUBECTL=PATH picks another kubectl of that version.
#   tools/k8s/render_goldens.sh [--moe build/tools/moe/moe]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
MOE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --moe) MOE=$2; shift 2 ;;
    *) echo "render_goldens.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# plan.json -> the moe plan flags it is made with (the demo container; --mem-gbps/--disk-gbps
# given so the plan does not depend on the machine that makes it).
declare -A PLANS=(
  [deploy/k8s/base/plan.json]="--ram 3G --workers 2 --expertd"
  [deploy/k8s/overlays/multi-node/plan.json]="--ram 2G --workers 1 --expertd"
)
for plan in $(printf '%s\n' "${!PLANS[@]}" | sort); do
  if [ -n "$MOE" ]; then
    # shellcheck disable=SC2086
    "$MOE" plan --model models/glm-tiny-chat-q4 ${PLANS[$plan]} --mem-gbps 10 --disk-gbps 2 --out "$plan" >/dev/null
    echo "[k8s] $plan: moe plan --model models/glm-tiny-chat-q4 ${PLANS[$plan]} --mem-gbps 10 --disk-gbps 2"
  fi
  $PY tools/k8s/plan_limits.py --plan "$plan" --conf deploy/k8s/base/moestream.conf --out "$(dirname "$plan")/memory-plan.yaml"
  echo "[k8s] $(dirname "$plan")/memory-plan.yaml"
done
if [ -n "$MOE" ]; then
  $PY tools/k8s/ownership_template.py --moe "$MOE"
fi
KUBECTL=${KUBECTL:-.cache/kubectl/v1.32.3/kubectl}
[ -x "$KUBECTL" ] || KUBECTL=$(command -v kubectl || true)
[ -n "$KUBECTL" ] || { echo "render_goldens.sh: no kubectl (run tools/k8s/install_kubectl.sh)" >&2; exit 1; }
v=$("$KUBECTL" version --client 2>/dev/null | sed -n 's/^Kustomize Version: //p')
[ "$v" = v5.5.0 ] || { echo "render_goldens.sh: $KUBECTL has kustomize '$v', the goldens need v5.5.0" >&2; exit 1; }
mkdir -p tests/k8s/golden
rm -f tests/k8s/golden/*.yaml
for d in deploy/k8s/overlays/*/; do
  o=$(basename "$d")
  "$KUBECTL" kustomize "$d" >"tests/k8s/golden/$o.yaml"
  echo "[k8s] tests/k8s/golden/$o.yaml ($(grep -c '^kind:' "tests/k8s/golden/$o.yaml") objects)"
done
