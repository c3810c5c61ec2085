#!/usr/bin/env bash
# Starts the moestream stack on this host: expertd (when [expertd] names a
# model container or a manifest), N inferd workers on unix sockets that all get
# their routed experts from that one expertd (--expertd; without expertd each
# uses its in-process store), and the gateway; one config file for all.
# Waits (bounded) until expertd's socket exists and the gateway's /health says ok.
# expertd and the workers run under deploy/respawn.sh: one that dies is started again
# (the gateway sees the worker out of rotation meanwhile; workers re-attach to expertd).
#   deploy/start.sh [--config FILE] [--run-dir DIR] [--workers N] [--bin-dir DIR] [-- extra inferd flags]
# Stop with deploy/stop.sh --run-dir DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CONFIG=$ROOT/deploy/moestream.conf
RUN=${XDG_RUNTIME_DIR:-/tmp}/moestream
WORKERS=2
BIN=$ROOT/build
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG=$2; shift 2 ;;
    --run-dir) RUN=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --bin-dir) BIN=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "start.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$RUN"
# Several workers share the host's cores: OpenMP threads that spin at barriers
# take CPU from the other processes (docs/BENCHMARKS.md ## serving: passive
# waiting gave +17% tokens/s to a 2-worker stack on 2 vCPUs, when the forward
# pass still ran its own loops on OpenMP; since 2026-12-03 they run on the
# kernels' pool and OpenMP is left to loading and conversion). Override by
# exporting OMP_WAIT_POLICY.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ls "$RUN"/*.pid >/dev/null 2>&1; then
  echo "start.sh: $RUN already holds pid files; run deploy/stop.sh --run-dir $RUN first" >&2
  exit 1
fi

start() {  # name, command...
  local name=$1; shift
  "$@" >"$RUN/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
  echo "[start] $name (pid $!): log $RUN/$name.log"
}
respawned() {  # name, command...: started again whenever it exits
  local name=$1; shift
  start "$name" "$ROOT/deploy/respawn.sh" "$name" "$@"
}

EXPERTD=()
if awk '/^\[expertd\]/{s=1;next} /^\[/{s=0} s && /^[[:space:]]*(manifest|model)[[:space:]]*=/{f=1} END{exit !f}' "$CONFIG"; then
  rm -f "$RUN/expertd.sock"
  respawned expertd "$BIN/services/expertd/expertd" --config "$CONFIG" --socket "$RUN/expertd.sock"
  for _ in $(seq 1 600); do
    [ -S "$RUN/expertd.sock" ] && break
    if ! kill -0 "$(cat "$RUN/expertd.pid")" 2>/dev/null; then
      echo "start.sh: expertd exited; its log:" >&2
      tail -20 "$RUN/expertd.log" >&2
      "$ROOT/deploy/stop.sh" --run-dir "$RUN" >/dev/null 2>&1 || true
      exit 1
    fi
    sleep 0.1
  done
  [ -S "$RUN/expertd.sock" ] || { echo "start.sh: expertd did not open $RUN/expertd.sock in 60 s" >&2; exit 1; }
  EXPERTD=(--expertd "unix:$RUN/expertd.sock")
fi
workers=()
for i in $(seq 0 $((WORKERS - 1))); do
  respawned "inferd$i" "$BIN/services/inferd/inferd" --config "$CONFIG" --listen "unix:$RUN/inferd$i.sock" \
    "${EXPERTD[@]}" "${EXTRA[@]}"
  workers+=(--worker "unix:$RUN/inferd$i.sock")
done
start gateway "$BIN/services/gateway/gateway" --config "$CONFIG" "${workers[@]}"

# Wait for the gateway (bounded: model loading can take a while).
listen=$(awk '/^\[gateway\]/{s=1;next} /^\[/{s=0} s && /^[[:space:]]*listen[[:space:]]*=/{sub(/^[^=]*=[[:space:]]*/,""); print}' "$CONFIG")
listen=${listen:-127.0.0.1:8000}
for _ in $(seq 1 600); do
  for p in "$RUN"/*.pid; do
    if ! kill -0 "$(cat "$p")" 2>/dev/null; then
      echo "start.sh: $(basename "$p" .pid) exited; its log:" >&2
      tail -20 "$RUN/$(basename "$p" .pid).log" >&2
      "$ROOT/deploy/stop.sh" --run-dir "$RUN" >/dev/null 2>&1 || true
      exit 1
    fi
  done
  if [[ $listen == unix:* ]]; then
    curl -sf --unix-socket "${listen#unix:}" http://localhost/health >/dev/null 2>&1 && break
  else
    curl -sf "http://$listen/health" >/dev/null 2>&1 && break
  fi
  sleep 0.5
done
echo "[start] gateway on $listen (run dir $RUN)"
