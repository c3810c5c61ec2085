#!/usr/bin/env python3
"""Loss curve of a tools/train/train.py run: train_log.jsonl -> PNG (next-token and MTP
next-next-token training loss, smoothed, plus the held-out evaluations).

  python3 tools/train/plot_loss.py build/train-run/train_log.jsonl models/glm-tiny-chat/loss_curve.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def smooth(v, k=10):
    out, acc = [], []
    for x in v:
        acc.append(x)
        acc = acc[-k:]
        out.append(sum(acc) / len(acc))
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    steps, loss, mtp, ev = [], [], [], []
    for line in open(src):
        r = json.loads(line)
        if "eval" in r:
            ev.append(r["eval"])
        else:
            steps.append(r["step"]); loss.append(r["loss"]); mtp.append(r["mtp_loss"])
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, loss, color="tab:blue", alpha=0.25, lw=0.8)
    ax.plot(steps, smooth(loss), color="tab:blue", label="train next-token loss")
    ax.plot(steps, smooth(mtp), color="tab:orange", label="train MTP next-next-token loss")
    if ev:
        ax.plot([e["step"] for e in ev], [e["chat"]["loss"] for e in ev], "s--", color="tab:green",
                label="held-out chat loss")
        ax.plot([e["step"] for e in ev], [e["text"]["loss"] for e in ev], "o--", color="tab:red",
                label="held-out prose loss")
    ax.set_xlabel("step (1536 tokens each)")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("glm-tiny-chat training (CPU, tools/train/train.py)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dst, metadata={"Software": None})
    print("wrote", dst)


if __name__ == "__main__":
    main()
