#!/usr/bin/env python3
"""The fake-host harness (tools/multihost/fake_hosts.py, docs/MULTIHOST.md "Tests without a
cluster") on today's single-host services: 2 fake hosts (network + mount namespaces, a bridge in a
switch namespace, each host its own expertd + inferd on its own copy of the demo container, host 0
the gateway). Checks:
  - a greedy chat completion to host 0's gateway, sent from inside host 0 and from inside host 1
    (over the bridge), equals the same request answered by a one-host stack;
  - partition(0, 1): host 1's address unreachable from host 0 (and back), host 1's request to
    host 0's gateway fails; heal(): reachable again and the request answers the same;
  - loss(0, 100) cuts TCP, loss(0, 0) restores it; bandwidth(1, 1) puts tbf on both ends of the
    link, bandwidth(1, None) removes it; kill9(1) leaves no process in host 1, restart(1) brings
    its stack back;
  - the peer flags (PEER_FLAGS) reach inferd's argv only with peers=True;
  - cleanup: no namespace, temp dir or process of the run is left, also when the harness is
    SIGKILLed (its reaper sweeps).
With --peers instead (the expert-parallel inferd: PEER_FLAGS, the ownership map, a token): the
2-host answer with host 1 owning half the experts equals one host's, activations reach host 1
(wire bytes), and so does the answer with host 1 partitioned away (local fallback), killed, and
restarted.
Exit 77 (ctest SKIP_RETURN_CODE) when not root, when namespaces cannot be made (`ip netns add`
fails: an unprivileged container), the services are not built, or (--peers) inferd has no
--peer-listen yet.

    tests/multihost/fake_hosts_test.py [--peers] [BUILD_DIR]"""
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "multihost"))
import fake_hosts as fh  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multihost_test_util as tu  # noqa: E402
from multihost_test_util import check  # noqa: E402

SKIP = tu.SKIP
DEADLINE_S = 150  # the whole test (ctest's TIMEOUT is above it): then cleanup and fail
PROMPT = "Who are you?"
MAX_TOKENS = 24


def answer(c, from_host=0, timeout=60):
    st, j = c.chat(PROMPT, MAX_TOKENS, from_host=from_host, timeout=timeout)
    if st != 200:
        raise AssertionError(f"chat from host {from_host}: HTTP {st}: {j}")
    ch = j["choices"][0]
    return ch["message"].get("content"), ch.get("finish_reason"), j["usage"]["completion_tokens"]


def peer_flags_check(build):
    c = fh.FakeCluster(2, build=build, tag="argvonly", reaper=False)
    c.tmp = "/nonexistent"
    c.hosts = [fh.Host(c, i) for i in range(2)]
    plain = fh.inferd_argv(c, c.hosts[1], 0)
    check(not any(a.startswith("--peer") or a.startswith("--host-index") or a.startswith("--ownership")
                  for a in plain), "peers=False: inferd gets no multi-host flag")
    c.peers, c.token_file, c.ownership_map = True, "/t/token", "/t/own.json"
    argv = fh.inferd_argv(c, c.hosts[1], 0)
    want = [f"--peer-listen={c.hosts[1].addr}:{fh.PEER_PORT}", "--peer-token-file=/t/token",
            "--ownership-map=/t/own.json", "--host-index=1", f"--peer-deadline-ms={c.peer_deadline_ms}"]
    check(all(w in argv for w in want), f"peers=True: inferd argv has {' '.join(want)}")
    own = fh.OWNERSHIP_ARGV(c)
    check(own[1] == "ownership" and f"--hosts={c.hosts[0].addr}:7100,{c.hosts[1].addr}:7100" in own,
          "ownership map command names every host's peer address")


def crash_cleanup_check(build, tag):
    """A harness SIGKILLed while up: its reaper removes namespaces, processes and temp dir."""
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "multihost", "fake_hosts.py"), "up",
                          "--hosts", "2", "--tag", tag, "--build", build],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        line = p.stdout.readline()  # the layout JSON's first line: printed once up
        check(line.startswith(b"{"), "a second harness (CLI `up`) came up")
        ns, _, procs = tu.leftovers({tag})
        check(len(ns) == 3 and procs, f"it made 3 namespaces ({', '.join(ns)}) and runs its services")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
    t0 = time.time()
    while time.time() - t0 < 20:
        ns, tmp, procs = tu.leftovers({tag})
        if not (ns or tmp or procs):
            break
        time.sleep(0.2)
    check(not (ns or tmp or procs), f"after SIGKILL of that harness its reaper swept everything in "
                                    f"{time.time() - t0:.1f} s (left: {ns + tmp + procs})")


def peers_checks(build, pid, want, inferd_help):
    """peers=True (the multi-host inferd flags): host 0's experts half remote, same answer."""
    # A host that failed is tried again after --peer-suspect-ms (default 10 s): short here, so
    # the kill and restart checks below reach host 1 again instead of its suspect window.
    suspect = ["--peer-suspect-ms=300"] if "--peer-suspect-ms" in inferd_help else []
    with fh.FakeCluster(2, build=build, tag=f"peer{pid}", peers=True, inferd_args=suspect) as c:
        h0, h1 = c.hosts
        check(oct(os.stat(c.token_file).st_mode & 0o777) == "0o600", "peer token file is mode 0600")
        with open(c.ownership_map) as f:
            own = json.load(f)
        check(own.get("hosts") == [f"{h.addr}:{fh.PEER_PORT}" for h in c.hosts],
              f"ownership map names both hosts ({own.get('hosts')})")
        check(c.hosts[0].tcp_probe(h1.addr) == "connected", "host 1's inferd serves its peer port")
        before = c.wire_bytes(1)
        got = answer(c)
        after = c.wire_bytes(1)
        rx = after["rx"] - before["rx"]
        check(got == want, f"2 hosts, experts spread by the map: the one-host answer ({rx} B to host 1)")
        check(rx > 10_000, "the request sent host 1 its experts' activations (RunExperts over TCP)")
        c.partition(0, 1)
        t0 = time.time()
        check(answer(c, timeout=60) == want, f"host 1 partitioned away: the same answer (local fallback) in "
                                             f"{time.time() - t0:.1f} s")
        c.heal()
        c.kill9(1)
        time.sleep(0.4 if suspect else 0)
        t0 = time.time()
        check(answer(c, timeout=60) == want, f"host 1 killed: the same answer in {time.time() - t0:.1f} s")
        c.restart(1)
        if suspect:
            # Back to host 1 once the suspect window and gRPC's reconnect backoff (~1 s) pass.
            t0, rx, same = time.time(), 0, True
            while time.time() - t0 < 10 and rx <= 10_000:
                time.sleep(0.4)
                before = c.wire_bytes(1)["rx"]
                same = same and answer(c, timeout=60) == want
                rx = c.wire_bytes(1)["rx"] - before
            check(same, "host 1 restarted: the same answers")
            check(rx > 10_000, f"host 1 restarted: its experts run there again after {time.time() - t0:.1f} s "
                               f"({rx} B to it)")
        else:
            check(answer(c, timeout=60) == want, "host 1 restarted: the same answer")


def main():
    args = [a for a in sys.argv[1:] if a != "--peers"]
    peers = "--peers" in sys.argv[1:]
    build = tu.build_dir(args)
    why = tu.preflight(build, inferd_flags=("--peer-listen",) if peers else ())
    if why:
        print(f"SKIP: {why}")
        return SKIP
    pid = os.getpid()
    tags = {f"ref{pid}", f"two{pid}", f"crash{pid}", f"peer{pid}"}

    def body():
        if peers:
            r = subprocess.run([os.path.join(build, "services/inferd/inferd"), "--help"], capture_output=True,
                               text=True, timeout=20)
            inferd_help = r.stdout + r.stderr
        else:
            peer_flags_check(build)
        with fh.FakeCluster(1, build=build, tag=f"ref{pid}") as ref:
            want = answer(ref)
        check(bool(want[0]), f"one-host stack answers {want[0]!r} ({want[2]} tokens, {want[1]})")
        if peers:
            peers_checks(build, pid, want, inferd_help)
            raise tu.Finished()

        with fh.FakeCluster(2, build=build, tag=f"two{pid}") as c:
            h0, h1 = c.hosts
            check(h0.addr != h1.addr and all(h.addr.startswith("10.77.") for h in c.hosts),
                  f"hosts {h0.ns} {h0.addr}, {h1.ns} {h1.addr}")
            check(all(p.poll() is None for h in c.hosts for p in h.procs.values())
                  and sorted(h1.procs) == ["expertd", "inferd0"] and "gateway" in h0.procs,
                  "host 0 runs expertd + inferd + gateway, host 1 expertd + inferd")
            got = answer(c)
            check(got == want, f"host 0's gateway (from host 0) answers as one host: {got[0]!r}")
            check(answer(c, from_host=1) == want, "the same from host 1 over the bridge")

            check(c.reachable(0, 1) and c.reachable(1, 0), "host 0 <-> host 1 reachable")
            c.partition(0, 1)
            check(not c.reachable(0, 1) and not c.reachable(1, 0), "partition(0, 1): unreachable both ways")
            st, err = c.chat(PROMPT, MAX_TOKENS, from_host=1, timeout=2)
            check(st is None, f"partitioned: host 1's request to host 0's gateway fails ({err})")
            check(answer(c) == want, "partitioned: host 0's own request still answers the same")
            c.heal()
            check(c.reachable(0, 1) and c.reachable(1, 0), "heal(): reachable again")
            check(answer(c, from_host=1) == want, "healed: host 1's request answers the same")

            c.loss(0, 100)
            check(not c.reachable(1, 0), "loss(0, 100): host 0 unreachable over TCP")
            c.loss(0, 0)
            check(c.reachable(1, 0), "loss(0, 0): reachable again")
            c.bandwidth(1, 1)
            q_host = h1.exec(["tc", "qdisc", "show", "dev", "eth0"]).stdout
            q_sw = fh.sh(fh.ns_exec(c.switch, ["tc", "qdisc", "show", "dev", h1.veth])).stdout
            check("tbf" in q_host and "rate 1Gbit" in q_host and "tbf" in q_sw,
                  "bandwidth(1, 1): tbf 1 Gbit/s on host 1's eth0 and its switch port")
            check(answer(c, from_host=1) == want, "capped: host 1's request answers the same")
            c.bandwidth(1, None)
            check("tbf" not in h1.exec(["tc", "qdisc", "show", "dev", "eth0"]).stdout, "bandwidth(1, None): cap gone")

            c.kill9(1)
            check(fh.netns_pids(h1.ns) == [] and all(p.poll() is not None for p in h1.procs.values()),
                  "kill9(1): no process left in host 1")
            check(answer(c) == want, "host 0 still answers with host 1 dead")
            c.restart(1)
            check(all(p.poll() is None for p in h1.procs.values()) and os.path.exists(h1.inferd_sock(0)),
                  "restart(1): host 1's expertd and inferd run again")
        ns, tmp, procs = tu.leftovers({f"ref{pid}", f"two{pid}"})
        check(not (ns or tmp or procs), "cleanup: no namespace, temp dir or process left")

        crash_cleanup_check(build, f"crash{pid}")

    return tu.run("fake hosts", DEADLINE_S, tags, body)


if __name__ == "__main__":
    sys.exit(main())
