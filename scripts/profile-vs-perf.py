#!/usr/bin/env python3
"""Compare a `wakemeter profile --on-cpu` capture with `perf record --call-graph`.

Both tools sample the same process in the same window; this prints, per
function, its total (inclusive) share in each: the share of samples whose
stack holds the function at least once (a recursive function counts once
per sample). It is the measurement of ACCURACY.md's section "Whole stacks
without frame pointers, unwound in the kernel (issue 27)".

Inputs:
  PERF      the text of `perf script` (or a perf.data file, which is then
            read with `perf script --no-inline -i PERF`, and `--pid PID`
            with this script's --pid, for a `perf record -a` capture);
  FOLDED    wakemeter's folded stacks (`wakemeter profile --folded FILE`):
            `thread;root;...;leaf COUNT` per line.

Rules (the same for both tools):
  * the denominator is every sample of the capture (all threads);
  * kernel frames are counted in both (wakemeter's `_[k]` suffix is
    dropped so the names match perf's), or in neither with --user-only;
  * perf's `+0x..` offsets and symbol versions (`@@GLIBC_2.34`) are
    dropped;
  * frames without a function name (perf's `[unknown]`, wakemeter's
    `module+0xoffset` and bare addresses), wakemeter's markers
    (`[truncated]`, `[lost ...]`), the thread name wakemeter puts at the
    root, and `_start` and `__libc_start*` are left out of the top list;
  * the top list is the union of each tool's top N (default 10), ordered
    by the mean of the two shares; the largest difference is over it.

Sampling noise: a share p of n samples has a binomial standard error of
sqrt(p(1-p)/n); the difference of the two tools' shares, sampled
independently, has sqrt(se_perf^2 + se_wakemeter^2). Both are printed.

--same A=B (repeatable) counts the name B as A in both, for the aliases of
one address that the two symbolizers name differently (perf names the C
library's read wrapper `read`, wakemeter `__GI___libc_read`).

--drop-leaf NAME (repeatable) leaves out of both the samples whose
innermost frame is NAME (e.g. `finish_task_switch.isra.0`, to see how much
of a difference is the samples taken as a thread is switched back in).

--main NAME (repeatable) prints the share of samples whose stack reaches
any of the named functions (the program's main loop).

Usage (as root, both tools on the same process in the same window):
  wakemeter profile --pid PID --on-cpu --frequency 99 --seconds 30 --folded wm.folded &
  sleep 1
  perf record -e cpu-clock -F 99 --call-graph dwarf -a -o perf.data -- sleep 30
  wait
  scripts/profile-vs-perf.py perf.data wm.folded --pid PID --main aeMain

`perf record -a` samples per CPU, as wakemeter does. With `-p PID` instead
(a per-thread event), perf takes more samples as the thread is switched
back in (innermost frame `finish_task_switch`) than a per-CPU event does,
which moves every share by a few points (ACCURACY.md); the text of
`perf script --no-inline -i perf.data` works as PERF too.

Run mode: `profile-vs-perf.py run SERVER [...]` does the whole
measurement for one of Debian's own (stripped) builds, SERVER one of
nginx, redis, memcached, postgres, haproxy, squid (C++): it installs the
package with apt-get when missing (and linux-perf, wrk, the load client),
starts the server on 127.0.0.1 (ports from --port, default 24000, in a
scratch directory), drives a bounded load (wrk, redis-benchmark,
memcaslap, pgbench), and in one window runs
`wakemeter profile --pid P --on-cpu --frequency F --seconds S` and,
once it has attached, `perf record -e cpu-clock -F F --call-graph dwarf`
on the same process with the same kind of timer: per thread with `-p P`
(wakemeter's default `--timer thread`), or, with `--timer cpu`, per CPU
with `-a` then `perf script --pid P` (`--perf-timer` chooses perf's on its
own; ACCURACY.md, issue 27, shows a per-thread event takes more samples
as a thread is switched back in, so the two tools compare only on the
same kind). It prints, for each tool: samples,
the share of samples whose stack reaches the thread's entry (`main`,
`start_thread`, `clone3`, `clone`, `_start` or the C library's
`__libc_start_*` above a stripped `main`), the top 10 functions by self
share (innermost frame) and by total share, the largest gap over each,
and wakemeter's own summary lines (samples kept / due, the unwinding
stops by reason and module). Everything it started is stopped at the
end. Servers run as root from the scratch directory; nothing is kept.

Kept mode: `profile-vs-perf.py kept SERVER [--frequency F --seconds S]`
starts the server and its load the same way and measures samples kept
against samples due in one window: `wakemeter profile --on-cpu` (its own
summary: kept, due by schedstat, due by the time on a CPU, periods
skipped, the program's time) and, once it has attached, `perf record -k
CLOCK_MONOTONIC -e cpu-clock -F F --switch-events` (`-p P` or `-a`, as
below); the server's main
thread's schedstat is read at two CLOCK_MONOTONIC instants S seconds apart
inside perf's window, and perf's samples of that thread between them are
counted against its schedstat CPU time and against its time on a CPU from
perf's own switch records, and the share of them whose kernel stack is in
the switch-in path (`finish_task_switch`, `schedule_tail`,
`ret_from_fork`; perf records `-g` for it). It prints one row of
ACCURACY.md's table. perf's timer is the same kind as wakemeter's unless
`--perf-timer` says: `cpu` records with `-a`, `thread` with `-p PID` (a
per-thread timer), `both` in two back-to-back windows (ACCURACY.md, "Per-CPU or per-thread timers"); `--timer cpu|thread`
is passed to wakemeter (the run mode takes it too); `--no-wakemeter` runs
perf alone.

Standard library only (Python 3.8+).
"""

import argparse
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter

KERNEL_START = 0xFFFF800000000000
OFFSET = re.compile(r"\+0x[0-9a-fA-F]+$")
# A symbol version, as perf prints it (`__libc_start_main@@GLIBC_2.34`).
VERSION = re.compile(r"@@?[A-Z][A-Za-z0-9_.]*$")
# A wakemeter frame without a function name: `module+0xoffset` or `0xaddr`.
UNNAMED = re.compile(r"(^0x[0-9a-fA-F]+$)|(\+0x[0-9a-fA-F]+$)")


def canonical(name):
    """One name for the aliases of one user-space address that the two
    symbolizers pick differently: the C library's internal and versioned
    names (`__GI___libc_read`, `__libc_read` and `read`;
    `___pthread_mutex_lock` and `pthread_mutex_lock`). Leading
    underscores, `GI_` and `libc_` are dropped. Only for user frames (the
    kernel's `__tcp_transmit_skb` and `tcp_transmit_skb` are two
    functions) and only with --canonical (run mode)."""
    if name.startswith("[") or UNNAMED.search(name):
        return name
    name = without_parameters(name)
    stripped = name.lstrip("_")
    for prefix in ("GI_", "libc_"):
        if stripped.startswith(prefix):
            stripped = stripped[len(prefix):].lstrip("_")
    return stripped or name


def without_parameters(name):
    """A demangled C++ name without its parameter list and qualifiers
    (`SBuf::~SBuf()` and `f(int) const` as perf prints them: `SBuf::~SBuf`,
    `f`); `(anonymous namespace)::g` keeps its first group."""
    trimmed = re.sub(r"\s*(const|volatile|&|&&|noexcept)$", "", name.rstrip())
    if not trimmed.endswith(")"):
        return name
    depth = 0
    for i in range(len(trimmed) - 1, -1, -1):
        c = trimmed[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return trimmed[:i] if i > 0 else name
    return name


def left_out(name):
    """Frames that never enter the top list (see the module doc)."""
    return (
        name == "[unknown]"
        or name.startswith("[")
        or name in ("_start", "start")
        or name.startswith(("__libc_start", "start_main", "start_call_main"))
    )


def perf_text(path, pid):
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic.startswith(b"PERFILE"):
        out = subprocess.run(
            ["perf", "script", "--no-inline", "-i", path]
            + (["--pid", str(pid)] if pid else []),
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ).stdout
        return out.decode("utf-8", "replace").splitlines()
    if pid:
        sys.exit("--pid needs a perf.data file (or filter with `perf script --pid`)")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def rename(samples, same):
    """Applies --same to every sample's set of names."""
    if not same:
        return samples
    return [({same.get(n, n) for n in names}, c, same.get(l, l)) for names, c, l in samples]


def drop_leaf(samples, leaves):
    """Leaves out the samples whose innermost frame is one of `leaves`."""
    return [s for s in samples if s[2] not in leaves]


def parse_perf(path, user_only, pid=None, canon=False):
    """Samples of `perf script` as (set of function names, 1, leaf)."""
    samples = []
    frames = None
    for line in perf_text(path, pid):
        if not line.strip():
            if frames is not None:
                samples.append(frames)
                frames = None
            continue
        if not line.startswith("\t"):
            # A sample's header line (comm pid time: period event:); its
            # frames follow, one a line, each starting with a tab.
            if frames is not None:
                samples.append(frames)
            frames = []
            continue
        if frames is None:
            continue
        # `\t    addr sym+off (dso)`; sym may hold spaces.
        body = line.strip()
        addr, _, rest = body.partition(" ")
        dso = ""
        if rest.endswith(")") and " (" in rest:
            rest, _, dso = rest.rpartition(" (")
            dso = dso[:-1]
        try:
            kernel = int(addr, 16) >= KERNEL_START
        except ValueError:
            kernel = False
        kernel = kernel or dso.startswith("[kernel")
        if user_only and kernel:
            continue
        name = VERSION.sub("", OFFSET.sub("", rest.strip())) or "[unknown]"
        frames.append(canonical(name) if canon and not kernel else name)
    if frames is not None:
        samples.append(frames)
    return [(set(f), 1, f[0] if f else "") for f in samples]


def parse_folded(path, user_only, canon=False):
    """Lines of wakemeter's folded stacks as (set of names, count, leaf)."""
    samples = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            parts = stack.split(";")[1:]  # the thread name is the root
            names = []
            for p in parts:
                kernel = p.endswith("_[k]")
                if kernel:
                    if user_only:
                        continue
                    p = p[: -len("_[k]")]
                elif UNNAMED.search(p):
                    p = "[unknown]"
                p = VERSION.sub("", p)
                names.append(canonical(p) if canon and not kernel else p)
            leaf = names[-1] if names else ""
            samples.append((set(names), int(count), leaf))
    return samples


def shares(samples):
    total = sum(s[1] for s in samples)
    per = Counter()
    for names, c, _ in samples:
        for n in names:
            per[n] += c
    return total, {n: v / total for n, v in per.items()} if total else {}


def reach(samples, mains):
    total = sum(s[1] for s in samples)
    hit = sum(c for names, c, _ in samples if names & mains)
    return hit / total if total else 0.0


def se(p, n):
    return math.sqrt(p * (1 - p) / n) if n else 0.0


def compare_main():
    ap = argparse.ArgumentParser(
        description="Total (inclusive) function shares: perf against wakemeter."
    )
    ap.add_argument("perf", help="perf script text, or perf.data")
    ap.add_argument("folded", help="wakemeter folded stacks")
    ap.add_argument("--top", type=int, default=10, help="functions per tool (10)")
    ap.add_argument(
        "--user-only", action="store_true", help="leave kernel frames out of both"
    )
    ap.add_argument(
        "--main", action="append", default=[], help="main-loop function (repeatable)"
    )
    ap.add_argument(
        "--same", action="append", default=[], metavar="A=B",
        help="count name B as A in both (aliases of one address; repeatable)",
    )
    ap.add_argument(
        "--drop-leaf", action="append", default=[], metavar="NAME",
        help="leave out of both the samples whose innermost frame is NAME (repeatable)",
    )
    ap.add_argument(
        "--pid", type=int, help="with a perf.data of `perf record -a`: this process only"
    )
    a = ap.parse_args()
    same = {}
    for pair in a.same:
        keep, _, other = pair.partition("=")
        same[other] = keep

    drop = set(a.drop_leaf)
    ps = drop_leaf(rename(parse_perf(a.perf, a.user_only, a.pid), same), drop)
    ws = drop_leaf(rename(parse_folded(a.folded, a.user_only), same), drop)
    n_p, sh_p = shares(ps)
    n_w, sh_w = shares(ws)
    if not n_p or not n_w:
        sys.exit(f"no samples: perf {n_p}, wakemeter {n_w}")

    print(f"samples: perf {n_p}, wakemeter {n_w}")
    print("kernel frames: " + ("excluded from both" if a.user_only else "included in both"))
    if a.main:
        mains = set(a.main)
        print(
            f"reaches {'/'.join(a.main)}: perf {100 * reach(ps, mains):.1f}%, "
            f"wakemeter {100 * reach(ws, mains):.1f}%"
        )

    def top(sh):
        named = [(v, n) for n, v in sh.items() if not left_out(n)]
        return [n for _, n in sorted(named, key=lambda t: (-t[0], t[1]))[: a.top]]

    tp, tw = top(sh_p), top(sh_w)
    rows = []
    for n in set(tp) | set(tw):
        p, w = sh_p.get(n, 0.0), sh_w.get(n, 0.0)
        sd = math.sqrt(se(p, n_p) ** 2 + se(w, n_w) ** 2)
        rows.append((n, p, w, sd, ("p" if n in tp else "-") + ("w" if n in tw else "-")))
    rows.sort(key=lambda r: (-(r[1] + r[2]), r[0]))

    width = max(len(r[0]) for r in rows)
    print(f"\n{'function':<{width}}  {'perf':>6}  {'wakem.':>6}  {'diff':>6}  {'se':>4}  top")
    for n, p, w, sd, mark in rows:
        print(
            f"{n:<{width}}  {100 * p:6.1f}  {100 * w:6.1f}  {100 * (w - p):+6.1f}  "
            f"{100 * sd:4.1f}  {mark}"
        )
    worst = max(rows, key=lambda r: abs(r[2] - r[1]))
    n, p, w, sd, _ = worst
    z = abs(w - p) / sd if sd else float("inf")
    print(
        f"\nlargest difference: {100 * abs(w - p):.1f} points ({n} "
        f"{100 * p:.1f}% / {100 * w:.1f}%), {z:.1f} standard errors"
    )
    print(
        f"largest standard error of a share: perf "
        f"{100 * max(se(r[1], n_p) for r in rows):.2f}, wakemeter "
        f"{100 * max(se(r[2], n_w) for r in rows):.2f} points"
    )


# ---------------------------------------------------------------- run mode

# Frames that mean a stack reached its thread's entry. A stripped `main`
# is unnamed, so the C library's frames above it count too.
ENTRIES = {
    "main",
    "start_thread",
    "clone3",
    "__clone3",
    "clone",
    "__clone",
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
}


# perf's user-stack copy per sample, its default: 8 KiB. More does not
# take perf past memcached's 16 KiB frame (its unwinder stops there with
# 64 KiB copies too: 43.6% against 42.6%) and with `-a`, which copies
# the stacks of every process on the machine, 64 KiB makes 380 MB of
# perf.data in 30 s.
PERF_STACK_BYTES = 8192


def log(msg):
    print(f"profile-vs-perf: {msg}", file=sys.stderr, flush=True)


def apt_install(packages, commands):
    """Installs the Debian packages when one of `commands` is missing."""
    if all(shutil.which(c) or os.path.exists(c) for c in commands):
        return
    log(f"apt-get install {' '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends"] + packages,
        check=True, env=env, stdout=subprocess.DEVNULL,
    )


def package_version(package):
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", package],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    return out.stdout.strip() or "?"


def wait_port(port, what, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def children(pid):
    """The pids whose parent is `pid` (from ps: no procfs paths here)."""
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], stdout=subprocess.PIPE, text=True
    ).stdout
    return [int(x) for x in out.split()]


def command_of(pid):
    return subprocess.run(
        ["ps", "-o", "args=", "-p", str(pid)], stdout=subprocess.PIPE, text=True
    ).stdout.strip()


class Server:
    """One server: its package, how it starts, which process is profiled
    and the load that drives it."""

    def __init__(self, a, scratch):
        self.a = a
        self.dir = scratch
        self.port = a.port
        self.procs = []  # what we started, stopped at the end
        self.stop_cmds = []

    def spawn(self, cmd, **kw):
        p = subprocess.Popen(
            cmd, cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, **kw,
        )
        self.procs.append(p)
        return p

    def load(self, seconds):
        """The load for `seconds` (a Popen)."""
        return self.spawn(
            ["wrk", "-t1", "-c20", f"-d{seconds}s", f"http://127.0.0.1:{self.port}/"]
        )

    def stop(self):
        for cmd in self.stop_cmds:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


class Nginx(Server):
    packages, commands, package = ["nginx-light"], ["nginx"], "nginx-light"
    load_text = "wrk -t1 -c20, `return 200`"

    def start(self):
        conf = os.path.join(self.dir, "nginx.conf")
        # nginx gives its temp paths to the worker's user: not the scratch
        # directory itself, where the outputs are written.
        tmp = os.path.join(self.dir, f"nginx-{self.port}")
        os.makedirs(tmp)
        with open(conf, "w") as f:
            f.write(
                "worker_processes 1; daemon off; master_process on;\n"
                f"pid {self.dir}/nginx.pid; error_log {self.dir}/error.log;\n"
                "events { worker_connections 1024; }\n"
                f"http {{ access_log off; client_body_temp_path {tmp}; "
                f"proxy_temp_path {tmp}; fastcgi_temp_path {tmp}; "
                f"uwsgi_temp_path {tmp}; scgi_temp_path {tmp};\n"
                f"  server {{ listen 127.0.0.1:{self.port}; "
                "location / { return 200 'ok\\n'; } } }\n"
            )
        master = self.spawn(["nginx", "-c", conf, "-p", self.dir])
        wait_port(self.port, "nginx")
        workers = children(master.pid)
        if len(workers) != 1:
            sys.exit(f"nginx: {len(workers)} workers, expected 1")
        return workers[0]


class Redis(Server):
    packages, commands, package = ["redis-server", "redis-tools"], ["redis-server", "redis-benchmark"], "redis-server"
    load_text = "redis-benchmark -t get,set -c 50"

    def start(self):
        p = self.spawn(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir]
        )
        wait_port(self.port, "redis")
        return p.pid

    def load(self, seconds):
        # -n large and stopped when the window ends (redis-benchmark has no
        # duration option).
        p = self.spawn(
            ["timeout", str(seconds), "redis-benchmark", "-p", str(self.port),
             "-t", "get,set", "-n", "100000000", "-c", "50", "-q"]
        )
        return p


class Memcached(Server):
    packages, commands, package = ["memcached", "libmemcached-tools"], ["memcached", "memcaslap"], "memcached"
    load_text = "memcaslap -c 32 -T 1 (9:1 get/set)"

    def start(self):
        p = self.spawn(
            ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(self.port),
             "-U", "0", "-t", "2", "-m", "64"]
        )
        wait_port(self.port, "memcached")
        return p.pid

    def load(self, seconds):
        return self.spawn(
            ["memcaslap", "-s", f"127.0.0.1:{self.port}", "-c", "32", "-T", "1",
             "-t", f"{seconds}s"]
        )


class Haproxy(Server):
    packages, commands, package = ["haproxy"], ["haproxy"], "haproxy"
    load_text = "wrk -t1 -c20, `http-request return status 200`"

    def start(self):
        conf = os.path.join(self.dir, "haproxy.cfg")
        with open(conf, "w") as f:
            f.write(
                "global\n  nbthread 2\n"
                "defaults\n  mode http\n  timeout client 10s\n"
                "  timeout server 10s\n  timeout connect 2s\n"
                f"frontend fe\n  bind 127.0.0.1:{self.port}\n"
                "  http-request return status 200 content-type text/plain string ok\n"
            )
        p = self.spawn(["haproxy", "-db", "-f", conf])
        wait_port(self.port, "haproxy")
        return p.pid


class Postgres(Server):
    packages, commands = ["postgresql", "postgresql-contrib"], ["pgbench"]
    load_text = "pgbench -S -c 1 (select-only), one backend"

    def bindir(self):
        out = subprocess.run(["pg_config", "--bindir"], stdout=subprocess.PIPE, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
        versions = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: int(v))
        return f"/usr/lib/postgresql/{versions[-1]}/bin"

    @property
    def package(self):
        return "postgresql-" + os.path.basename(os.path.dirname(self.bindir()))

    def as_postgres(self, cmd, **kw):
        return ["runuser", "-u", "postgres", "--"] + cmd

    def start(self):
        data = os.path.join(self.dir, "data")
        os.chmod(self.dir, 0o755)
        sock = os.path.join(self.dir, "sock")
        for d in (data, sock):
            os.makedirs(d)
            shutil.chown(d, "postgres", "postgres")
        b = self.bindir()
        subprocess.run(self.as_postgres([f"{b}/initdb", "-D", data, "-A", "trust"]),
                       check=True, stdout=subprocess.DEVNULL)
        self.spawn(self.as_postgres(
            [f"{b}/postgres", "-D", data, "-p", str(self.port), "-k", sock,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]))
        self.stop_cmds.append(self.as_postgres([f"{b}/pg_ctl", "-D", data, "-m", "fast", "stop"]))
        wait_port(self.port, "postgres")
        self.pg = ["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        subprocess.run(self.as_postgres(["pgbench", "-i", "-s", "2", "-q"] + self.pg + ["postgres"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.master = self.procs[-1].pid
        return None  # the backend is known once the load connects

    def load(self, seconds):
        return self.spawn(self.as_postgres(
            ["pgbench", "-S", "-c", "1", "-j", "1", "-T", str(seconds)] + self.pg + ["postgres"]))

    def backend(self):
        """The one backend serving pgbench (a child of the postmaster)."""
        end = time.monotonic() + 60
        while time.monotonic() < end:
            for top in children(self.master):
                for pid in [top] + children(top):
                    if "postgres: postgres postgres 127.0.0.1" in command_of(pid):
                        return pid
            time.sleep(0.2)
        sys.exit("postgres: no backend for pgbench")


class Squid(Server):
    packages, commands, package = ["squid", "nginx-light"], ["squid", "nginx"], "squid"
    load_text = "wrk -t1 -c20 through squid (accel, no cache) to nginx"

    def start(self):
        origin = Nginx(self.a, self.dir)
        origin.port = self.port + 1
        origin.procs = self.procs
        origin.start()
        conf = os.path.join(self.dir, "squid.conf")
        # Squid refuses to run as root: Debian's user `proxy`, with its own
        # directory for the pid file and the log.
        run = os.path.join(self.dir, "squid")
        os.makedirs(run)
        shutil.chown(run, "proxy", "proxy")
        os.chmod(self.dir, 0o755)
        with open(conf, "w") as f:
            f.write(
                f"http_port 127.0.0.1:{self.port} accel defaultsite=127.0.0.1 no-vhost\n"
                f"cache_peer 127.0.0.1 parent {self.port + 1} 0 no-query originserver name=o\n"
                "cache deny all\nhttp_access allow all\ncache_peer_access o allow all\n"
                f"pid_filename {run}/squid.pid\n"
                f"cache_log {run}/cache.log\naccess_log none\n"
                f"coredump_dir {run}\nworkers 1\n"
                "cache_effective_user proxy\n"
                "shutdown_lifetime 1 seconds\n"
                # No shared memory segment (one would outlive a killed squid).
                "collapsed_forwarding_shared_entries_limit 0\n"
            )
        master = self.spawn(["squid", "-N", "-f", conf])
        wait_port(self.port, "squid", timeout=90)
        return master.pid


SERVERS = {
    "nginx": Nginx,
    "redis": Redis,
    "memcached": Memcached,
    "haproxy": Haproxy,
    "postgres": Postgres,
    "squid": Squid,
}


def self_shares(samples):
    """Share of samples whose innermost frame is each function."""
    total = sum(s[1] for s in samples)
    per = Counter()
    for _, c, leaf in samples:
        per[leaf] += c
    return {n: v / total for n, v in per.items()} if total else {}


def top_gap(sh_p, sh_w, n_p, n_w, top_n):
    def top(sh):
        named = [(v, n) for n, v in sh.items() if not left_out(n) and n]
        return [n for _, n in sorted(named, key=lambda t: (-t[0], t[1]))[:top_n]]

    tp, tw = top(sh_p), top(sh_w)
    rows = []
    for n in set(tp) | set(tw):
        p, w = sh_p.get(n, 0.0), sh_w.get(n, 0.0)
        sd = math.sqrt(se(p, n_p) ** 2 + se(w, n_w) ** 2)
        rows.append((n, p, w, sd))
    rows.sort(key=lambda r: (-(r[1] + r[2]), r[0]))
    return rows


def print_rows(title, rows):
    if not rows:
        return 0.0
    width = max(len(r[0]) for r in rows)
    print(f"\n{title}\n{'function':<{width}}  {'perf':>6}  {'wakem.':>6}  {'diff':>6}  {'se':>4}")
    for n, p, w, sd in rows:
        print(f"{n:<{width}}  {100 * p:6.1f}  {100 * w:6.1f}  {100 * (w - p):+6.1f}  {100 * sd:4.1f}")
    worst = max(rows, key=lambda r: abs(r[2] - r[1]))
    gap = abs(worst[2] - worst[1])
    print(f"largest gap: {100 * gap:.1f} points ({worst[0]})")
    return gap


def server_arguments(mode, description, seconds, window):
    """The arguments every mode that starts a server takes."""
    ap = argparse.ArgumentParser(prog=f"profile-vs-perf.py {mode}", description=description)
    ap.add_argument("server", choices=sorted(SERVERS))
    ap.add_argument("--seconds", type=int, default=seconds, help=f"{window} ({seconds})")
    ap.add_argument("--frequency", type=int, default=99, help="Hz per CPU (99)")
    ap.add_argument("--port", type=int, default=24000, help="first port (24000; squid takes 2)")
    ap.add_argument("--wakemeter", default=shutil.which("wakemeter") or "wakemeter",
                    help="the wakemeter binary")
    ap.add_argument("--max-stacks", type=int,
                    help="wakemeter's --max-stacks (its default when not given)")
    return ap


def prepare(server):
    """Signals end the run through its `finally` (which stops the server
    and the load); checks root and installs perf, wrk and the server.
    Returns the server's class."""
    def stop(signum, _frame):
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if os.geteuid() != 0:
        sys.exit("run as root (perf -a, eBPF, apt-get)")
    apt_install(["linux-perf"], ["perf"])
    apt_install(["wrk"], ["wrk"])
    cls = SERVERS[server]
    apt_install(cls.packages, cls.commands)
    return cls


def stop_all(tools, load, server, scratch):
    """Stops the tools still running (SIGINT, then SIGKILL after 30 s),
    the load and the server, and removes the scratch directory."""
    for t in tools:
        if t.poll() is None:
            t.send_signal(signal.SIGINT)
            try:
                t.wait(timeout=30)
            except subprocess.TimeoutExpired:
                t.kill()
                t.wait()
    if load is not None and load.poll() is None:
        os.killpg(load.pid, signal.SIGTERM)
    server.stop()
    shutil.rmtree(scratch, ignore_errors=True)


def print_summary(wm_out, title):
    """The sample accounting of wakemeter's profile summary (from its
    "samples kept" line up to its top functions), indented, under title."""
    print(title)
    shown = False
    for line in wm_out.splitlines():
        shown = (shown or line.startswith("samples kept")) and not line.startswith("top ")
        if shown:
            print("  " + line)


def start_wakemeter(a, pid, seconds, extra, tools):
    """`wakemeter profile --on-cpu` of pid for seconds (with --timer when
    asked), put in tools (stopped with them) and returned once it says it
    is profiling (attached)."""
    wm = subprocess.Popen(
        [a.wakemeter, "profile", "--pid", str(pid), "--on-cpu", "--frequency",
         str(a.frequency), "--seconds", str(seconds)] + extra
        + (["--timer", a.timer] if a.timer else [])
        + (["--max-stacks", str(a.max_stacks)] if a.max_stacks else []),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    tools.append(wm)
    for line in wm.stderr:
        sys.stderr.write(line)
        if "profiling" in line:
            break
    return wm


def run_main(argv):
    ap = server_arguments(
        "run", "Start a Debian server under load; wakemeter profile beside perf record.",
        20, "capture window")
    ap.add_argument("--timer", choices=["cpu", "thread"],
                    help="wakemeter's timer (its --timer; its default, thread, when not given)")
    ap.add_argument("--perf-timer", choices=["cpu", "thread"],
                    help="perf's: per thread (-p PID) or per CPU (-a, then perf script --pid); "
                         "the same as wakemeter's when not given")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep wm.folded, wakemeter's summary and perf's script text here")
    a = ap.parse_args(argv)
    a.perf_per_thread = (a.perf_timer or a.timer or "thread") == "thread"
    cls = prepare(a.server)

    scratch = tempfile.mkdtemp(prefix=f"wm-vs-perf-{a.server}-")
    server = cls(a, scratch)
    load = None
    tools = []  # wakemeter and perf, stopped if still running at the end
    try:
        pid = server.start()
        warm = 3
        load = server.load(a.seconds + warm + 15)
        if pid is None:
            pid = server.backend()
        time.sleep(warm)
        log(f"{a.server} ({server.package} {package_version(server.package)}) pid {pid}, "
            f"load: {cls.load_text}")
        folded = os.path.join(scratch, "wm.folded")
        data = os.path.join(scratch, "perf.data")
        # perf starts once wakemeter has attached, for the same window.
        wm = start_wakemeter(a, pid, a.seconds, ["--folded", folded], tools)
        scope = ["-p", str(pid)] if a.perf_per_thread else ["-a"]
        perf = subprocess.Popen(
            ["perf", "record", "-m", "4M", "-e", "cpu-clock", "-F", str(a.frequency),
             "--call-graph", f"dwarf,{PERF_STACK_BYTES}", "-o", data] + scope + ["--", "sleep", str(a.seconds)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        tools.append(perf)
        wm_out, wm_err = wm.communicate()
        sys.stderr.write(wm_err)
        perf_err = perf.communicate()[1]
        if perf.returncode != 0:
            sys.exit(f"perf record failed: {perf_err.strip()}")
        for line in perf_err.splitlines():
            if "lost" in line.lower():
                log(f"perf: {line.strip()}")
        if load.poll() is not None and load.returncode != 0:
            log(f"the load exited with {load.returncode} before the window ended")
        if not os.path.exists(folded):
            sys.exit(f"wakemeter wrote no profile (exit {wm.returncode})")
        # The target's samples as text; perf.data (every process's with
        # `-a`) is removed at once.
        text = os.path.join(scratch, "perf.txt")
        with open(text, "w") as f:
            subprocess.run(
                ["perf", "script", "--no-inline", "-i", data]
                + ([] if a.perf_per_thread else ["--pid", str(pid)]),
                check=True, stdout=f, stderr=subprocess.DEVNULL,
            )
        os.unlink(data)
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            for f in (folded, text):
                shutil.copy(f, a.keep)
            with open(os.path.join(a.keep, "wm.summary"), "w") as f:
                f.write(wm_out)
        report(a, server, text, folded, wm_out)
    finally:
        stop_all(tools, load, server, scratch)


SWITCH_LINE = re.compile(r"^\s*(.*?)\s+(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+(.*)$")


# Kernel functions of the switch-in path: a sample whose kernel stack holds
# one was taken as the thread was switched back in (the timer's interrupt
# held off while the switch ran with interrupts disabled).
SWITCH_IN = re.compile(r"^(finish_task_switch|schedule_tail|ret_from_fork)")


def perf_on_cpu(text_path, tid, lo, hi, frequency):
    """perf's samples of `tid` in [lo, hi) and its time on a CPU there, ns,
    from `perf script --ns --show-switch-events -F comm,tid,cpu,time,event,ip,sym`
    text (timestamps CLOCK_MONOTONIC, callchains when recorded with -g);
    also its switch-ins, and their density over 20 slices of the period
    after the instants of their CPU's timer (1 for a uniform one), and over
    a grid 0.2% slower where no timer runs (the control); and how many of
    the samples have a switch-in function innermost and anywhere in their
    kernel stack."""
    since = {}
    on_cpu = samples = switch_ins = 0
    innermost_switch_in = any_switch_in = 0
    period = 1e9 / frequency
    events = {}  # cpu -> [(t, is_switch_in)]: every sample, the thread's switch-ins
    counting = False  # the callchain lines that follow belong to a counted sample
    first_frame = False
    seen = False
    with open(text_path, errors="replace") as f:
        for line in f:
            m = SWITCH_LINE.match(line)
            if not m:
                frame = line.split()
                if counting and len(frame) >= 2:
                    name = frame[1]
                    hit = SWITCH_IN.match(name) is not None
                    if first_frame:
                        innermost_switch_in += hit
                        first_frame = False
                    if hit and not seen:
                        any_switch_in += 1
                        seen = True
                continue
            counting = False
            cpu = int(m.group(3))
            t = int(m.group(4)) * 10**9 + int(m.group(5).ljust(9, "0")[:9])
            rest = m.group(6)
            switch = "PERF_RECORD_SWITCH" in rest
            if not switch:
                events.setdefault(cpu, []).append((t, False))
            if int(m.group(2)) != tid:
                continue
            if not switch:
                inside = lo <= t < hi
                samples += inside
                counting, first_frame, seen = inside, inside, False
            elif re.search(r"\bIN\b", rest):
                since[cpu] = t
                switch_ins += lo <= t < hi
                events.setdefault(cpu, []).append((t, True))
            elif cpu in since:
                start, end = max(since.pop(cpu), lo), min(t, hi)
                on_cpu += max(0, end - start)
    grid, control = Counter(), Counter()
    first = None
    for evs in events.values():
        evs.sort()
        phase = None
        for t, switch_in in evs:
            if not switch_in:
                # A sample on time (less than 30 µs late) re-anchors the grid.
                if phase is None:
                    phase = t
                n = round((t - phase) / period)
                if t - phase - n * period < 30000:
                    phase = t - n * period
                continue
            if phase is None or not lo <= t < hi:
                continue
            first = t if first is None else first
            grid[int((t - phase) % period * 20 // period)] += 1
            control[int((t - first) % (period * 1.002) * 20 // (period * 1.002))] += 1

    def spread(c):
        n = sum(c.values())
        return (min(c[b] for b in range(20)) * 20 / n, max(c[b] for b in range(20)) * 20 / n) if n else (0, 0)

    return {
        "samples": samples, "on_cpu": on_cpu, "switch_ins": switch_ins,
        "grid": spread(grid), "control": spread(control),
        "innermost_switch_in": innermost_switch_in, "any_switch_in": any_switch_in,
    }


def schedstat_ns(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def perf_window(a, pid, scope, scratch):
    """One perf window on `pid`: `perf record -g -k CLOCK_MONOTONIC -e
    cpu-clock -F F --switch-events` per CPU (`scope` "cpu": `-a`) or per
    thread ("thread": `-p PID`, one event per thread, inherited); the
    thread's schedstat read at two instants `a.seconds` apart inside it.
    Returns perf_on_cpu's figures and the schedstat CPU time, ns."""
    data = os.path.join(scratch, f"perf-{scope}.data")
    where = ["-a"] if scope == "cpu" else ["-p", str(pid)]
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-g", "-k", "CLOCK_MONOTONIC", "-e", "cpu-clock", "-F",
         str(a.frequency), "--switch-events", "--sample-cpu", "-o", data] + where
        + ["--", "sleep", str(a.seconds + 2)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(1)
        a0 = time.monotonic_ns()
        s0 = schedstat_ns(pid)
        b0 = time.monotonic_ns()
        time.sleep(a.seconds)
        a1 = time.monotonic_ns()
        s1 = schedstat_ns(pid)
        b1 = time.monotonic_ns()
        perf_err = perf.communicate()[1]
    finally:
        if perf.poll() is None:
            perf.send_signal(signal.SIGINT)
            perf.wait()
    if perf.returncode != 0:
        sys.exit(f"perf record failed: {perf_err.strip()}")
    text = os.path.join(scratch, f"perf-{scope}.txt")
    with open(text, "w") as f:
        subprocess.run(
            ["perf", "script", "--ns", "--show-switch-events", "-F",
             "comm,tid,cpu,time,event,ip,sym", "-i", data],
            check=True, stdout=f, stderr=subprocess.DEVNULL,
        )
    os.unlink(data)
    lo, hi = (a0 + b0) // 2, (a1 + b1) // 2
    r = perf_on_cpu(text, pid, lo, hi, a.frequency)
    os.unlink(text)
    r["cpu"], r["window"] = s1 - s0, hi - lo
    return r


def kept_main(argv):
    ap = server_arguments(
        "kept", "Samples kept against samples due: wakemeter beside perf's cpu-clock samples.",
        8, "perf's counted window")
    ap.add_argument("--perf-timer", choices=["cpu", "thread", "both"],
                    help="perf's cpu-clock per CPU (-a), per thread (-p PID), or both in "
                         "back-to-back windows (the same as wakemeter's when not given)")
    ap.add_argument("--timer", choices=["cpu", "thread"],
                    help="wakemeter's timer (its --timer; its default, thread, when not given)")
    ap.add_argument("--no-wakemeter", action="store_true", help="perf alone")
    a = ap.parse_args(argv)
    a.perf_timer = a.perf_timer or a.timer or "thread"
    cls = prepare(a.server)
    scopes = ["cpu", "thread"] if a.perf_timer == "both" else [a.perf_timer]

    scratch = tempfile.mkdtemp(prefix=f"wm-kept-{a.server}-")
    server = cls(a, scratch)
    load = None
    tools = []
    try:
        pid = server.start()
        warm = 3
        load = server.load(len(scopes) * (a.seconds + 8) + warm + 20)
        if pid is None:
            pid = server.backend()
        time.sleep(warm)
        log(f"{a.server} ({server.package} {package_version(server.package)}) pid {pid}, "
            f"load: {cls.load_text}, load average {os.getloadavg()[0]:.1f}")
        # wakemeter's window holds perf's, which hold the counted ones.
        wm = None
        if not a.no_wakemeter:
            wm = start_wakemeter(a, pid, len(scopes) * (a.seconds + 8) + 2, [], tools)
        results = {scope: perf_window(a, pid, scope, scratch) for scope in scopes}
        wm_out = ""
        if wm is not None:
            wm_out, wm_err = wm.communicate()
            sys.stderr.write(wm_err)
            print_summary(wm_out, "wakemeter's summary:")
        m = re.search(r"samples kept: (\d+) of ([\d.]+) due", wm_out)
        t = re.search(r"on a CPU \(switch-in to switch-out\): [\d.]+ s, [\d.]+ due, ratio ([\d.]+|-); "
                      r"timer periods skipped: (\d+|-); sampling program: ([\d.]+) ms", wm_out)
        if wm is not None and not m:
            sys.exit("no figures: wakemeter's summary has no samples kept")
        rows = []
        for scope, r in results.items():
            cpu, samples, on_cpu = r["cpu"], r["samples"], r["on_cpu"]
            due, due_on_cpu = cpu * a.frequency / 1e9, on_cpu * a.frequency / 1e9
            if not due or not due_on_cpu:
                sys.exit(f"no figures: perf ({scope}) saw no CPU time of thread {pid}")
            flag = "-a" if scope == "cpu" else "-p"
            print(f"perf {flag}, thread {pid}, {r['window'] / 1e9:.3f} s: {samples} samples, "
                  f"{due:.1f} due by schedstat ({cpu / 1e9:.3f} s), {due_on_cpu:.1f} by its time "
                  f"on a CPU ({on_cpu / 1e9:.3f} s), {r['switch_ins']} switch-ins; kernel stack "
                  f"in the switch-in path: {r['innermost_switch_in']} innermost "
                  f"({100 * r['innermost_switch_in'] / max(samples, 1):.1f}%), "
                  f"{r['any_switch_in']} anywhere ({100 * r['any_switch_in'] / max(samples, 1):.1f}%)")
            if scope == "cpu":
                grid, control = r["grid"], r["control"]
                print(f"  switch-ins against perf's timer grid, 20 slices of the period: "
                      f"{grid[0]:.2f} to {grid[1]:.2f} of a uniform density; against a grid "
                      f"0.2% slower (no timer): {control[0]:.2f} to {control[1]:.2f}")
            wm_cells = "| - | - | - | - |"
            if m and t:
                kept, wm_due = int(m.group(1)), float(m.group(2))
                wm_cells = (f"| {kept:,} / {wm_due:,.1f} ({kept / wm_due:.3f}) | "
                            f"{t.group(1)} | {t.group(2)} | {t.group(3)} ms |")
            rows.append(
                f"| {a.server} | {a.frequency} Hz | perf {flag}, wakemeter {a.timer or 'default'} | "
                f"{100 * cpu / r['window']:.1f}% | {r['switch_ins']:,} | {samples:,} | "
                f"{samples / due:.3f} | {samples / due_on_cpu:.3f} | {on_cpu / cpu:.3f} | "
                f"{100 * r['innermost_switch_in'] / max(samples, 1):.1f}% | " + wm_cells[2:])
        print()
        for row in rows:
            print("row: " + row)
    finally:
        stop_all(tools, load, server, scratch)


def report(a, server, text, folded, wm_out):
    ps = parse_perf(text, False, None, canon=True)
    ws = parse_folded(folded, False, canon=True)
    n_p, tot_p = shares(ps)
    n_w, tot_w = shares(ws)
    if not n_p or not n_w:
        sys.exit(f"no samples: perf {n_p}, wakemeter {n_w}")
    entries = {canonical(n) for n in ENTRIES}
    r_p, r_w = reach(ps, entries), reach(ws, entries)
    print(f"server: {a.server} ({server.package} {package_version(server.package)}), "
          f"load: {server.load_text}, {a.frequency} Hz, {a.seconds} s, perf "
          f"{'-p' if a.perf_per_thread else '-a --pid'}, wakemeter --timer {a.timer or 'default'}")
    print(f"samples: perf {n_p}, wakemeter {n_w}")
    print(f"reach the thread's entry: perf {100 * r_p:.1f}%, wakemeter {100 * r_w:.1f}% "
          f"(gap {100 * (r_w - r_p):+.1f})")
    g_self = print_rows("top 10 by self share (innermost frame):",
                        top_gap(self_shares(ps), self_shares(ws), n_p, n_w, 10))
    g_tot = print_rows("top 10 by total share (anywhere in the stack):",
                       top_gap(tot_p, tot_w, n_p, n_w, 10))
    print_summary(wm_out, "\nwakemeter's summary:")
    print(f"\nrow: | {a.server} | {server.package} {package_version(server.package)} | "
          f"{server.load_text} | {n_w} / {n_p} | {100 * r_w:.1f}% / {100 * r_p:.1f}% | "
          f"{100 * g_self:.1f} | {100 * g_tot:.1f} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        run_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "kept":
        kept_main(sys.argv[2:])
    else:
        compare_main()
