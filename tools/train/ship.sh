#!/usr/bin/env bash
# Ships a tools/train/train.py run as the embedded demo model: copies the exported HF checkpoint and
# the project tokenizer into models/glm-tiny-chat, converts it into models/glm-tiny-chat-q4 (moe
# convert defaults), plots the loss curve, regenerates the HF goldens and prints the figures for the
# model card (held-out perplexity from the run's eval.json or last eval, MTP acceptance, answers).
#   tools/train/ship.sh [RUN_DIR=build/train-run] [BIN_DIR=build]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${1:-build/train-run}
BIN=${2:-build}
M=models/glm-tiny-chat
Q=models/glm-tiny-chat-q4
mkdir -p "$M"
cp "$RUN/hf/config.json" "$RUN/hf/model.safetensors" "$M/"
cp tests/data/text/glm_tiny/{tokenizer.json,tokenizer_config.json,chat_template.jinja} "$M/"
chmod 644 "$M"/*
card=$(cat "$Q/MODEL_CARD.md" 2>/dev/null || true)   # the container's own short card survives
rm -rf "$Q"
"$BIN/tools/moe/moe" convert --in "$M" --out "$Q"
[ -z "$card" ] || printf '%s\n' "$card" >"$Q/MODEL_CARD.md"
python3 tools/train/plot_loss.py "$RUN/train_log.jsonl" "$M/loss_curve.png"
python3 tools/train/gen_goldens.py --model "$M" --out tests/data/model/glm-tiny-chat
for f in tests/data/train/heldout_chat.txt tests/data/train/heldout_text.txt; do
  echo "== moe mtp $f"; "$BIN/tools/moe/moe" mtp --model "$M" --text-file "$f" --json
done
du -b "$M/model.safetensors" "$Q"
