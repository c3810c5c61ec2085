"""What the fake-host tests share (tests/multihost/*_test.py): the skip preflight, the whole-test
deadline, check(), and the run-then-sweep skeleton that fails when anything of the run is left
behind (a namespace, a temp dir, a process)."""
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "multihost"))
import fake_hosts as fh  # noqa: E402

SKIP = 77  # ctest SKIP_RETURN_CODE
SERVICES = ("services/expertd/expertd", "services/inferd/inferd", "services/gateway/gateway")


class Deadline(Exception):
    pass


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}", flush=True)


def build_dir(args):
    return os.path.abspath(args[0] if args else os.path.join(ROOT, "build"))


def preflight(build, binaries=SERVICES, inferd_flags=()):
    """None when the test can run here, else the reason to skip (printed by the caller)."""
    missing = [b for b in binaries if not os.access(os.path.join(build, b), os.X_OK)]
    if missing:
        return f"not built in {build}: {', '.join(missing)}"
    ok, why = fh.can_run()
    if not ok:
        return f"cannot make fake hosts on this machine: {why}"
    if inferd_flags:
        r = subprocess.run([os.path.join(build, "services/inferd/inferd"), "--help"], capture_output=True,
                           text=True, timeout=20)
        absent = [f for f in inferd_flags if f not in r.stdout + r.stderr]
        if absent:
            return f"this inferd has no {', '.join(absent)} (expert parallelism not built)"
    return None


def leftovers(tags):
    """(namespaces, temp dirs, processes) of the run's tags still present."""
    ns = [n for n in fh.netns_list() if fh.NS_RE.match(n) and fh.NS_RE.match(n).group(2) in tags]
    tmp = [d for d in os.listdir(tempfile.gettempdir())
           if d.startswith(fh.TMP_PREFIX) and d[len(fh.TMP_PREFIX):].split("-", 1)[0] in tags]
    procs = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            if any(f"{fh.TMP_PREFIX}{t}-" in cmd for t in tags):
                procs.append(f"{p}: {cmd.replace(chr(0), ' ')[:120]}")
    return ns, tmp, procs


class Finished(Exception):
    """Raised by a body that is done early (the rest of the checks are for another mode)."""


def run(name, deadline_s, tags, body):
    """Runs body() under a whole-test deadline, then sweeps every tag of the run (and stale
    namespaces of dead harnesses) and fails if anything is left. Returns the exit code."""
    def on_alarm(*_):
        raise Deadline(f"the test ran past {deadline_s} s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(deadline_s)
    t_start = time.time()
    try:
        body()
    except Finished:
        pass
    except (AssertionError, fh.HarnessError, Deadline, OSError) as e:
        print(f"FAIL: {e}", flush=True)
        return 1
    finally:
        signal.alarm(0)
        fh.sweep(None)  # nothing of ours may stay, whatever failed
        for t in tags:
            fh.sweep(t)
    ns, tmp, procs = leftovers(tags)
    if ns or tmp or procs:
        print(f"FAIL: left behind: {ns + tmp + procs}")
        return 1
    print(f"{name}: all checks passed in {time.time() - t_start:.1f} s; nothing of the run is left")
    return 0
