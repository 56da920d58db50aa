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

Standard library only (Python 3.8+).
"""

import argparse
import math
import re
import subprocess
import sys
from collections import Counter

KERNEL_START = 0xFFFF800000000000
OFFSET = re.compile(r"\+0x[0-9a-fA-F]+$")
# A symbol version, as perf prints it (`__libc_start_main@@GLIBC_2.34`).
VERSION = re.compile(r"@@?[A-Z][A-Za-z0-9_.]*$")
# A wakemeter frame without a function name: `module+0xoffset` or `0xaddr`.
UNNAMED = re.compile(r"(^0x[0-9a-fA-F]+$)|(\+0x[0-9a-fA-F]+$)")


def left_out(name):
    """Frames that never enter the top list (see the module doc)."""
    return (
        name == "[unknown]"
        or name.startswith("[")
        or name == "_start"
        or name.startswith("__libc_start")
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


def parse_perf(path, user_only, pid=None):
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
        frames.append(name)
    if frames is not None:
        samples.append(frames)
    return [(set(f), 1, f[0] if f else "") for f in samples]


def parse_folded(path, user_only):
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
                names.append(p)
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


def main():
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


if __name__ == "__main__":
    main()
