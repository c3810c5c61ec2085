#!/usr/bin/env bash
# Runs a service and starts it again whenever it exits, so a dead expertd or worker comes
# back by itself (deploy/start.sh runs expertd and the inferd workers under it; systemd
# units do the same with Restart=always).
#   deploy/respawn.sh NAME COMMAND...
# SIGTERM/SIGINT: passed to the service, which is waited for (18 s, then SIGKILL); then
# exits with the service's status. A service that keeps dying (5 exits within 30 s) is given
# up on: exit 1, which start.sh reports with the service's log.
set -uo pipefail
name=$1
shift
child=0
stopping=0
stop() {
  stopping=1
  if [ "$child" -gt 0 ] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null
    for _ in $(seq 1 180); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$child" 2>/dev/null || true
  fi
}
trap stop TERM INT
exits=()
while true; do
  "$@" &
  child=$!
  wait "$child"
  rc=$?
  # `wait` returns early when a trapped signal arrives: wait again for the real exit.
  while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
  [ "$stopping" = 1 ] && exit "$rc"
  now=$(date +%s)
  exits+=("$now")
  recent=0
  for t in "${exits[@]}"; do [ $((now - t)) -lt 30 ] && recent=$((recent + 1)); done
  if [ "$recent" -ge 5 ]; then
    echo "[respawn] $name exited $recent times within 30 s (last status $rc); giving up" >&2
    exit 1
  fi
  echo "[respawn] $name exited with status $rc; starting it again in 1 s" >&2
  sleep 1 &
  wait $!
  [ "$stopping" = 1 ] && exit "$rc"
done
