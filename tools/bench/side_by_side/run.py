#!/usr/bin/env python3
"""moestream (expertd + the engine over RemoteExpertSource) and llama.cpp (mmap) side by side, in one run,
on one model written by make_model.py, each confined to the same cgroup v1 memory limit (the page cache
counts against it: llama.cpp's mmap gets no more RAM than expertd's arena plus the worker). moestream is
sized by its own serving plan for that limit (`moe plan --ram LIMIT --expertd`, given to expertd and the
worker with --plan), unless --budget says otherwise.

Per side and repeat: the model's files are dropped from the page cache (posix_fadvise DONTNEED, only
these files), a fresh memory cgroup with memory.limit_in_bytes = --limit is made, the side runs inside
it (moestream: `expertd --model C --budget B` then `moe run --model C --expertd S --prompt-ids ...`;
llama.cpp: `llama_decode`), and we record time to first token for the --prompt-tokens prompt, decode
tokens/s over --n-predict greedy tokens, bytes read from storage (each process's /proc/PID/io
read_bytes; for decode alone: llama_decode's own counter, and for moestream the expert bytes expertd
delivered in decode plus the worker's page faults), peak RSS of each process, the cgroup's peak
(memory.max_usage_in_bytes), and the greedy tokens (agreement between the two).

The third side, `stack`, is the served path: expertd + one inferd + the gateway started by deploy/start.sh
from one generated config (--expertd-conf / --inferd-conf add lines), every process in the cgroup, and one
streamed /v1/completions request (prompt as token ids, temperature 0, ignore_eos). Its reads are the sum of
/proc/PID/io over the cgroup's processes; its text is checked against `moe run`'s tokens decoded.

  python3 tools/bench/side_by_side/run.py --dir DIR --llama-bin BIN [--limit 8G] [--budget plan|auto|BYTES]
      [--prompt-tokens 512] [--n-predict 32] [--repeats 2] [--first-repeat 0] [--llama-variants default,tuned]
      [--sides moestream,stack,llama] [--json OUT]
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
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CG = "/sys/fs/cgroup/memory"
sys.path.insert(0, os.path.join(ROOT, "tools/serving"))
from sse import SseEvents, choice_text  # noqa: E402


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

    def stat(self):
        return {k: int(v) for k, v in (line.split() for line in self.read("memory.stat").splitlines())}

    def start_sampling(self, period=0.5):
        """Samples memory.stat while the side runs (read after it, the processes and their shared memory are
        gone): the largest value of each charge, and the composition at the sample of highest usage."""
        self.peaks, self.at_peak, self._stop = {}, {}, threading.Event()

        def loop():
            top = -1
            while not self._stop.wait(period):
                try:
                    st, use = self.stat(), int(self.read("memory.usage_in_bytes"))
                except OSError:
                    return
                for k in ("total_cache", "total_rss", "total_shmem", "total_mapped_file", "total_active_file",
                          "total_inactive_file"):
                    self.peaks[k] = max(self.peaks.get(k, 0), st.get(k, 0))
                if use > top:
                    top, self.at_peak = use, {k: st.get(k, 0) for k in ("total_cache", "total_rss", "total_shmem",
                                                                         "total_mapped_file")}
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stats(self):
        """The cgroup's peak, how often it hit the limit, and the sampled charges (bytes)."""
        self._stop.set()
        self._thread.join()
        st = self.stat()
        return {"max_usage_bytes": int(self.read("memory.max_usage_in_bytes")),
                "failcnt": int(self.read("memory.failcnt")),
                "oom_kill": int(dict(line.split() for line in self.read("memory.oom_control").splitlines())
                                .get("oom_kill", 0)),
                "major_faults": st.get("total_pgmajfault", 0),
                "sampled_peak_bytes": self.peaks, "at_peak_usage_bytes": self.at_peak}

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


def budget_args(a, budget):
    """expertd's arena: the serving plan (`--plan F`, what the worker applies too) or an explicit --budget."""
    return ["--plan", a.plan_file] if a.plan_file else ["--budget", str(budget)]


def run_moestream(a, cg, ids_file, budget):
    d = tempfile.mkdtemp(prefix="sbs-")
    sock = os.path.join(d, "e.sock")
    ed = subprocess.Popen([os.path.join(a.build, "services/expertd/expertd"), "--model", a.container, "--socket", sock,
                           "--log-level", "warning"] + budget_args(a, budget) + a.expertd_args.split(),
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
             "--prompt-ids", open(ids_file).read().strip(), "--max-tokens", str(a.n_predict), "--json"]
            + (["--plan", a.plan_file] if a.plan_file else []) + a.run_args.split(), cg)
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
            "budget_bytes": budget, "stopped_at_eos": j["stopped_at_eos"], "tokens": j["tokens"]}


def cgroup_read_bytes(cg):
    """read_bytes of every process now in the cgroup (/proc/PID/io)."""
    total = 0
    for pid in cg.read("cgroup.procs").split():
        try:
            total += proc_io(int(pid))
        except (OSError, KeyError, ValueError):
            pass  # exited meanwhile
    return total


def cgroup_hwm(cg):
    """Peak RSS per process name of the processes now in the cgroup."""
    out = {}
    for pid in cg.read("cgroup.procs").split():
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            if name in ("bash", "respawn.sh", "sleep"):
                continue
            out[name] = max(out.get(name, 0), proc_hwm(int(pid)))
        except OSError:
            pass
    return out


def run_stack(a, cg, ids, budget):
    """The served path: expertd + one inferd + the gateway (deploy/start.sh with one config file, every process
    in the cgroup), one streamed /v1/completions request with the prompt as token ids, greedy. TTFT = request
    sent -> first streamed token; decode tokens/s over the rest; the text is compared with moe run's tokens
    decoded (placement never changes the answer)."""
    import http.client
    d = tempfile.mkdtemp(prefix="sbs-stack-")
    port = 18000 + os.getpid() % 1000
    conf = os.path.join(d, "moestream.conf")
    with open(conf, "w") as f:
        plan = f"plan = {a.plan_file}\n" if a.plan_file else ""
        f.write(f"[expertd]\nmodel = {a.container}\n{plan or f'budget = {budget}'}\n{a.expertd_conf}\n"
                f"[inferd]\nmodel = {a.container}\nmax-sequences = 1\nprefix-cache-bytes = 64M\n{plan}{a.inferd_conf}\n"
                f"[gateway]\nlisten = 127.0.0.1:{port}\nserved-model-name = moestream\n"
                f"tokenizer = {os.path.join(ROOT, 'tests/data/text/glm_tiny')}\n")
    start = subprocess.run([os.path.join(ROOT, "deploy/start.sh"), "--config", conf, "--run-dir", d, "--workers", "1",
                            "--bin-dir", a.build], preexec_fn=cg.enter, capture_output=True, text=True, timeout=900)
    try:
        if start.returncode != 0:
            raise RuntimeError(f"start.sh failed: {start.stderr[-2000:]}")
        body = json.dumps({"model": "moestream", "prompt": ids, "max_tokens": a.n_predict, "temperature": 0,
                           "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
        io0 = cgroup_read_bytes(cg)
        t0 = time.time()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:2000]!r}")
        text, t_first, t_last, usage, io_first = "", None, None, None, None
        for ev in SseEvents(resp):
            if ev.get("usage"):
                usage = ev["usage"]
            for c in ev.get("choices", []):
                piece = choice_text(c)
                if piece:
                    if t_first is None:
                        t_first, io_first = time.time(), cgroup_read_bytes(cg)
                    t_last = time.time()
                    text += piece
        io_end = cgroup_read_bytes(cg)
        rss = cgroup_hwm(cg)
    finally:
        subprocess.run([os.path.join(ROOT, "deploy/stop.sh"), "--run-dir", d], capture_output=True)
    n = usage["completion_tokens"]
    dec = t_last - t_first
    return {"engine": "moestream-stack", "ttft_seconds": t_first - t0, "prompt_tokens": usage["prompt_tokens"],
            "decode_tokens": n - 1, "decode_seconds": dec, "decode_tokens_per_second": (n - 1) / dec if dec > 0 else 0,
            "read_bytes": io_end - io0, "decode_read_bytes": io_end - io_first,
            "decode_read_bytes_per_token": (io_end - io_first) / max(1, n - 1), "peak_rss_bytes": rss,
            "budget_bytes": budget, "text": text}


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
    ap.add_argument("--budget", default="plan",
                    help="expertd arena: plan (`moe plan --ram LIMIT --expertd`, applied by expertd and the worker with "
                         "--plan), auto (limit - resident weights - 1 GiB) or bytes")
    ap.add_argument("--expertd-args", default="", help="extra expertd flags")
    ap.add_argument("--run-args", default="", help="extra `moe run` flags (the moestream side)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--first-repeat", type=int, default=0,
                    help="number of the first repeat (odd: the sides in reverse order; to split repeats over runs)")
    ap.add_argument("--sides", default="moestream,stack,llama",
                    help="moestream: moe run over expertd (the engine, token ids out); stack: expertd + inferd + "
                         "gateway, one streamed /v1/completions request; llama: llama_decode")
    ap.add_argument("--expertd-conf", default="", help="extra [expertd] lines of the stack's config (key = value)")
    ap.add_argument("--inferd-conf", default="", help="extra [inferd] lines of the stack's config (key = value)")
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
    a.plan_file = None
    if a.budget == "plan":
        # The bandwidths only set the plan's floor figures, not its sizes: nominal values, nothing measured.
        a.plan_file = os.path.join(a.dir, f"plan_{limit}.json")
        r = subprocess.run([os.path.join(a.build, "tools/moe/moe"), "plan", "--model", a.container, "--ram", str(limit),
                           "--expertd", "--context", str(a.prompt_tokens + a.n_predict), "--mem-gbps", "1",
                           "--disk-gbps", "1", "--out", a.plan_file], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"--budget plan: moe plan found no plan for --limit {a.limit}: {r.stderr.strip()[-2000:]}")
        budget = json.load(open(a.plan_file))["expert_cache"]["bytes"]
    else:
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
            if side not in ("moestream", "stack", "llama"):
                sys.exit(f"--sides: unknown side {side!r} (moestream, stack, llama)")
            variants = a.llama_variants.split(",") if side == "llama" else [side]
            for v in variants:
                drop_cache([a.container, a.gguf])
                cg = Cgroup(f"moe-sbs-{os.getpid()}", limit)
                try:
                    cg.start_sampling()
                    t0 = time.time()
                    if side == "moestream":
                        r = run_moestream(a, cg, ids_file, budget)
                    elif side == "stack":
                        r = run_stack(a, cg, ids, budget)
                    else:
                        r = run_llama(a, cg, ids_file, v)
                    r["wall_seconds"] = time.time() - t0
                    r["cgroup"] = cg.stats()
                    r["repeat"] = rep
                finally:
                    cg.remove()
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in ("tokens", "text")}), flush=True)
    ours = [r for r in runs if r["engine"] == "moestream"]
    theirs = [r for r in runs if r["engine"] == "llama.cpp"]
    agree = None
    if ours and theirs:
        x, y = ours[0]["tokens"], theirs[0]["tokens"]
        n = min(len(x), len(y))
        first = next((i for i in range(n) if x[i] != y[i]), n)
        agree = {"compared": n, "equal": sum(x[i] == y[i] for i in range(n)), "first_difference": first}
    stack = [r for r in runs if r["engine"] == "moestream-stack"]
    stack_agree = None
    if ours and stack:
        dec = subprocess.run([os.path.join(a.build, "tools/moe/moe"), "tokenize", "--decode", "--skip-special",
                              "--tokenizer", os.path.join(ROOT, "tests/data/text/glm_tiny/tokenizer.json")],
                             input=",".join(map(str, ours[0]["tokens"])), capture_output=True, text=True)
        want = dec.stdout.rstrip("\n") if dec.returncode == 0 else None
        # moe run stops at an end-of-sequence token, the stack (ignore_eos, as llama_decode) goes on.
        same = lambda t: want is not None and (t == want or (ours[0]["stopped_at_eos"] and t.startswith(want)))  # noqa: E731
        stack_agree = {"moe_run_text": want, "identical": [same(r["text"]) for r in stack]}
    res = {"limit_bytes": limit, "budget_bytes": budget, "resident_bytes": resident, "expert_bytes": expert_bytes,
           "model_bytes": total, "gguf_bytes": os.path.getsize(a.gguf), "prompt_tokens": a.prompt_tokens,
           "n_predict": a.n_predict, "runs": runs, "greedy_agreement": agree, "stack_vs_moe_run": stack_agree,
           "config": {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "n_routed_experts",
                                          "num_experts_per_tok", "moe_intermediate_size")}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps({"greedy_agreement": agree, "stack_vs_moe_run": stack_agree}))


if __name__ == "__main__":
    main()
