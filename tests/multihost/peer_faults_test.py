#!/usr/bin/env python3
"""Faults on the expert-parallel inferd (issue 23; docs/MULTIHOST.md "Tests without a cluster"),
3 fake hosts (tools/multihost/fake_hosts.py, peers=True: every host owns a third of each MoE
layer's experts by `moe ownership`'s map, computes those for the others over RunExperts, falls
back to its own container for a peer that fails); gateways on hosts 0 and 1, host 2 inferd +
expertd only. One-host answers first (a 1-host stack, one request at a time), then rounds of
ROUND_JOBS concurrent greedy requests (3 different prompts to each of the 2 gateways, threads),
each of which must
  - return within bound(tokens) (no hang: see BASE_BOUND_S), HTTP 200, all max_tokens tokens (no lost request:
    the gateways' moe_requests_total{code="200"} grows by exactly the number sent),
  - carry its own prompt's one-host answer (no mixed request: the prompts' answers differ),
under: no fault (activations reach host 2: its wire bytes grow); the link 0-2 cut (nftables:
host 0 logs its fallback, host 1 still sends host 2 its rows); host 2 partitioned from hosts 0
and 1 (the fallback: host 2's received bytes do not grow, and inferd on hosts 0 and 1
logs "its experts run on this host"); 20% packet loss on host 2 (nftables numgen, both ways); a
0.1 Gbit/s cap on every host (tc tbf); kill -9 of host 2 while streamed requests are running
(each stream read past its first tokens before the kill, then finished with the one-host
answer; the fallback logged); host 2 restarted (its experts run there again: its wire bytes
grow).
Cancel within one step (no fault, then with host 2 partitioned: steps that wait on a peer's
deadline): a streamed request with many max_tokens is read for a few chunks and its connection
closed; the gateway's running-requests gauge (/health "running", moe_running_requests) is 0
within CANCEL_BOUND_S, the worker's streamed tokens (moe_worker_tokens_total) stop growing, a
request sent right after is answered promptly and correctly, moe_cancelled_sequences_total grew,
and once the gateway's next probes have the worker's stats: moe_worker_max_steps_after_cancel is 0
(no step that started after the cancel included the sequence) and moe_worker_steps_total does not
move (nothing left generating).
Exit 77 (ctest SKIP_RETURN_CODE) when not root, namespaces cannot be made, the services are not
built, or inferd has no --peer-listen. The whole test is bounded by DEADLINE_S (then cleanup, fail).

    tests/multihost/peer_faults_test.py [BUILD_DIR]"""
import json
import os
import re
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "multihost"))
import fake_hosts as fh  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multihost_test_util as tu  # noqa: E402
from multihost_test_util import check  # noqa: E402

SKIP = tu.SKIP
DEADLINE_S = 100         # the whole test (ctest's TIMEOUT is above it)
PROMPTS = ("Who are you?", "Count from one to ten.", "What day comes after Monday?")
GATEWAYS = (0, 1)        # host 2 has no gateway: it is the one faults hit
ROUND_JOBS = [(p, g) for p in PROMPTS for g in GATEWAYS]
MAX_TOKENS = 32          # every request: greedy, ignore_eos, so each answer has exactly this many
LONG_TOKENS = 160        # the streamed requests host 2 is killed under
CANCEL_TOKENS = 1500     # the cancelled stream (it would run for seconds)
# No hang: a request returns within BASE_BOUND_S + tokens x MoE layers x --peer-deadline-ms (each
# MoE layer of a step waits on a peer at most its deadline, then runs the experts locally; the
# steps of concurrent requests are shared). Under packet loss that bound is approached: a lost
# segment costs a TCP retransmit (200 ms minimum RTO) that still lands inside the 250 ms deadline,
# so the call succeeds late and the host is not marked suspect.
BASE_BOUND_S = 8.0
DEADLINE_MS = 250        # --peer-deadline-ms (fake_hosts' default, inferd's default)
CANCEL_BOUND_S = 1.0     # the running gauge is 0 this soon after the client went away
PROMPT_BOUND_S = 5.0     # the request right after a cancel is answered within this
SUSPECT_MS = 300         # --peer-suspect-ms: a failed host is tried again soon (faults are hit often)
PROBE_WAIT_S = 1.3       # > the gateway's --probe-ms (1 s): its worker stats are refreshed
FALLBACK_LINE = "its experts run on this host"
MOE_LAYERS = 3           # of the demo container (mlp_layer_types: dense + 3 sparse); read in main()


def bound(tokens):
    return BASE_BOUND_S + tokens * MOE_LAYERS * DEADLINE_MS / 1000.0


REQUEST_BOUND_S = bound(MAX_TOKENS)


def summary(st, j):
    """(content, finish_reason, completion_tokens) of a chat completion reply, or raises."""
    if st != 200 or not isinstance(j, dict):
        raise AssertionError(f"HTTP {st}: {str(j)[:300]}")
    ch = j["choices"][0]
    return ch["message"].get("content"), ch.get("finish_reason"), j["usage"]["completion_tokens"]


def ok_count(c):
    """Chat completions answered 200 by all gateways (moe_requests_total)."""
    n = 0
    for g in GATEWAYS:
        n += sum(v for k, v in c.metrics(g).items()
                 if k.startswith("moe_requests_total{") and 'code="200"' in k and 'endpoint="chat"' in k)
    return n


def log_offset(h, name="inferd0"):
    try:
        return os.path.getsize(h.log_path(name))
    except OSError:
        return 0


def log_since(h, offset, name="inferd0"):
    with open(h.log_path(name), "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def concurrent(c, want, jobs=ROUND_JOBS, max_tokens=MAX_TOKENS):
    """Sends every (prompt, gateway) job at once (threads, in this process); checks each answer.
    Returns the slowest request's seconds."""
    results = [None] * len(jobs)

    def one(i, prompt, g):
        t0 = time.monotonic()
        try:
            st, j = c.chat_inproc(prompt, max_tokens, host=g, timeout=REQUEST_BOUND_S, ignore_eos=True)
            results[i] = (st, j, time.monotonic() - t0)
        except Exception as e:  # reported below
            results[i] = (None, f"{type(e).__name__}: {e}", time.monotonic() - t0)
    n0 = ok_count(c)
    threads = [threading.Thread(target=one, args=(i, p, g), daemon=True) for i, (p, g) in enumerate(jobs)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, REQUEST_BOUND_S + 5 - (time.monotonic() - t0)))
    hung = [jobs[i] for i, t in enumerate(threads) if t.is_alive() or results[i] is None]
    if hung:
        raise AssertionError(f"requests did not return within {REQUEST_BOUND_S} s: {hung}")
    ids = set()
    for (prompt, g), (st, j, dt) in zip(jobs, results):
        if dt > REQUEST_BOUND_S:
            raise AssertionError(f"{prompt!r} via host {g}: {dt:.1f} s > {REQUEST_BOUND_S} s")
        got = summary(st, j)
        if got != want[prompt]:
            raise AssertionError(f"{prompt!r} via host {g}: {got!r}, one host: {want[prompt]!r}")
        ids.add(j["id"])
    if len(ids) != len(jobs):
        raise AssertionError(f"{len(jobs)} requests, {len(ids)} distinct ids")
    n1 = ok_count(c)
    if n1 - n0 != len(jobs):
        raise AssertionError(f"gateways counted {n1 - n0:.0f} answered requests, {len(jobs)} were sent")
    return max(r[2] for r in results)


def streamed(c, want_long, on_started):
    """ROUND_JOBS streamed LONG_TOKENS requests; once every stream has its first tokens,
    on_started() runs (the fault) while they go on; each must finish with its one-host answer.
    Returns the tokens each stream had when on_started ran."""
    started = threading.Barrier(len(ROUND_JOBS) + 1, timeout=bound(LONG_TOKENS))
    out = [None] * len(ROUND_JOBS)

    def one(i, prompt, g):
        text, n, usage, finish, passed, at = [], 0, None, None, False, None
        try:
            s = c.chat_stream(prompt, LONG_TOKENS, host=g, timeout=bound(LONG_TOKENS), ignore_eos=True)
            if s.error is not None:
                raise AssertionError(f"HTTP {s.status}: {s.error}")
            t0 = time.monotonic()
            for _, ch in s:
                for choice in ch.get("choices", []):
                    delta = choice.get("delta", {})
                    if delta.get("content"):
                        text.append(delta["content"])
                        n += 1
                    finish = choice.get("finish_reason") or finish
                usage = ch.get("usage") or usage
                if n >= 3 and not passed:
                    passed = True
                    at = n
                    started.wait()
                if time.monotonic() - t0 > bound(LONG_TOKENS):
                    raise AssertionError(f"stream ran past {bound(LONG_TOKENS)} s")
            s.close()
            out[i] = ("".join(text), finish, (usage or {}).get("completion_tokens"), at)
        except Exception as e:  # reported below
            out[i] = f"{type(e).__name__}: {e}"
            if not passed:
                started.abort()
    threads = [threading.Thread(target=one, args=(i, p, g), daemon=True) for i, (p, g) in enumerate(ROUND_JOBS)]
    for t in threads:
        t.start()
    try:
        started.wait()
    except threading.BrokenBarrierError:
        pass
    else:
        on_started()
    for t in threads:
        t.join(bound(LONG_TOKENS) + 5)
    at = []
    for (prompt, g), t, r in zip(ROUND_JOBS, threads, out):
        if t.is_alive() or r is None:
            raise AssertionError(f"stream {prompt!r} via host {g} did not end within {bound(LONG_TOKENS)} s")
        if isinstance(r, str):
            raise AssertionError(f"stream {prompt!r} via host {g}: {r}")
        if r[:3] != want_long[prompt]:
            raise AssertionError(f"stream {prompt!r} via host {g}: {r[:3]!r}, one host: {want_long[prompt]!r}")
        at.append(r[3])
    return at


def worker_value(m, name):
    vals = [v for k, v in m.items() if k.startswith(name + "{")]
    if len(vals) != 1:
        raise AssertionError(f"{name}: {len(vals)} series (one worker expected)")
    return vals[0]


def cancel_check(c, want, what):
    """A stream of CANCEL_TOKENS read for 3 chunks, then its connection closed."""
    m0 = c.metrics(0)
    cancelled0 = m0.get('moe_cancelled_sequences_total{model="moestream"}', 0)
    s = c.chat_stream(PROMPTS[0], CANCEL_TOKENS, host=0, timeout=REQUEST_BOUND_S, ignore_eos=True)
    check(s.status == 200, f"{what}: a stream of {CANCEL_TOKENS} tokens started")
    n = 0
    for _, ch in s:
        n += sum(1 for x in ch.get("choices", []) if x.get("delta", {}).get("content"))
        if n >= 3:
            break
    st, hj = c.gateway_get("/health")
    check(st == 200 and hj.get("running") == 1, f"{what}: it runs ({n} chunks read; /health running 1)")
    s.close()
    t_close = time.monotonic()
    while True:
        st, hj = c.gateway_get("/health")
        dt = time.monotonic() - t_close
        if st == 200 and hj.get("running") == 0:
            break
        if dt > CANCEL_BOUND_S:
            raise AssertionError(f"{what}: /health running still {hj.get('running')} {dt:.2f} s after the close")
        time.sleep(0.02)
    m1 = c.metrics(0)
    check(m1['moe_running_requests{model="moestream"}'] == 0,
          f"{what}: client gone -> running requests 0 in {dt * 1000:.0f} ms (/health, moe_running_requests)")
    tokens1 = worker_value(m1, "moe_worker_tokens_total")
    time.sleep(0.3)
    tokens2 = worker_value(c.metrics(0), "moe_worker_tokens_total")
    check(tokens2 == tokens1, f"{what}: the worker streams no more tokens ({tokens1:.0f} then {tokens2:.0f})")
    t0 = time.monotonic()
    got = summary(*c.chat_inproc(PROMPTS[1], MAX_TOKENS, host=0, timeout=REQUEST_BOUND_S, ignore_eos=True))
    dt = time.monotonic() - t0
    check(got == want[PROMPTS[1]] and dt < PROMPT_BOUND_S,
          f"{what}: the request right after is answered, correctly, in {dt:.2f} s")
    time.sleep(PROBE_WAIT_S)
    m2 = c.metrics(0)
    check(m2.get('moe_cancelled_sequences_total{model="moestream"}', 0) > cancelled0,
          f"{what}: moe_cancelled_sequences_total grew")
    late = worker_value(m2, "moe_worker_max_steps_after_cancel")
    check(late == 0, f"{what}: moe_worker_max_steps_after_cancel {late:.0f} (no step after the cancel had it)")
    steps2 = worker_value(m2, "moe_worker_steps_total")
    time.sleep(PROBE_WAIT_S)
    steps3 = worker_value(c.metrics(0), "moe_worker_steps_total")
    check(steps3 == steps2, f"{what}: the worker runs no step afterwards ({steps2:.0f} then {steps3:.0f} steps)")


def isolate(c, host):
    for other in range(c.n_hosts):
        if other != host:
            c.partition(other, host)


def references(build, pid):
    """The one-host answers, one request at a time."""
    want, want_long = {}, {}
    with fh.FakeCluster(1, build=build, tag=f"pfref{pid}") as ref:
        for p in PROMPTS:
            want[p] = summary(*ref.chat_inproc(p, MAX_TOKENS, timeout=REQUEST_BOUND_S, ignore_eos=True))
            want_long[p] = summary(*ref.chat_inproc(p, LONG_TOKENS, timeout=bound(LONG_TOKENS), ignore_eos=True))
    check(all(w[2] == MAX_TOKENS and w[0] for w in want.values()) and len({w[0] for w in want.values()}) == 3,
          f"one host: {len(PROMPTS)} different answers of {MAX_TOKENS} tokens "
          f"({', '.join(repr(w[0][:24]) for w in want.values())})")
    check(all(w[2] == LONG_TOKENS for w in want_long.values()), f"one host: the {LONG_TOKENS}-token answers")
    return want, want_long


def faults(build, pid, want, want_long):
    args = [f"--peer-suspect-ms={SUSPECT_MS}"]
    with fh.FakeCluster(3, build=build, tag=f"pf{pid}", peers=True, gateway_hosts=GATEWAYS,
                        inferd_args=args, peer_deadline_ms=DEADLINE_MS) as c:
        h0, h1, h2 = c.hosts
        rx = c.wire_bytes(2)["rx"]
        dt = concurrent(c, want)
        got = c.wire_bytes(2)["rx"] - rx
        check(got > 10_000, f"no fault: {len(ROUND_JOBS)} concurrent requests, each its one-host answer "
                            f"(slowest {dt:.2f} s; {got} B of activations to host 2)")

        off0, rx1 = log_offset(h0), c.wire_bytes(1)["rx"]
        c.partition(0, 2)
        rx = c.wire_bytes(2)["rx"]
        dt = concurrent(c, want)
        got, got1 = c.wire_bytes(2)["rx"] - rx, c.wire_bytes(1)["rx"] - rx1
        check(FALLBACK_LINE in log_since(h0, off0) and got > 10_000 and got1 > 10_000,
              f"link 0-2 cut: the same answers (slowest {dt:.2f} s); host 0 runs host 2's experts itself "
              f"(logged), host 1 still sends them there ({got} B to host 2, {got1} B to host 1)")
        c.heal()

        offs = [log_offset(h) for h in (h0, h1)]
        isolate(c, 2)
        rx = c.wire_bytes(2)["rx"]
        dt = concurrent(c, want)
        got = c.wire_bytes(2)["rx"] - rx
        # (< 2 KB: IPv6 neighbour/multicast chatter is not what partition() drops)
        check(got < 2_000, f"host 2 partitioned: the same answers (slowest {dt:.2f} s); host 2 received {got} B")
        logged = [FALLBACK_LINE in log_since(h, o) for h, o in zip((h0, h1), offs)]
        check(all(logged), f"host 2 partitioned: hosts 0 and 1 fell back to their own disk ({FALLBACK_LINE!r})")
        cancel_check(c, want, "host 2 partitioned, cancel")
        c.heal()

        c.loss(2, 20)
        rx, off0 = c.wire_bytes(2)["rx"], log_offset(h0)
        dt = concurrent(c, want)
        check(True, f"20% packet loss on host 2: the same answers (slowest {dt:.2f} s; "
                    f"{c.wire_bytes(2)['rx'] - rx} B to host 2; host 0 fell back "
                    f"{log_since(h0, off0).count(FALLBACK_LINE)} time(s))")
        c.loss(2, 0)

        for i in range(c.n_hosts):
            c.bandwidth(i, 0.1)
        rx = c.wire_bytes(2)["rx"]
        dt = concurrent(c, want)
        got = c.wire_bytes(2)["rx"] - rx
        q = h2.exec(["tc", "-s", "qdisc", "show", "dev", "eth0"]).stdout
        m = re.search(r"tbf .*?Sent (\d+) bytes", q, re.S)
        sent = int(m.group(1)) if m else 0
        check(got > 10_000 and sent > 10_000,
              f"0.1 Gbit/s cap on every host: the same answers (slowest {dt:.2f} s; {got} B to host 2, "
              f"{sent} B out through its tbf)")
        for i in range(c.n_hosts):
            c.bandwidth(i, None)

        offs = [log_offset(h) for h in (h0, h1)]
        running = []

        def kill():
            running.extend(c.gateway_get("/health", g)[1].get("running") for g in GATEWAYS)
            c.kill9(2)
        at = streamed(c, want_long, kill)
        check(sum(running) == len(ROUND_JOBS) and max(at) < LONG_TOKENS,
              f"host 2 killed (kill -9) while {len(ROUND_JOBS)} streams ran (gateways' running "
              f"{'+'.join(map(str, running))}, each stream at token {max(at)} of {LONG_TOKENS}): "
              f"each ended with its one-host answer")
        check(fh.netns_pids(h2.ns) == [], "no process left on host 2")
        logged = [FALLBACK_LINE in log_since(h, o) for h, o in zip((h0, h1), offs)]
        check(all(logged), "host 2 killed: hosts 0 and 1 fell back to their own disk")
        dt = concurrent(c, want)
        check(True, f"host 2 down: the same answers (slowest {dt:.2f} s)")

        c.restart(2)
        t0, got, rounds = time.monotonic(), 0, 0
        while time.monotonic() - t0 < 15 and got <= 10_000:
            time.sleep(0.4)
            rx = c.wire_bytes(2)["rx"]
            concurrent(c, want)
            rounds += 1
            got = c.wire_bytes(2)["rx"] - rx
        check(got > 10_000, f"host 2 restarted: {rounds} rounds of the same answers, and its experts run there "
                            f"again after {time.monotonic() - t0:.1f} s ({got} B to it)")
        cancel_check(c, want, "no fault, cancel")


def main():
    build = tu.build_dir(sys.argv[1:])
    why = tu.preflight(build, tu.SERVICES + ("tools/moe/moe",), inferd_flags=("--peer-listen", "--peer-suspect-ms"))
    if why:
        print(f"SKIP: {why}")
        return SKIP

    global MOE_LAYERS, REQUEST_BOUND_S
    try:
        with open(os.path.join(ROOT, "models", "glm-tiny-chat-q4", "config.json")) as f:
            cfg = json.load(f)
        MOE_LAYERS = sum(1 for t in cfg.get("mlp_layer_types", []) if t != "dense") or MOE_LAYERS
        REQUEST_BOUND_S = bound(MAX_TOKENS)
    except (OSError, ValueError):
        pass
    pid = os.getpid()

    def body():
        want, want_long = references(build, pid)
        faults(build, pid, want, want_long)
    return tu.run("peer faults", DEADLINE_S, {f"pfref{pid}", f"pf{pid}"}, body)


if __name__ == "__main__":
    sys.exit(main())
