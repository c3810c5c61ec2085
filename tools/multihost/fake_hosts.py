#!/usr/bin/env python3
"""Fake hosts on one machine for the multi-host tests (docs/MULTIHOST.md, "Tests without a cluster").

A FakeCluster of N hosts; host i is
  - a network namespace `moeh<i>-<tag>` with eth0 = 10.77.<subnet>.<i+1>/24 and loopback up, eth0
    being one end of a veth pair whose other end (h<i>) sits on the bridge br0 of a dedicated
    "switch" namespace `moesw-<tag>`: the root namespace's interfaces, addresses and routes are
    never touched, and only addresses inside namespaces made here are used;
  - a mount namespace of its own (a holder process: `ip netns exec NS unshare --mount
    --propagation private sh -c 'mount -t tmpfs tmpfs /dev/shm && exec sleep ...'`; every
    process of the host enters it with nsenter), so the host has its own /dev/shm;
  - its own copy of the model container (TMP/host<i>/model; link_model=True / --link-model: hard
    links instead, for a GB container on the same file system), run dir (sockets, logs) and
    moestream.conf (deploy/moestream.conf with this host's model, expertd budget, tokenizer and
    gateway address, as deploy/run.sh writes it);
  - the processes deploy/start.sh starts, with its arguments: expertd (--config, --socket
    RUN/expertd.sock), `workers` inferd (--config, --listen unix:RUN/inferd<w>.sock, --expertd
    unix:RUN/expertd.sock), and on host 0 (`gateway_hosts`) the gateway (--config, --worker ...)
    listening on 10.77.<subnet>.<i+1>:8000 inside the namespace.
With peers=True every inferd also gets the multi-host flags (PEER_FLAGS below: the one place to
add, rename or drop one), with a random bearer token file (mode 0600) and an ownership map made
by `moe ownership` (OWNERSHIP_ARGV below).
With from_manifest="multi-node" (--from-manifest) the hosts run the rendered manifests instead
(tools/multihost/manifest.py; needs PyYAML): host 0 the expertd DaemonSet's and the
LeaderWorkerSet leader pod's containers (inferd + gateway), host i > 0 expertd and worker pod i's
inferd, with the golden's args, config (its ConfigMap, plan.json and the ownership-map template)
and init containers (peer-files renders the map from the template and copies the token Secret,
here one random token at the Secret's mode 0400); only what a kubelet fills in is replaced
($(POD_IP), $(LWS_WORKER_INDEX) and the pods' env, the mounted paths by the host's directories),
and the pods' DNS names resolve through a hosts file over /etc/hosts in each host's mount
namespace. The hosts run the model the golden's plan.json names, and the map's weights
identity is checked against it (`moe ownership` on each host's copy) before the inferds start.

Faults: partition(a, b) / heal() (nftables drops between the two addresses, both directions, on
both hosts), loss(host, percent) (nftables numgen drops of TCP on eth0), bandwidth(host, gbit)
(tc tbf on both ends of the host's veth), kill9(host) (SIGKILL of every process in the host's
namespace, its /dev/shm holder included) and restart(host). wire_bytes(host): bytes in / out of the
host's eth0 (nftables counters), e.g. the RunExperts traffic of a request.

Clients: chat() / http() run a short client inside the host's namespace (a subprocess);
chat_inproc() / Host.request() / chat_stream() (SSE, close() = the client going away) /
metrics() do it in this process over a socket made in the namespace (setns in a thread), so
concurrent, streamed and cancelled requests carry this process's timestamps.

Cleanup: close() (also via `with`, atexit, SIGTERM/SIGINT/SIGHUP) stops the processes (SIGTERM to
each process group, then SIGKILL), kills whatever is left in the namespaces, deletes them (the
bridge and veths go with the switch namespace) and the temp dir. A reaper process (own session)
watches the harness by pidfd and does the same sweep if the harness dies without cleaning up
(SIGKILL, ctest timeout). At start, namespaces and temp dirs of this prefix are swept whose tag
is ours or whose owner pid (a tag's trailing digits) is dead.

Needs root, iproute2 (ip, tc), nft, unshare, nsenter. Python 3 stdlib only (--from-manifest:
PyYAML too).

CLI:
  fake_hosts.py up [--hosts N] [--peers] [--tag T] [--subnet K] [--build DIR] [--model DIR]
                   [--workers W] [--convert] [--inferd-arg FLAG ...] [--expertd-budget SIZE]
                   [--link-model] [--from-manifest multi-node]
        brings the cluster up, prints its layout (JSON) and waits for Ctrl-C / SIGTERM
        (MOE_FAKE_HOSTS_KEEP=1 keeps the temp dir with the configs and logs after cleanup)
  fake_hosts.py chat [--hosts N] [--prompt TEXT] [--max-tokens N] [...up's flags]
        up, one greedy chat completion to host 0's gateway from inside host 0, down
  fake_hosts.py sweep [--all]     removes stale namespaces/temp dirs (--all: every one of ours)
"""
import argparse
import atexit
import ctypes
import http.client
import json
import os
import re
import secrets
import select
import shlex
import shutil
import stat
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HOST_PREFIX = "moeh"     # host namespaces: moeh<i>-<tag>
SWITCH_PREFIX = "moesw"  # the switch namespace: moesw-<tag>
TMP_PREFIX = "moe-fakehosts-"
NS_RE = re.compile(rf"^(?:{HOST_PREFIX}(\d+)|{SWITCH_PREFIX})-([A-Za-z0-9_]+)$")
TAG_RE = re.compile(r"^[A-Za-z0-9_]{1,40}$")
GATEWAY_PORT = 8000
PEER_PORT = 7100
NFT_TABLE = "moe_fault"
CMD_TIMEOUT_S = 20  # every ip/tc/nft call


# --- The multi-host flags (the lead's inferd; docs/MULTIHOST.md). Only with peers=True. -----------
# (flag, value(cluster, host)): the one place to add, rename or drop one.
PEER_FLAGS = (
    ("--peer-listen", lambda c, h: f"{h.addr}:{c.peer_port}"),
    ("--peer-token-file", lambda c, h: c.token_file),
    ("--ownership-map", lambda c, h: c.ownership_map),
    ("--host-index", lambda c, h: str(h.index)),
    ("--peer-deadline-ms", lambda c, h: str(c.peer_deadline_ms)),
)


def OWNERSHIP_ARGV(c):  # noqa: N802 (a constant-like recipe beside PEER_FLAGS)
    """The command that writes the ownership map every host gets (run once, before the inferds)."""
    hosts = ",".join(f"{h.addr}:{c.peer_port}" for h in c.hosts)
    return [c.bin("tools/moe/moe"), "ownership", f"--model={c.hosts[0].model}", f"--hosts={hosts}",
            "--epoch=1", f"--out={c.ownership_map}"]


# --- The services' command lines (deploy/start.sh's arguments) -------------------------------------
def expertd_argv(c, h):
    return [c.bin("services/expertd/expertd"), "--config", h.conf, "--socket", h.expertd_sock]


def inferd_argv(c, h, w):
    argv = [c.bin("services/inferd/inferd"), "--config", h.conf, "--listen", f"unix:{h.inferd_sock(w)}",
            "--expertd", f"unix:{h.expertd_sock}"]
    if c.peers:
        argv += [f"{flag}={value(c, h)}" for flag, value in PEER_FLAGS]
    return argv + list(c.inferd_args) + list(c.host_inferd_args.get(h.index, ()))


def gateway_argv(c, h):
    return ([c.bin("services/gateway/gateway"), "--config", h.conf]
            + [f"--worker=unix:{h.inferd_sock(w)}" for w in range(c.workers)] + list(c.gateway_args))


def host_conf(c, h, template):
    """deploy/moestream.conf with this host's paths, as deploy/run.sh's awk writes it."""
    out, sec = [], None
    for line in template.splitlines():
        s = line.strip()
        if s.startswith("["):
            sec = s
            out.append(line)
            if sec == "[expertd]":
                out += [f"model = {h.model}", f"budget = {c.expertd_budget}"]
            continue
        key = s.split("=", 1)[0].strip() if "=" in s and not s.startswith("#") else None
        if sec == "[expertd]" and key in ("model", "budget"):
            continue
        if sec == "[inferd]" and key == "model":
            line = f"model = {h.model}"
        elif sec == "[gateway]" and key == "tokenizer":
            line = f"tokenizer = {h.model}"
        elif sec == "[gateway]" and key == "listen":
            line = f"listen = {h.addr}:{GATEWAY_PORT}"
        out.append(line)
    return "\n".join(out) + "\n"


# --- small helpers --------------------------------------------------------------------------------
class HarnessError(RuntimeError):
    pass


def sh(argv, check=True, timeout=CMD_TIMEOUT_S, input=None):
    """Runs a command (bounded); returns CompletedProcess with text stdout/stderr."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"timed out after {timeout} s: {' '.join(argv)}")
    if check and r.returncode != 0:
        raise HarnessError(f"{' '.join(argv)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()}")
    return r


def netns_list():
    r = sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def netns_pids(ns):
    r = sh(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_netns(ns, wait_s=5.0):
    """SIGKILL every process in namespace ns; waits (bounded) until they are gone."""
    me = os.getpid()
    deadline = time.time() + wait_s
    while True:
        pids = [p for p in netns_pids(ns) if p != me]
        if not pids:
            return True
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.time() > deadline:
            return False
        time.sleep(0.05)


def delete_netns(ns):
    kill_netns(ns)
    if ns in netns_list():
        sh(["ip", "netns", "del", ns], check=False)


def tag_owner_dead(tag):
    m = re.search(r"(\d+)$", tag)
    return bool(m) and not pid_alive(int(m.group(1)))


def sweep(tag=None, everything=False, log=None):
    """Deletes this harness's namespaces and temp dirs that are stale: tag == `tag`, the owner pid
    (the tag's trailing digits) dead, or every one with everything=True. Returns what went."""
    gone = []
    names = netns_list()
    stale_tags = set()
    for ns in names:
        m = NS_RE.match(ns)
        if m and (everything or m.group(2) == tag or tag_owner_dead(m.group(2))):
            stale_tags.add(m.group(2))
    # Kill processes of every stale namespace first (hosts, then switches), then delete them.
    stale = [ns for ns in names if NS_RE.match(ns) and NS_RE.match(ns).group(2) in stale_tags]
    stale.sort(key=lambda n: n.startswith(SWITCH_PREFIX))
    for ns in stale:
        kill_netns(ns)
    for ns in stale:
        delete_netns(ns)
        gone.append(ns)
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp):
        if not d.startswith(TMP_PREFIX):
            continue
        t = d[len(TMP_PREFIX):].split("-", 1)[0]
        if everything or t == tag or t in stale_tags or tag_owner_dead(t):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
            gone.append(os.path.join(tmp, d))
    if log and gone:
        log(f"swept {', '.join(gone)}")
    return gone


def ns_exec(ns, argv):
    return ["ip", "netns", "exec", ns] + list(argv)


# A tiny HTTP / TCP client run inside a namespace (sys.executable -c CLIENT JSON).
CLIENT = r"""
import json, socket, sys, urllib.request, urllib.error
a = json.loads(sys.argv[1])
if a["op"] == "http":
    req = urllib.request.Request(a["url"], method=a["method"],
        data=None if a["body"] is None else json.dumps(a["body"]).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=a["timeout"]) as r:
            st, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        st, raw = e.code, e.read()
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"})); sys.exit(0)
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        body = raw.decode("utf-8", "replace")
    print(json.dumps({"status": st, "body": body}))
else:
    s = socket.socket(); s.settimeout(a["timeout"])
    try:
        s.connect((a["addr"], a["port"])); r = "connected"
    except ConnectionRefusedError:
        r = "refused"
    except socket.timeout:
        r = "timeout"
    except OSError as e:
        r = f"error: {e}"
    print(json.dumps({"result": r}))
"""


# --- In-process clients: a socket made inside a host's network namespace --------------------------
# setns(CLONE_NEWNET) in a short-lived thread (a thread may switch its own network namespace; the
# socket it makes stays in that namespace for good, usable from any thread), so concurrent,
# streaming and cancelled requests run in this process with their own timestamps.
CLONE_NEWNET = 0x40000000
_libc = None


def connect_in_netns(ns, addr, port, timeout=10.0):
    """A TCP socket connected to addr:port from inside network namespace `ns`."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    out = {}

    def run():
        try:
            fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns({ns}): {os.strerror(e)}")
            finally:
                os.close(fd)
            out["sock"] = socket.create_connection((addr, port), timeout=timeout)
        except BaseException as e:  # reported to the caller
            out["error"] = e
    t = threading.Thread(target=run, name=f"connect-{ns}", daemon=True)
    t.start()
    t.join(timeout + 5)
    if "sock" in out:
        return out["sock"]
    raise out.get("error") or OSError(f"connect to {addr}:{port} in {ns}: no answer in {timeout} s")


class NetnsHTTPConnection(http.client.HTTPConnection):
    """http.client over a socket made in network namespace `ns` (timeout: connect and each read)."""

    def __init__(self, ns, host, port, timeout=30.0):
        super().__init__(host, port, timeout=timeout)
        self.ns = ns

    def connect(self):
        self.sock = connect_in_netns(self.ns, self.host, self.port, self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ChatStream:
    """A streaming chat completion (SSE): iterate for (time.monotonic(), chunk JSON) pairs (the
    final [DONE] ends the iteration); close() drops the connection (a client that goes away)."""

    def __init__(self, ns, url, body, timeout):
        u = urllib.parse.urlsplit(url)
        self.t_sent = time.monotonic()
        self.conn = NetnsHTTPConnection(ns, u.hostname, u.port or 80, timeout=timeout)
        self.conn.request("POST", u.path, body=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        if self.status != 200:
            raw = self.resp.read()
            self.close()
            try:
                self.error = json.loads(raw or b"null")
            except ValueError:
                self.error = raw.decode("utf-8", "replace")
        else:
            self.error = None

    def __iter__(self):
        if self.error is not None:
            return
        while True:
            line = self.resp.readline()
            if not line:
                return  # connection closed without [DONE]
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            yield time.monotonic(), json.loads(data)

    def close(self):
        """Closes the socket at once (RST-free FIN; the gateway sees the client gone)."""
        try:
            if self.conn.sock is not None:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def chat_body(prompt, max_tokens, stream=False, **extra):
    """A greedy chat completion request (thinking off), as chat() sends it."""
    body = {"model": "moestream", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


class Host:
    def __init__(self, cluster, index):
        self.cluster = cluster
        self.index = index
        self.ns = f"{HOST_PREFIX}{index}-{cluster.tag}"
        self.addr = f"10.77.{cluster.subnet}.{index + 1}"
        self.veth = f"h{index}"  # the switch side; the host side is eth0
        self.dir = os.path.join(cluster.tmp, f"host{index}")
        self.run_dir = os.path.join(self.dir, "run")
        self.model = os.path.join(self.dir, "model")
        self.conf = os.path.join(self.dir, "moestream.conf")
        self.expertd_sock = os.path.join(self.run_dir, "expertd.sock")
        self.holder = None
        self.procs = {}  # name -> Popen (in start order)
        # from_manifest: the rendered pods' processes (manifest.Service), the hosts file over
        # /etc/hosts and the directories mounted read-only in the host's mount namespace
        self.services = None
        self.inits = []
        self.empty_dirs = []
        self.hosts_file = None
        self.ro_dirs = ()
        self.ownership_map = self.token_file = None  # the init container's copies

    def inferd_sock(self, w):
        return os.path.join(self.run_dir, f"inferd{w}.sock")

    @property
    def has_gateway(self):
        return self.index in self.cluster.gateway_hosts

    @property
    def gateway_url(self):
        return f"http://{self.addr}:{GATEWAY_PORT}"

    def log_path(self, name):
        return os.path.join(self.run_dir, f"{name}.log")

    def exec(self, argv, timeout=CMD_TIMEOUT_S, check=True, input=None):
        """Runs argv in this host's network namespace (bounded)."""
        return sh(ns_exec(self.ns, argv), check=check, timeout=timeout, input=input)

    def exec_in(self, argv, timeout=CMD_TIMEOUT_S, check=True, env=None):
        """Runs argv as the host's processes run (its network and mount namespace: its /dev/shm,
        from_manifest its /etc/hosts and read-only dirs), bounded; env: added variables."""
        self.start_holder()
        pre = ["env"] + [f"{k}={v}" for k, v in env.items()] if env else []
        return sh(["nsenter", f"--target={self.holder.pid}", "--mount", "--net", "--"] + pre + list(argv),
                  check=check, timeout=timeout)

    # processes ------------------------------------------------------------------------------
    def holder_script(self):
        """The mount namespace's setup: its own /dev/shm (and from_manifest: the hosts file over
        /etc/hosts, read-only binds of the model and config directories), then sleep."""
        q = shlex.quote
        steps = ["mount -t tmpfs -o mode=1777 tmpfs /dev/shm"]
        if self.hosts_file:
            steps.append(f"mount --bind {q(self.hosts_file)} /etc/hosts")
        for d in self.ro_dirs:
            steps += [f"mount --bind {q(d)} {q(d)}", f"mount -o remount,bind,ro {q(d)}"]
        return " && ".join(steps + ["exec sleep 2147483647"])

    def start_holder(self):
        if self.holder and self.holder.poll() is None:
            return
        self.holder = subprocess.Popen(
            ns_exec(self.ns, ["unshare", "--mount", "--propagation", "private", "sh", "-c", self.holder_script()]),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.time() + 10
        while True:  # ready once sh has exec'd sleep (the mount succeeded)
            if self.holder.poll() is not None:
                raise HarnessError(f"{self.ns}: /dev/shm holder exited {self.holder.returncode}: "
                                   f"{self.holder.stderr.read().decode(errors='replace').strip()}")
            try:
                with open(f"/proc/{self.holder.pid}/comm") as f:
                    if f.read().strip() == "sleep":
                        return
            except OSError:
                pass
            if time.time() > deadline:
                raise HarnessError(f"{self.ns}: /dev/shm holder not ready in 10 s")
            time.sleep(0.02)

    def spawn(self, name, argv, env=None):
        """Starts argv as a process of this host: its network + mount namespace, own session
        (env: added to the environment, e.g. a container's)."""
        self.start_holder()
        log = open(self.log_path(name), "ab")
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive"), **(env or {})}
        env.update(self.cluster.env)
        try:
            p = subprocess.Popen(["nsenter", f"--target={self.holder.pid}", "--mount", "--net", "--"] + argv,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 cwd=self.run_dir, start_new_session=True)
        finally:
            log.close()
        self.procs[name] = p
        return p

    def check_alive(self, what):
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise HarnessError(f"{self.ns}: {name} exited {p.returncode} while waiting for {what}; "
                                   f"log tail:\n{self.log_tail(name)}")

    def log_tail(self, name, n=2000):
        try:
            with open(self.log_path(name), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode(errors="replace")
        except OSError as e:
            return f"(no log: {e})"

    def stop(self, grace_s=10.0):
        """SIGTERM to each process group (gateway, inferds, expertd), SIGKILL after grace_s; then
        SIGKILL of anything left in the namespace (the holder included)."""
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + grace_s
        for name, p in self.procs.items():
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        self.kill9()

    def kill9(self):
        """SIGKILL every process of this host (everything in its network namespace)."""
        kill_netns(self.ns)
        for p in list(self.procs.values()) + ([self.holder] if self.holder else []):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.holder and self.holder.stderr:
            self.holder.stderr.close()

    # probes ---------------------------------------------------------------------------------
    def _client(self, args, timeout):
        r = self.exec([sys.executable, "-c", CLIENT, json.dumps(args)], timeout=timeout + 10, check=False)
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise HarnessError(f"{self.ns}: client failed: exit {r.returncode}: {r.stderr.strip()[-500:]}")

    def http(self, url, body=None, method=None, timeout=30.0):
        """An HTTP request made from inside this host: (status, parsed JSON body); status None and
        body = the error text when no answer came."""
        r = self._client({"op": "http", "url": url, "body": body, "timeout": timeout,
                          "method": method or ("POST" if body is not None else "GET")}, timeout)
        if "error" in r:
            return None, r["error"]
        return r["status"], r["body"]

    def request(self, url, body=None, method=None, timeout=30.0):
        """Like http() but in this process (a socket made in this host's namespace; thread-safe,
        no subprocess): (status, parsed JSON or text body); status None and the error text when
        no answer came within timeout (connect and each read)."""
        u = urllib.parse.urlsplit(url)
        conn = NetnsHTTPConnection(self.ns, u.hostname, u.port or 80, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method or ("POST" if body is not None else "GET"), u.path or "/", body=data,
                         headers={"Content-Type": "application/json"} if data is not None else {})
            r = conn.getresponse()
            st, raw = r.status, r.read()
        except (OSError, http.client.HTTPException) as e:
            return None, f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        try:
            return st, json.loads(raw or b"null")
        except ValueError:
            return st, raw.decode("utf-8", "replace")

    def tcp_probe(self, addr, port=PEER_PORT, timeout=1.0):
        """'connected', 'refused' (a RST: reachable, nothing listening), 'timeout' or 'error: ...'."""
        return self._client({"op": "tcp", "addr": addr, "port": port, "timeout": timeout}, timeout)["result"]


class FakeCluster:
    def __init__(self, n_hosts=2, *, build=None, model=None, tag=None, subnet=1, peers=False,
                 workers=1, gateway_hosts=(0,), expertd_budget="256M", inferd_args=(),
                 host_inferd_args=None, gateway_args=(), peer_port=PEER_PORT, peer_deadline_ms=250,
                 start_timeout=90.0, env=None, convert=False, reaper=True, log=None, link_model=False,
                 from_manifest=None):
        if not 1 <= n_hosts <= 250:
            raise ValueError("1..250 hosts")
        self.from_manifest = from_manifest
        self.manifest = None
        if from_manifest:
            # The rendered pods (manifest.py): one LWS group, its leader the one gateway, one
            # inferd per pod, the golden's peer flags (peers=True means nothing more here).
            try:
                import manifest as manifest_mod
                self.manifest = manifest_mod.Manifest(from_manifest)
            except ImportError as e:
                raise HarnessError(f"--from-manifest needs PyYAML and tests/k8s of this checkout: {e}")
            except (RuntimeError, OSError, KeyError, ValueError) as e:
                raise HarnessError(f"--from-manifest {from_manifest}: {e}")
            if n_hosts != self.manifest.size:
                raise HarnessError(f"--from-manifest {from_manifest}: its LeaderWorkerSet has {self.manifest.size} "
                                   f"pods per group, so {self.manifest.size} hosts (not {n_hosts})")
            if convert or (model and os.path.realpath(model) != os.path.realpath(self.manifest.model_dir)):
                raise HarnessError(f"--from-manifest {from_manifest}: the hosts run the model its plan.json names "
                                   f"({os.path.relpath(self.manifest.model_dir, ROOT)}), not another")
            model, peers, workers, gateway_hosts = self.manifest.model_dir, True, 1, (0,)
        self.tag = tag or str(os.getpid())
        if not TAG_RE.match(self.tag):
            raise ValueError(f"tag {self.tag!r}: letters, digits, _ only")
        self.n_hosts = n_hosts
        self.build = os.path.abspath(build or os.environ.get("MOE_BUILD_DIR") or os.path.join(ROOT, "build"))
        self.model_src = model
        self.convert = convert
        self.subnet = int(subnet)
        self.peers = peers
        self.workers = workers
        self.gateway_hosts = tuple(gateway_hosts)
        self.expertd_budget = expertd_budget
        self.link_model = link_model
        self.inferd_args = tuple(inferd_args)
        self.host_inferd_args = dict(host_inferd_args or {})
        self.gateway_args = tuple(gateway_args)
        self.peer_port = peer_port
        self.peer_deadline_ms = peer_deadline_ms
        self.start_timeout = start_timeout
        self.env = dict(env or {})
        self.use_reaper = reaper
        self.log = log or (lambda m: print(f"[fake_hosts] {m}", file=sys.stderr, flush=True))
        self.switch = f"{SWITCH_PREFIX}-{self.tag}"
        self.tmp = None
        self.hosts = []
        self.token_file = None
        self.ownership_map = None
        self.reaper = None
        self.map_weights = None  # from_manifest: the weights identity the rendered maps and the model share
        self._closed = False
        self._created_ns = []
        self._faults = set()  # ("part", a, b)

    def bin(self, rel):
        return os.path.join(self.build, rel)

    # lifecycle --------------------------------------------------------------------------------
    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def up(self):
        atexit.register(self.close)
        _install_signal_handlers()
        sweep(self.tag, log=self.log)
        self.tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{self.tag}-")
        if self.use_reaper:
            self._start_reaper()
        self.hosts = [Host(self, i) for i in range(self.n_hosts)]
        t0 = time.time()
        src = self._container()
        if self.link_model and os.stat(src).st_dev != os.stat(self.tmp).st_dev:
            raise HarnessError(f"link_model: {src} and {self.tmp} are on different file systems (hard links "
                               f"need one): set TMPDIR to a directory beside the model")
        self._network()
        with open(os.path.join(ROOT, "deploy", "moestream.conf")) as f:
            template = f.read()
        for h in self.hosts:
            os.makedirs(h.run_dir)
            # link_model: hard links (a GB container on the same file system: no copy, one page
            # cache for every host); else a copy (the small demo container).
            shutil.copytree(src, h.model, ignore=shutil.ignore_patterns(".moestream-verified"),
                            copy_function=os.link if self.link_model else shutil.copy2)
            if self.manifest is None:
                with open(h.conf, "w") as f:
                    f.write(host_conf(self, h, template))
        if self.manifest is not None:
            self._manifest_files()
        elif self.peers:
            self.token_file = os.path.join(self.tmp, "peer-token")
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            self.ownership_map = os.path.join(self.tmp, "ownership.json")
            r = sh(OWNERSHIP_ARGV(self), check=False, timeout=120)
            if r.returncode != 0:
                raise HarnessError(f"moe ownership: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-1000:]}")
        self.start_services(self.hosts)
        self.log(f"{self.n_hosts} fake host(s) up in {time.time() - t0:.1f} s (tag {self.tag}, dir {self.tmp})")
        return self

    def close(self):
        """Idempotent: processes, namespaces, temp dir, reaper. Never raises."""
        if self._closed:
            return
        self._closed = True
        errors = []
        for h in self.hosts:
            try:
                h.stop()
            except Exception as e:  # keep cleaning up
                errors.append(f"{h.ns}: {e}")
        for ns in [h.ns for h in self.hosts] + [self.switch]:
            try:
                delete_netns(ns)
            except Exception as e:
                errors.append(f"{ns}: {e}")
        try:
            left = [ns for ns in netns_list() if NS_RE.match(ns) and NS_RE.match(ns).group(2) == self.tag]
            for ns in left:
                delete_netns(ns)
        except Exception as e:
            errors.append(str(e))
        if self.tmp and os.environ.get("MOE_FAKE_HOSTS_KEEP") != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self.reaper and self.reaper.poll() is None:
            self.reaper.kill()
            try:
                self.reaper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if errors:
            self.log("cleanup problems: " + "; ".join(errors))

    def _start_reaper(self):
        self.reaper = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "_reap", "--parent", str(os.getpid()), "--tag", self.tag],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def _container(self):
        """The container every host copies: --model, else the committed demo container
        (models/glm-tiny-chat-q4), else (or with convert=True) `moe convert` of models/glm-tiny-chat."""
        if self.model_src and not self.convert:
            return os.path.abspath(self.model_src)
        committed = os.path.join(ROOT, "models", "glm-tiny-chat-q4")
        if not self.convert and os.path.isfile(os.path.join(committed, "moestream.json")):
            return committed
        src = os.path.abspath(self.model_src or os.path.join(ROOT, "models", "glm-tiny-chat"))
        out = os.path.join(self.tmp, "container")
        r = sh([self.bin("tools/moe/moe"), "convert", f"--in={src}", f"--out={out}"], check=False, timeout=300)
        if r.returncode != 0:
            raise HarnessError(f"moe convert: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-1000:]}")
        return out

    def _network(self):
        def add_ns(ns):
            sh(["ip", "netns", "add", ns])
            self._created_ns.append(ns)
        add_ns(self.switch)
        sh(["ip", "-n", self.switch, "link", "set", "lo", "up"])
        sh(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
        sh(["ip", "-n", self.switch, "link", "set", "br0", "up"])
        for h in self.hosts:
            add_ns(h.ns)
            sh(["ip", "-n", self.switch, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0",
                "netns", h.ns])
            sh(["ip", "-n", self.switch, "link", "set", h.veth, "master", "br0", "up"])
            sh(["ip", "-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", "eth0"])
            sh(["ip", "-n", h.ns, "link", "set", "eth0", "up"])
            sh(["ip", "-n", h.ns, "link", "set", "lo", "up"])
            h.exec(["nft", "-f", "-"], input=(
                f"table inet {NFT_TABLE} {{\n"
                "  chain input { type filter hook input priority 0; policy accept;\n"
                '    iifname "eth0" counter comment "wire:rx"\n  }\n'
                "  chain output { type filter hook output priority 0; policy accept;\n"
                '    oifname "eth0" counter comment "wire:tx"\n  }\n'
                "}\n"))

    def start_services(self, hosts):
        """expertd on every host, then the inferds, then the gateways (each stage in parallel over
        the hosts); bounded by start_timeout."""
        if self.manifest is not None:
            return self._start_pods(hosts)
        deadline = time.time() + self.start_timeout

        def wait(cond, what):
            while not cond():
                for h in hosts:
                    h.check_alive(what)
                if time.time() > deadline:
                    raise HarnessError(f"timed out ({self.start_timeout:.0f} s) waiting for {what}")
                time.sleep(0.05)

        for h in hosts:
            if os.path.exists(h.expertd_sock):
                os.unlink(h.expertd_sock)
            h.spawn("expertd", expertd_argv(self, h))
        wait(lambda: all(os.path.exists(h.expertd_sock) for h in hosts), "expertd sockets")
        for h in hosts:
            for w in range(self.workers):
                if os.path.exists(h.inferd_sock(w)):
                    os.unlink(h.inferd_sock(w))
                h.spawn(f"inferd{w}", inferd_argv(self, h, w))
        wait(lambda: all(os.path.exists(h.inferd_sock(w)) for h in hosts for w in range(self.workers)),
             "inferd sockets")
        gws = [h for h in hosts if h.has_gateway]
        for h in gws:
            h.spawn("gateway", gateway_argv(self, h))

        def healthy(h):
            st, j = h.http(h.gateway_url + "/health", timeout=2)
            return st == 200 and isinstance(j, dict) and j.get("workers_alive") == self.workers
        pending = list(gws)

        def all_healthy():
            pending[:] = [h for h in pending if not healthy(h)]
            return not pending
        wait(all_healthy, "gateway /health with every worker alive")

    # from_manifest ------------------------------------------------------------------------------
    def _manifest_files(self):
        """Each host's volumes (ConfigMap files, the token Secret, the hosts file) and its
        processes from the golden (manifest.py)."""
        m = self.manifest
        token = secrets.token_hex(32) + "\n"  # one Secret for the whole group
        hosts_text = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + "".join(
            f"{self.hosts[i].addr}\t{' '.join(names)}\n" for i, names in m.dns())
        for h in self.hosts:
            try:
                vols = m.volumes(h.index, h.dir)
                h.services = m.services(h.index, h.addr, h.dir, self.build)
                h.inits = m.init_containers(h.index, h.addr, h.dir)
            except RuntimeError as e:
                raise HarnessError(f"{h.ns}: {e}")
            for local, files in vols["config"]:
                os.makedirs(local, exist_ok=True)
                for name, text in files.items():
                    with open(os.path.join(local, name), "w") as f:
                        f.write(text)
            for local, mode in vols["secret"]:
                os.makedirs(local, exist_ok=True)
                fd = os.open(os.path.join(local, "token"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(token)
                os.chmod(os.path.join(local, "token"), mode)
            h.empty_dirs = vols["empty"]
            h.ro_dirs = tuple(vols["readonly"])
            h.hosts_file = os.path.join(h.dir, "hosts")
            with open(h.hosts_file, "w") as f:
                f.write(hosts_text)
            h.conf = (h.services[0].flag("config") or [None])[0]  # the ConfigMap's moestream.conf
            inferd = [s for s in h.services if s.binary == "inferd"]
            h.ownership_map = (inferd[0].flag("ownership-map") or [None])[0] if inferd else None
            h.token_file = (inferd[0].flag("peer-token-file") or [None])[0] if inferd else None
            gw = [s for s in h.services if s.binary == "gateway"]
            if gw and gw[0].port("http") != GATEWAY_PORT:
                raise HarnessError(f"{h.ns}: the gateway's port is {gw[0].port('http')}, the harness uses {GATEWAY_PORT}")
            if bool(gw) != h.has_gateway:
                raise HarnessError(f"{h.ns}: {'a' if gw else 'no'} gateway in its pods")
        self.ownership_map, self.token_file = self.hosts[0].ownership_map, self.hosts[0].token_file

    def _run_inits(self, h):
        """The host's init containers, as written, in its namespaces (a pod (re)start: its
        emptyDirs fresh)."""
        for d in h.empty_dirs:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        for name, argv, env in h.inits:
            r = h.exec_in(argv, check=False, timeout=30, env=env)
            with open(h.log_path(name), "a") as f:
                f.write(r.stdout + r.stderr)
            if r.returncode != 0:
                raise HarnessError(f"{h.ns}: init container {name} exited {r.returncode}: "
                                   f"{(r.stderr or r.stdout).strip()[-1000:]}")

    def _check_maps(self, hosts):
        """Each rendered map names the model the host runs: `moe ownership` of the host's copy for
        the map's hosts gives the same weights identity and layer shape."""
        for h in hosts:
            if not h.ownership_map:
                continue
            with open(h.ownership_map) as f:
                got = json.load(f)
            try:
                fresh = self.manifest.fresh_map(self.bin("tools/moe/moe"), h.model, got["hosts"], got["epoch"])
            except (RuntimeError, OSError, KeyError) as e:
                raise HarnessError(f"{h.ns}: moe ownership of its model: {e}")
            if fresh["weights"] != got.get("weights") or \
                    [len(r) for r in fresh["owner"]] != [len(r) for r in got.get("owner", [])]:
                raise HarnessError(f"{h.ns}: {h.ownership_map} is for weights {got.get('weights')}, the host's model "
                                   f"is {fresh['weights']} (tools/k8s/ownership_template.py)")
            if self.map_weights not in (None, got["weights"]):
                raise HarnessError(f"{h.ns}: map weights {got['weights']}, another host's {self.map_weights}")
            self.map_weights = got["weights"]

    def _ready(self, h, svc):
        """The container's readinessProbe (exec `test -S`, tcpSocket, httpGet on the pod IP), and
        for the gateway every --worker alive on /health."""
        p = svc.probe
        if "exec" in p:
            cmd = p["exec"]["command"]
            if len(cmd) == 3 and cmd[:2] == ["test", "-S"]:
                try:
                    return stat.S_ISSOCK(os.stat(cmd[2]).st_mode)
                except OSError:
                    return False
            return h.exec_in(cmd, check=False, timeout=10).returncode == 0
        if "tcpSocket" in p:
            try:
                connect_in_netns(h.ns, p["tcpSocket"].get("host", h.addr), svc.port(p["tcpSocket"]["port"]), 1.0).close()
                return True
            except OSError:
                return False
        if "httpGet" in p:
            g = p["httpGet"]
            st, j = h.request(f"http://{g.get('host', h.addr)}:{svc.port(g['port'])}{g.get('path', '/')}", timeout=2)
            if st is None or not 200 <= st < 400:
                return False
            if svc.binary == "gateway":
                return isinstance(j, dict) and j.get("workers_alive") == len(svc.flag("worker"))
            return True
        raise HarnessError(f"{h.ns}: {svc.pod} container {svc.container['name']}: no readinessProbe the harness knows")

    def _start_pods(self, hosts):
        """The hosts' init containers, the map check, then expertd on every host, the inferds, the
        gateway (each stage once the one before is ready by its readinessProbe); bounded by
        start_timeout."""
        deadline = time.time() + self.start_timeout
        for h in hosts:
            self._run_inits(h)
        self._check_maps(hosts)
        for stage in ("expertd", "inferd", "gateway"):
            started = []
            for h in hosts:
                for svc in h.services:
                    if svc.binary != stage:
                        continue
                    for a in svc.flag("socket") + [x[5:] for x in svc.flag("listen") if x.startswith("unix:")]:
                        if os.path.exists(a):
                            os.unlink(a)
                    extra = {"inferd": list(self.inferd_args) + list(self.host_inferd_args.get(h.index, ())),
                             "gateway": list(self.gateway_args)}.get(stage, [])  # none unless asked for
                    name = "inferd0" if stage == "inferd" else stage
                    h.spawn(name, svc.argv + extra, env=svc.env)
                    started.append((h, svc))
            pending = list(started)
            while pending:
                pending = [(h, svc) for h, svc in pending if not self._ready(h, svc)]
                if not pending:
                    break
                for h in hosts:
                    h.check_alive(f"{stage}'s readinessProbe")
                if time.time() > deadline:
                    raise HarnessError(f"timed out ({self.start_timeout:.0f} s) waiting for the readinessProbe of "
                                       + ", ".join(f"{h.ns} {svc.name}" for h, svc in pending))
                time.sleep(0.05)

    # requests -----------------------------------------------------------------------------------
    def chat(self, prompt, max_tokens=16, host=0, from_host=None, timeout=60.0, **extra):
        """A greedy chat completion to `host`'s gateway, sent from inside `from_host` (default the
        same host): (status, JSON)."""
        src = self.hosts[host if from_host is None else from_host]
        return src.http(self.hosts[host].gateway_url + "/v1/chat/completions",
                        chat_body(prompt, max_tokens, **extra), timeout=timeout)

    def chat_inproc(self, prompt, max_tokens=16, host=0, from_host=None, timeout=60.0, **extra):
        """chat() made in this process (thread-safe; for concurrent requests)."""
        src = self.hosts[host if from_host is None else from_host]
        return src.request(self.hosts[host].gateway_url + "/v1/chat/completions",
                           chat_body(prompt, max_tokens, **extra), timeout=timeout)

    def chat_stream(self, prompt, max_tokens=16, host=0, from_host=None, timeout=60.0, **extra):
        """A streaming greedy chat completion (ChatStream: iterate, close)."""
        src = self.hosts[host if from_host is None else from_host]
        return ChatStream(src.ns, self.hosts[host].gateway_url + "/v1/chat/completions",
                          chat_body(prompt, max_tokens, stream=True, **extra), timeout)

    def gateway_get(self, path, host=0, timeout=5.0):
        """GET path (/health, /metrics, /admin/workers) of host's gateway, from inside it."""
        h = self.hosts[host]
        return h.request(h.gateway_url + path, timeout=timeout)

    def metrics(self, host=0, timeout=5.0):
        """host's gateway /metrics parsed: {'name{labels}': value} (labels as rendered)."""
        st, text = self.gateway_get("/metrics", host, timeout)
        if st != 200 or not isinstance(text, str):
            raise HarnessError(f"{self.hosts[host].ns}: /metrics: HTTP {st}: {str(text)[:300]}")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, val = line.rpartition(" ")
                try:
                    out[key] = float(val)
                except ValueError:
                    pass
        return out

    def reachable(self, a, b, port=PEER_PORT, timeout=1.0):
        """Whether host a gets an answer (a connection or a RST) from host b's address on port."""
        return self.hosts[a].tcp_probe(self.hosts[b].addr, port, timeout) in ("connected", "refused")

    # faults -------------------------------------------------------------------------------------
    def _nft_rule(self, h, chain, rule, comment):
        h.exec(["nft", "add", "rule", "inet", NFT_TABLE, chain] + rule.split() + ["comment", f'"{comment}"'])

    def _nft_delete(self, h, drop):
        """Deletes h's fault rules (comment part:* or loss) for which drop(comment) is true."""
        r = h.exec(["nft", "-j", "-a", "list", "table", "inet", NFT_TABLE])
        for item in json.loads(r.stdout).get("nftables", []):
            rule = item.get("rule")
            c = (rule or {}).get("comment", "")
            if (c.startswith("part:") or c == "loss") and drop(c):
                h.exec(["nft", "delete", "rule", "inet", NFT_TABLE, rule["chain"], "handle", str(rule["handle"])])

    def wire_bytes(self, host):
        """{'rx': bytes, 'tx': bytes} the host's eth0 received / sent since it was made (IP
        packets at the nftables hooks, counted before any fault drops them)."""
        r = self.hosts[host].exec(["nft", "-j", "list", "table", "inet", NFT_TABLE])
        out = {"rx": 0, "tx": 0}
        for item in json.loads(r.stdout).get("nftables", []):
            rule = item.get("rule") or {}
            if rule.get("comment", "").startswith("wire:"):
                for e in rule.get("expr", []):
                    if "counter" in e:
                        out[rule["comment"][5:]] = e["counter"]["bytes"]
        return out

    def partition(self, a, b):
        """Drops every packet between hosts a and b (both directions, rules on both hosts)."""
        a, b = sorted((a, b))
        if a == b or ("part", a, b) in self._faults:
            return
        tag = f"part:{a}:{b}"
        for x, y in ((a, b), (b, a)):
            hx, hy = self.hosts[x], self.hosts[y]
            self._nft_rule(hx, "input", f"iifname eth0 ip saddr {hy.addr} drop", tag)
            self._nft_rule(hx, "output", f"oifname eth0 ip daddr {hy.addr} drop", tag)
        self._faults.add(("part", a, b))

    def heal(self, a=None, b=None):
        """Removes the partition between a and b, or with no arguments every partition (loss and
        bandwidth caps stay: loss(h, 0), bandwidth(h, None), clear_faults())."""
        pair = None if a is None else tuple(sorted((a, b)))
        for h in self.hosts:
            self._nft_delete(h, lambda c: c.startswith("part:") and
                             (pair is None or c == f"part:{pair[0]}:{pair[1]}"))
        self._faults = {f for f in self._faults if pair is not None and f[1:] != pair}

    def loss(self, host, percent, direction="both"):
        """Drops `percent` % (0.01 steps) of the host's TCP packets on eth0: in, out or both;
        percent 0 removes it."""
        h = self.hosts[host]
        self._nft_delete(h, lambda c: c == "loss")
        p = int(round(float(percent) * 100))
        if not 0 <= p <= 10000:
            raise ValueError("percent 0..100")
        if p == 0:
            return
        match = "meta l4proto tcp " + (f"numgen random mod 10000 < {p} " if p < 10000 else "") + "drop"
        if direction in ("both", "in"):
            self._nft_rule(h, "input", f"iifname eth0 {match}", "loss")
        if direction in ("both", "out"):
            self._nft_rule(h, "output", f"oifname eth0 {match}", "loss")

    def bandwidth(self, host, gbit):
        """Caps the host's link at gbit Gbit/s each way (tc tbf on eth0 and on its switch port);
        None removes the cap."""
        h = self.hosts[host]
        ends = (lambda argv: h.exec(argv, check=gbit is not None),
                lambda argv: sh(ns_exec(self.switch, argv), check=gbit is not None))
        for run, dev in zip(ends, ("eth0", h.veth)):
            if gbit is None:
                run(["tc", "qdisc", "del", "dev", dev, "root"])
                continue
            rate = int(float(gbit) * 1e9)
            burst = max(64 * 1024, rate // 8 // 1000)  # 1 ms of the rate, at least a 64 KiB GSO packet
            run(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate}bit",
                 "burst", str(burst), "latency", "20ms"])

    def clear_faults(self):
        for i, h in enumerate(self.hosts):
            self._nft_delete(h, lambda c: True)
            self.bandwidth(i, None)
        self._faults.clear()

    def kill9(self, host):
        """SIGKILL every process of the host (services and its /dev/shm holder)."""
        self.hosts[host].kill9()

    def restart(self, host):
        """Starts a killed (or stopped) host's processes again (fresh /dev/shm)."""
        h = self.hosts[host]
        h.stop(grace_s=5)
        h.procs = {}
        self.start_services([h])

    def describe(self):
        out = {"tag": self.tag, "switch": self.switch, "dir": self.tmp, "peers": self.peers,
               "from_manifest": self.from_manifest,
               "hosts": [{"index": h.index, "netns": h.ns, "addr": h.addr, "run_dir": h.run_dir,
                          "model": h.model, "conf": h.conf, "gateway": h.gateway_url if h.has_gateway else None,
                          "pids": {n: p.pid for n, p in h.procs.items()}} for h in self.hosts]}
        if self.manifest is not None:
            out["golden"] = os.path.relpath(self.manifest.golden, ROOT)
            out["map_weights"] = self.map_weights
            for d, h in zip(out["hosts"], self.hosts):
                d["argv"] = {s.binary: s.argv for s in h.services}
                d["ownership_map"], d["token_file"], d["hosts_file"] = h.ownership_map, h.token_file, h.hosts_file
        return out


_handlers_installed = False


def _install_signal_handlers():
    """SIGTERM/SIGHUP become SystemExit (so finally blocks and atexit run); main thread only."""
    global _handlers_installed
    if _handlers_installed:
        return
    import threading
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) in (signal.SIG_DFL, None):
            signal.signal(s, on_signal)
    _handlers_installed = True


def can_run():
    """(True, '') when this machine can make fake hosts, else (False, why)."""
    if os.geteuid() != 0:
        return False, "not root (network namespaces need CAP_SYS_ADMIN/CAP_NET_ADMIN)"
    for tool in ("ip", "tc", "nft", "unshare", "nsenter"):
        if not shutil.which(tool):
            return False, f"no {tool} on PATH"
    probe = f"{HOST_PREFIX}0-probe{os.getpid()}"  # a name sweep() knows
    try:
        r = sh(["ip", "netns", "add", probe], check=False)
        if r.returncode != 0:
            return False, f"`ip netns add` failed: {r.stderr.strip()}"
        r = sh(ns_exec(probe, ["nft", "add", "table", "inet", NFT_TABLE]), check=False)
        if r.returncode != 0:
            return False, f"nft in a namespace failed: {r.stderr.strip()}"
        r = sh(ns_exec(probe, ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs tmpfs /dev/shm"]), check=False)
        if r.returncode != 0:
            return False, f"a private tmpfs /dev/shm failed: {r.stderr.strip()}"
    except HarnessError as e:
        return False, str(e)
    finally:
        sh(["ip", "netns", "del", probe], check=False)
    return True, ""


def _reap(parent, tag):
    """The reaper: waits for the harness to exit, then sweeps its tag (it is SIGKILLed by a
    harness that cleaned up itself)."""
    try:
        fd = os.pidfd_open(parent)
    except (ProcessLookupError, OSError):
        fd = None
    if fd is not None:
        p = select.poll()
        p.register(fd, select.POLLIN)
        while not p.poll(60_000):
            pass
    else:
        while pid_alive(parent):
            time.sleep(0.5)
    time.sleep(0.5)
    sweep(tag)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "chat"):
        p = sub.add_parser(name)
        p.add_argument("--hosts", type=int, default=2)
        p.add_argument("--peers", action="store_true", help="pass the multi-host inferd flags (PEER_FLAGS)")
        p.add_argument("--tag")
        p.add_argument("--subnet", type=int, default=1)
        p.add_argument("--build", default=os.path.join(ROOT, "build"))
        p.add_argument("--model", help="container (default: the committed demo container)")
        p.add_argument("--convert", action="store_true", help="moe convert --model (or models/glm-tiny-chat)")
        p.add_argument("--workers", type=int, default=1)
        p.add_argument("--start-timeout", type=float, default=120)
        p.add_argument("--inferd-arg", action="append", default=[], help="extra inferd flag (repeatable)")
        p.add_argument("--expertd-budget", default="256M", help="expertd's budget in each host's config")
        p.add_argument("--link-model", action="store_true",
                       help="hard-link the container into each host's dir instead of copying it (same file system)")
        p.add_argument("--from-manifest", metavar="OVERLAY",
                       help="run the pods the golden of OVERLAY renders (multi-node: --hosts = its LWS size)")
        if name == "chat":
            p.add_argument("--prompt", default="Who are you?")
            p.add_argument("--max-tokens", type=int, default=32)
            p.add_argument("--from-host", type=int, default=0)
    p = sub.add_parser("sweep")
    p.add_argument("--all", action="store_true", help="every namespace/temp dir of this prefix")
    p = sub.add_parser("_reap")
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--tag", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "_reap":
        _reap(a.parent, a.tag)
        return 0
    if a.cmd == "sweep":
        for g in sweep(None, everything=a.all):
            print(f"removed {g}")
        return 0
    ok, why = can_run()
    if not ok:
        print(f"fake_hosts: cannot make fake hosts here: {why}", file=sys.stderr)
        return 77
    kw = dict(build=a.build, model=a.model, tag=a.tag, subnet=a.subnet, peers=a.peers, workers=a.workers,
              convert=a.convert, start_timeout=a.start_timeout, inferd_args=a.inferd_arg,
              expertd_budget=a.expertd_budget, link_model=a.link_model, from_manifest=a.from_manifest)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _cli_run(a, kw)
    except HarnessError as e:
        print(f"fake_hosts: {e}", file=sys.stderr)
        return 1


def _cli_run(a, kw):
    with FakeCluster(a.hosts, **kw) as c:
        if a.cmd == "chat":
            st, j = c.chat(a.prompt, a.max_tokens, from_host=a.from_host)
            print(json.dumps({"status": st, "body": j}, ensure_ascii=False, indent=1))
            return 0 if st == 200 else 1
        print(json.dumps(c.describe(), indent=1), flush=True)
        print(f"up; e.g. ip netns exec {c.hosts[0].ns} curl -s {c.hosts[0].gateway_url}/health ; "
              "Ctrl-C to stop", file=sys.stderr, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
