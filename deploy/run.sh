#!/usr/bin/env bash
# Main job: install + build (deploy/setup.sh), convert the embedded default
# model (models/glm-tiny-chat: a tiny GLM-5-architecture MoE trained by
# tools/train; answers short questions of its trained kinds in English) into a
# moestream container, start the stack on it (expertd + N inferd sharing that
# expertd + gateway; --no-expertd: workers with in-process expert stores),
# send ONE OpenAI chat request with curl, print
# the assistant's message and the raw JSON, and stop the stack (always, via an
# EXIT trap). Bounded: the stack start waits at most --start-timeout seconds,
# the request at most --request-timeout seconds.
#   deploy/run.sh [--bin-dir DIR] [--skip-setup] [--model DIR] [--listen HOST:PORT]
#                 [--run-dir DIR] [--workers N] [--prompt TEXT] [--max-tokens N] [--thinking]
#                 [--no-expertd] [--expertd-budget BYTES]
# GLM thinking is off by default (chat_template_kwargs.enable_thinking=false) so
# the answer arrives as `content`; --thinking turns it on (reasoning_content).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=$ROOT/build
SETUP=1
MODEL=$ROOT/models/glm-tiny-chat
LISTEN=127.0.0.1:8000
RUN=""
WORKERS=2
PROMPT="Who are you?"
MAX_TOKENS=48
THINKING=false
START_TIMEOUT=300
REQUEST_TIMEOUT=120
USE_EXPERTD=1
EXPERTD_BUDGET=256M
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) BIN=$(cd "$2" && pwd); shift 2 ;;
    --skip-setup) SETUP=0; shift ;;
    --model) MODEL=$(cd "$2" && pwd); shift 2 ;;
    --listen) LISTEN=$2; shift 2 ;;
    --run-dir) RUN=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --prompt) PROMPT=$2; shift 2 ;;
    --max-tokens) MAX_TOKENS=$2; shift 2 ;;
    --thinking) THINKING=true; shift ;;
    --no-expertd) USE_EXPERTD=0; shift ;;
    --expertd-budget) EXPERTD_BUDGET=$2; shift 2 ;;
    --start-timeout) START_TIMEOUT=$2; shift 2 ;;
    --request-timeout) REQUEST_TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$LISTEN" in
  127.0.0.1:*|localhost:*|\[::1\]:*) ;;
  *) echo "run.sh: --listen must be loopback (127.0.0.1:PORT), got $LISTEN" >&2; exit 2 ;;
esac

if [ "$SETUP" = 1 ]; then
  echo "[run] deploy/setup.sh"
  "$ROOT/deploy/setup.sh"
fi
for b in services/inferd/inferd services/gateway/gateway services/expertd/expertd tools/moe/moe; do
  [ -x "$BIN/$b" ] || { echo "run.sh: $BIN/$b missing (run deploy/setup.sh)" >&2; exit 1; }
done
if [ ! -f "$MODEL/config.json" ] || [ ! -f "$MODEL/tokenizer.json" ]; then
  echo "run.sh: $MODEL lacks config.json or tokenizer.json" >&2; exit 1
fi

RUN=${RUN:-$(mktemp -d "${TMPDIR:-/tmp}/moestream-run.XXXXXX")}
mkdir -p "$RUN"
CONF=$RUN/moestream.conf

stopped=0
cleanup() {
  local rc=$?
  trap '' INT TERM  # a second Ctrl-C must not cut stop.sh short (children inherit the ignore)
  if [ "$stopped" = 0 ]; then
    stopped=1
    echo "[run] stopping the stack"
    "$ROOT/deploy/stop.sh" --run-dir "$RUN" || true
  fi
  echo "[run] logs in $RUN"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The stack serves a converted container (moe convert; seconds for the tiny
# model): expertd reads its expert records, the workers map its dense part.
SERVE_MODEL=$MODEL
EXPERTD_MODEL=""
if [ "$USE_EXPERTD" = 1 ]; then
  SERVE_MODEL=$RUN/model
  echo "[run] moe convert $MODEL -> $SERVE_MODEL"
  "$BIN/tools/moe/moe" convert --in "$MODEL" --out "$SERVE_MODEL" >"$RUN/convert.log" 2>&1 ||
    { echo "run.sh: moe convert failed:" >&2; tail -20 "$RUN/convert.log" >&2; exit 1; }
  EXPERTD_MODEL=$SERVE_MODEL
fi

# Run-specific config: deploy/moestream.conf with the model, expertd, tokenizer
# and listen address of this run (the tokenizer files live in the model directory).
awk -v model="$SERVE_MODEL" -v xmodel="$EXPERTD_MODEL" -v budget="$EXPERTD_BUDGET" -v tok="$MODEL" -v listen="$LISTEN" '
  /^\[/ { sec = $0; print; if (sec == "[expertd]" && xmodel != "") { print "model = " xmodel; print "budget = " budget }; next }
  sec == "[expertd]" && /^[[:space:]]*(model|budget)[[:space:]]*=/ { next }
  sec == "[inferd]"  && /^[[:space:]]*model[[:space:]]*=/     { print "model = " model; next }
  sec == "[gateway]" && /^[[:space:]]*tokenizer[[:space:]]*=/ { print "tokenizer = " tok; next }
  sec == "[gateway]" && /^[[:space:]]*listen[[:space:]]*=/    { print "listen = " listen; next }
  { print }' "$ROOT/deploy/moestream.conf" >"$CONF"
echo "[run] model $SERVE_MODEL, experts from $([ "$USE_EXPERTD" = 1 ] && echo "expertd (shared by $WORKERS workers)" || echo "in-process stores") (config $CONF)"

timeout --foreground "$START_TIMEOUT" \
  "$ROOT/deploy/start.sh" --config "$CONF" --run-dir "$RUN" --workers "$WORKERS" --bin-dir "$BIN"
curl -sf --max-time 5 "http://$LISTEN/health" >/dev/null ||
  { echo "run.sh: gateway not healthy on $LISTEN" >&2; exit 1; }

BODY=$(python3 -c 'import json,sys; print(json.dumps({"model": "moestream",
  "messages": [{"role": "user", "content": sys.argv[1]}],
  "max_tokens": int(sys.argv[2]), "temperature": 0,
  "chat_template_kwargs": {"enable_thinking": sys.argv[3] == "true"}}))' "$PROMPT" "$MAX_TOKENS" "$THINKING")
echo "[run] POST http://$LISTEN/v1/chat/completions: $PROMPT"
RESP=$(curl -sS --max-time "$REQUEST_TIMEOUT" -H 'Content-Type: application/json' \
  -d "$BODY" -w '\n%{http_code}' "http://$LISTEN/v1/chat/completions")
CODE=${RESP##*$'\n'}
RESP=${RESP%$'\n'*}
if [ "$CODE" != 200 ]; then
  echo "run.sh: HTTP $CODE: $RESP" >&2
  exit 1
fi
printf '%s' "$RESP" | python3 -c '
import json, sys
r = json.load(sys.stdin)
c = r["choices"][0]
print("=== answer: assistant message content (finish_reason: %s) ===" % c.get("finish_reason"))
print(c["message"].get("content"))
if c["message"].get("reasoning_content"):
    print("=== assistant reasoning_content (GLM thinking) ===")
    print(c["message"]["reasoning_content"])
print("=== raw JSON ===")
print(json.dumps(r, ensure_ascii=False))'
case "$MODEL" in
  */models/tiny-glm-random) echo "[run] note: models/tiny-glm-random has random weights; the answer is noise (plumbing check)" ;;
  */models/glm-tiny-chat) echo "[run] note: models/glm-tiny-chat is a ~7M-parameter demo model (see its MODEL_CARD.md): it answers greetings and its trained task types (counting, days, months, ...) in English (right on 19 of its 23 test questions; wrong on small sums)" ;;
esac
