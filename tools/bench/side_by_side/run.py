#!/usr/bin/env python3
"""moestream (expertd + the engine over RemoteExpertSource) and llama.cpp (mmap) side by side, in one run,
on one model written by make_model.py, each confined to the same cgroup v1 memory limit (the page cache
counts against it: llama.cpp's mmap gets no more RAM than expertd's arena plus the worker).

Per side and repeat: the model's files are dropped from the page cache (posix_fadvise DONTNEED, only
these files), a fresh memory cgroup with memory.limit_in_bytes = --limit is made, the side runs inside
it (moestream: `expertd --model C --budget B` then `moe run --model C --expertd S --prompt-ids ...`;
llama.cpp: `llama_decode`), and we record time to first token for the --prompt-tokens prompt, decode
tokens/s over --n-predict greedy tokens, bytes read from storage (each process's /proc/PID/io
read_bytes; for decode alone: llama_decode's own counter, and for moestream the expert bytes expertd
delivered in decode plus the worker's page faults), peak RSS of each process, the cgroup's peak
(memory.max_usage_in_bytes), and the greedy tokens (agreement between the two).

  python3 tools/bench/side_by_side/run.py --dir DIR --llama-bin BIN [--limit 8G] [--budget auto]
      [--prompt-tokens 512] [--n-predict 32] [--repeats 2] [--first-repeat 0] [--llama-variants default,tuned]
      [--json OUT]
Run as root, under /work/bin/quiet (it takes the machine).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CG = "/sys/fs/cgroup/memory"


def parse_bytes(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)", s.strip().upper())
    if not m:
        sys.exit(f"bad byte size {s!r}")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def drop_cache(paths):
    for root in paths:
        files = [root] if os.path.isfile(root) else [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


class Cgroup:
    def __init__(self, name, limit):
        self.path = os.path.join(CG, name)
        if os.path.isdir(self.path):
            os.rmdir(self.path)
        os.mkdir(self.path)
        self.write("memory.limit_in_bytes", str(limit))
        self.write("memory.max_usage_in_bytes", "0")

    def write(self, f, v):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(v)

    def read(self, f):
        with open(os.path.join(self.path, f)) as fh:
            return fh.read()

    def enter(self):  # preexec_fn: the child joins the cgroup before exec
        with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))

    def stats(self):
        st = dict(line.split() for line in self.read("memory.stat").splitlines())
        return {"max_usage_bytes": int(self.read("memory.max_usage_in_bytes")),
                "failcnt": int(self.read("memory.failcnt")),
                "oom_kill": int(dict(line.split() for line in self.read("memory.oom_control").splitlines())
                                .get("oom_kill", 0)),
                "total_cache_bytes": int(st.get("total_cache", 0)),
                "total_rss_bytes": int(st.get("total_rss", 0)),
                "total_shmem_bytes": int(st.get("total_shmem", 0))}

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def proc_io(pid):
    with open(f"/proc/{pid}/io") as f:
        return int(dict(line.split(": ") for line in f.read().splitlines())["read_bytes"])


def proc_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def timed_child(cmd, cg, **kw):
    """Runs cmd inside cg; returns (stdout, read_bytes, maxrss) via GNU time's %I (512-byte blocks) and %M."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        r = subprocess.run(["/usr/bin/time", "-o", tf.name, "-f", "%I %M"] + cmd, preexec_fn=cg.enter,
                           capture_output=True, text=True, **kw)
        if r.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
        blocks, maxrss = tf.read().split()[-2:]
        return r.stdout, int(blocks) * 512, int(maxrss) * 1024


def run_moestream(a, cg, ids_file, budget):
    d = tempfile.mkdtemp(prefix="sbs-")
    sock = os.path.join(d, "e.sock")
    ed = subprocess.Popen([os.path.join(a.build, "services/expertd/expertd"), "--model", a.container, "--socket", sock,
                           "--budget", str(budget), "--log-level", "warning"] + a.expertd_args.split(),
                          preexec_fn=cg.enter, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if os.path.exists(sock) or ed.poll() is not None:
                break
            time.sleep(0.1)
        if ed.poll() is not None:
            raise RuntimeError(f"expertd exited: {ed.stderr.read()[-2000:]}")
        io0 = proc_io(ed.pid)
        out, worker_read, worker_rss = timed_child(
            [os.path.join(a.build, "tools/moe/moe"), "run", "--model", a.container, "--expertd", sock,
             "--prompt-ids", open(ids_file).read().strip(), "--max-tokens", str(a.n_predict), "--json"], cg)
        expertd_read = proc_io(ed.pid) - io0
        expertd_rss = proc_hwm(ed.pid)
    finally:
        ed.terminate()
        try:
            ed.wait(10)
        except subprocess.TimeoutExpired:
            ed.kill()
            ed.wait()
    j = json.loads(out)
    s = j["stats"]
    n = len(j["tokens"])
    return {"engine": "moestream", "ttft_seconds": s["prefill_seconds"], "prompt_tokens": s["prompt_tokens"],
            "decode_tokens": n - 1, "decode_seconds": s["decode_seconds"],
            "decode_tokens_per_second": (n - 1) / s["decode_seconds"] if n > 1 else 0,
            "read_bytes": expertd_read + worker_read, "expertd_read_bytes": expertd_read,
            "worker_read_bytes": worker_read, "prefill_expert_bytes": s["prefill_expert_bytes"],
            "decode_expert_bytes": s["decode_expert_bytes"],
            "decode_read_bytes_per_token": s["decode_expert_bytes"] / max(1, n - 1),
            "expert_hit_rate": s["expert_hit_rate"], "peak_rss_bytes": {"expertd": expertd_rss, "worker": worker_rss},
            "budget_bytes": budget, "tokens": j["tokens"]}


def run_llama(a, cg, ids_file, variant):
    # "default": llama.cpp's defaults (mmap) but for the CPU repack of Q4_0 weights, which aborts on this CPU
    # (ggml_backend_sched_split_graph, llama-cpp-python 0.3.36) and would copy every weight out of the mmap
    # into anonymous memory: --repack off (llama.cpp's --no-repack) on every variant.
    flags = {"default": ["--repack", "off"], "tuned": ["--repack", "off"] + a.llama_tuned.split()}[variant]
    out, read, rss = timed_child([a.llama_bin, "--model", a.gguf, "--prompt-ids", ids_file,
                                  "--n-predict", str(a.n_predict)] + flags, cg)
    j = json.loads(out.strip().splitlines()[-1])
    j.update({"variant": variant, "flags": " ".join(flags), "read_bytes": read,
              "decode_read_bytes_per_token": j["decode_read_bytes"] / max(1, j["decode_tokens"]),
              "peak_rss_bytes": {"llama": rss}})
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="make_model.py output (container/, model.gguf)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--limit", default="8G", help="cgroup memory limit of each side")
    ap.add_argument("--budget", default="auto", help="expertd arena (auto: limit - resident weights - 1 GiB)")
    ap.add_argument("--expertd-args", default="", help="extra expertd flags")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--first-repeat", type=int, default=0,
                    help="number of the first repeat (odd: the sides in reverse order; to split repeats over runs)")
    ap.add_argument("--sides", default="moestream,llama")
    ap.add_argument("--llama-variants", default="default,tuned")
    ap.add_argument("--llama-tuned", default="--threads 2 --batch 512 --ubatch 512 --flash-attn on")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    a.container, a.gguf = os.path.join(a.dir, "container"), os.path.join(a.dir, "model.gguf")
    limit = parse_bytes(a.limit)
    man = json.load(open(os.path.join(a.container, "moestream.json")))
    # Resident (non-expert) bytes: the container minus its expert records.
    total = sum(s["bytes"] for s in man["shards"])
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    experts = (cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]) * cfg["n_routed_experts"]
    rec = (3 * cfg["moe_intermediate_size"] * cfg["hidden_size"]) * 9 // 16  # q4_g64: 4.5 bits
    expert_bytes = experts * ((rec + 4095) // 4096 * 4096)
    resident = total - expert_bytes
    budget = parse_bytes(a.budget) if a.budget != "auto" else limit - resident - (1 << 30)
    rnd = random.Random(a.seed)
    ids = [rnd.randrange(0, 12256) for _ in range(a.prompt_tokens)]
    ids_file = os.path.join(a.dir, "prompt_ids.txt")
    with open(ids_file, "w") as f:
        f.write(",".join(map(str, ids)))
    runs = []
    for rep in range(a.first_repeat, a.first_repeat + a.repeats):
        order = a.sides.split(",") if rep % 2 == 0 else a.sides.split(",")[::-1]
        for side in order:
            variants = ["moestream"] if side == "moestream" else a.llama_variants.split(",")
            for v in variants:
                drop_cache([a.container, a.gguf])
                cg = Cgroup(f"moe-sbs-{os.getpid()}", limit)
                try:
                    t0 = time.time()
                    r = run_moestream(a, cg, ids_file, budget) if side == "moestream" else run_llama(a, cg, ids_file, v)
                    r["wall_seconds"] = time.time() - t0
                    r["cgroup"] = cg.stats()
                    r["repeat"] = rep
                finally:
                    cg.remove()
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "tokens"}), flush=True)
    ours = [r for r in runs if r["engine"] == "moestream"]
    theirs = [r for r in runs if r["engine"] == "llama.cpp"]
    agree = None
    if ours and theirs:
        x, y = ours[0]["tokens"], theirs[0]["tokens"]
        n = min(len(x), len(y))
        first = next((i for i in range(n) if x[i] != y[i]), n)
        agree = {"compared": n, "equal": sum(x[i] == y[i] for i in range(n)), "first_difference": first}
    res = {"limit_bytes": limit, "budget_bytes": budget, "resident_bytes": resident, "expert_bytes": expert_bytes,
           "model_bytes": total, "gguf_bytes": os.path.getsize(a.gguf), "prompt_tokens": a.prompt_tokens,
           "n_predict": a.n_predict, "runs": runs, "greedy_agreement": agree,
           "config": {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "n_routed_experts",
                                          "num_experts_per_tok", "moe_intermediate_size")}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps({"greedy_agreement": agree}))


if __name__ == "__main__":
    main()
