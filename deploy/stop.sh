#!/usr/bin/env bash
# Stops what deploy/start.sh started: SIGTERM (gateway first, then workers,
# then expertd), waits up to 20 s each, then SIGKILL. Removes the pid files.
#   deploy/stop.sh [--run-dir DIR]
set -euo pipefail
RUN=${XDG_RUNTIME_DIR:-/tmp}/moestream
while [ $# -gt 0 ]; do
  case "$1" in
    --run-dir) RUN=$2; shift 2 ;;
    *) echo "stop.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
stop_one() {
  local f=$1 name pid
  name=$(basename "$f" .pid)
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "[stop] $name did not stop in 20 s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$f"
  echo "[stop] $name"
}
for f in "$RUN"/gateway.pid "$RUN"/inferd*.pid "$RUN"/expertd.pid; do
  [ -e "$f" ] && stop_one "$f"
done
exit 0
