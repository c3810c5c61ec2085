#!/usr/bin/env python3
"""The flags the manifests give the binaries exist: every `--flag` in the args of every
expertd / inferd / gateway container of every golden, and every key of the rendered
moestream.conf (each `key = value` of a [section] becomes `--key=value` for that service,
common/base/config_file.h), is a flag the service registers in its source
(`flags.Add<Type>("name", ...)`, read with a regular expression: no build needed), and its
value parses as that type (bool, int, bytes). `--config` is ArgsWithConfig's; `--no-X` negates
a bool.

    tests/k8s/flags_test.py [BUILD_DIR]

With BUILD_DIR holding the built services (services/<svc>/<svc>), each container's args (the
config file written to a temporary file, $(VAR)s of the pod's environment filled in: the pod IP,
LWS's labels and env of group 0) are also
given to the real binary with --help: FlagSet parses the config section and every flag, and
exits 2 naming an unknown flag or a bad value before it prints the usage."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import k8s_common as k  # noqa: E402
from policy_test import Overlay, binary_of  # noqa: E402

# Where each service's FlagSet gets its flags (main files, the shared engine flags, the
# --log-level every service main adds).
SOURCES = {
    "expertd": ["services/expertd/main.cc", "common/base/service_main.cc"],
    "inferd": ["services/inferd/service.cc", "services/inferd/main.cc", "common/model/engine_flags.cc",
               "services/peer/peer_flags.cc", "common/base/service_main.cc"],
    "gateway": ["services/gateway/main.cc", "common/base/service_main.cc"],
}
ADD = re.compile(r"\.\s*Add(String|Int|Double|Bool|Bytes|StringList)\s*\(\s*\"([a-z0-9][a-z0-9-]*)\"")
BYTES = re.compile(r"^[0-9]+(\.[0-9]+)?[KMGT]?$")


def registered_flags():
    flags, problems = {}, []
    for svc, files in SOURCES.items():
        flags[svc] = {}
        for rel in files:
            path = os.path.join(k.ROOT, rel)
            if not os.path.exists(path):
                problems.append(f"{rel} (a source of {svc}'s flags) is gone: update SOURCES in {__file__}")
                continue
            found = ADD.findall(open(path).read())
            if not found:
                problems.append(f"{rel} registers no flags any more: update SOURCES in {__file__}")
            for typ, name in found:
                flags[svc][name] = typ
    # The wiring SOURCES assumes: each main parses with ParseServiceFlags, inferd's flags include
    # the factory's (main.cc), whose engine flags are EngineFlags::Register's.
    checks = [("services/expertd/main.cc", 'ParseServiceFlags("expertd"'),
              ("services/gateway/main.cc", 'ParseServiceFlags("gateway"'),
              ("services/inferd/service.cc", 'ParseServiceFlags("inferd"'),
              ("services/inferd/service.cc", "factory.AddFlags(flags)"),
              ("services/inferd/main.cc", "engine_.Register(f"),
              ("services/inferd/main.cc", "peers_.Register(f)"),
              ("common/base/service_main.cc", "ArgsWithConfig(argc, argv, service)"),
              ("common/base/config_file.cc", '"--config="')]
    for rel, needle in checks:
        p = os.path.join(k.ROOT, rel)
        if not os.path.exists(p) or needle not in open(p).read():
            problems.append(f"{rel} no longer contains {needle!r}: the flag sources of {__file__} need a look")
    return flags, problems


def parse_args(args):
    """[(name, value or None)] of FlagSet-style args; positional arguments as (None, arg)."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and len(a) > 2:
            name, eq, val = a[2:].partition("=")
            out.append((name, val if eq else None))
        else:
            out.append((None, a))
        i += 1
    return out


def check_value(typ, name, val, who, problems):
    if val is None or "$(" in val:
        return
    ok = {"Bool": lambda v: v in ("true", "false"),
          "Int": lambda v: re.fullmatch(r"-?[0-9]+", v),
          "Double": lambda v: re.fullmatch(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", v),
          "Bytes": lambda v: BYTES.fullmatch(v)}.get(typ, lambda v: True)(val)
    if not ok:
        problems.append(f"{who}: --{name}={val} is not a valid {typ.lower()}")


def check_flag(flags, svc, name, val, who, problems):
    if name == "config":
        return
    typ = flags[svc].get(name)
    if typ is None and name.startswith("no-") and flags[svc].get(name[3:]) == "Bool" and val is None:
        return
    if typ is None:
        close = [f for f in flags[svc] if f.replace("-", "") == name.replace("-", "") or f.startswith(name[:4])]
        problems.append(f"{who}: --{name} is not a flag of {svc}" + (f" (did you mean --{close[0]}?)" if close else ""))
        return
    if val is None and typ != "Bool":
        problems.append(f"{who}: --{name} needs a value (give --{name}=VALUE: the manifests use one arg per flag)")
    check_value(typ, name, val, who, problems)


def run_binaries(build, goldens, problems):
    ran = 0
    for overlay, docs in goldens.items():
        o = Overlay(overlay, docs)
        with tempfile.TemporaryDirectory() as tmp:
            conf = os.path.join(tmp, "moestream.conf")
            with open(conf, "w") as f:
                f.write(o.conf)
            for where, role, t, d in o.pods:
                for c in k.containers(t["spec"]):
                    svc = binary_of(c)
                    if not svc:
                        continue
                    exe = os.path.join(build, "services", svc, svc)
                    env = k.pod_env(d, role, c, t, {"POD_IP": "127.0.0.1"})
                    args = []
                    for a in c.get("args", []):
                        a = k.expand(a, env)
                        args.append(f"--config={conf}" if a.startswith("--config=") else a)
                    r = subprocess.run([exe] + args + ["--help"], capture_output=True, text=True, timeout=60)
                    ran += 1
                    if r.returncode != 0:
                        problems.append(f"{overlay}: {where} {svc}: {exe} {' '.join(args)} --help exited {r.returncode}: "
                                        f"{(r.stderr or r.stdout).strip().splitlines()[:1]}")
    return ran


def main():
    flags, problems = registered_flags()
    goldens = k.load_goldens()
    checked = 0
    for overlay, docs in goldens.items():
        o = Overlay(overlay, docs)
        for where, role, t, d in o.pods:
            for c in k.containers(t["spec"]):
                svc = binary_of(c)
                if not svc:
                    continue
                who = f"{overlay}: {where} {svc}"
                for name, val in parse_args(c.get("args", [])):
                    if name is None:
                        problems.append(f"{who}: positional argument {val!r} (services take flags only)")
                        continue
                    check_flag(flags, svc, name, val, who, problems)
                    checked += 1
        sec = ""
        for n, raw in enumerate(o.conf.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                sec = line.strip("[]").strip()
                if sec not in flags:
                    problems.append(f"{overlay}: moestream.conf:{n}: section [{sec}] is no service's")
                continue
            key, eq, val = line.partition("=")
            if not eq:
                problems.append(f"{overlay}: moestream.conf:{n}: not key = value")
                continue
            for svc in ([sec] if sec else list(flags)):
                if svc in flags:
                    check_flag(flags, svc, key.strip(), val.strip(), f"{overlay}: moestream.conf:{n} [{svc}]", problems)
                    checked += 1
    build = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MOE_BUILD_DIR", "")
    ran = 0
    if build and all(os.access(os.path.join(build, "services", s, s), os.X_OK) for s in flags):
        ran = run_binaries(build, goldens, problems)
    k.fail(problems, "flags")
    print(f"flags: {checked} flags and config keys of {len(goldens)} goldens are registered "
          f"({', '.join(f'{s} {len(v)}' for s, v in flags.items())} flags in the sources)"
          + (f"; {ran} containers' args accepted by the built binaries ({build})" if ran else
             "; built binaries not found, not run" if build else ""))


if __name__ == "__main__":
    main()
