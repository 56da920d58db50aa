#!/usr/bin/env python3
"""The Envoy experiments of docs/envoy.md, on a real Envoy 1.40 (run by
scripts/envoy-experiments.sh, which builds the release binaries and
installs Envoy, nginx and wrk):

  sidecar   client -> nginx (control) vs client -> Envoy -> nginx (variant)
            with `wakemeter ab --runs 3` under `wrk --latency`; then Envoy
            --concurrency 1 vs 2 the same way.
  loops     per worker, over a 30 s wrk load: Envoy's own loop count
            (histogram count of listener_manager.worker_N.dispatcher.
            loop_duration_us, stats_flush_interval 1s), the module's eBPF
            view (its poll_calls counter) and `wakemeter watch`'s eBPF
            epoll_wait calls, from another process.
  module    Envoy serving wrk with the module loaded vs without, alternating,
            3 runs each: requests/s, p99, Envoy's CPU per request, and the
            module's own threads' CPU (wakemeter + wm-publish, from
            /proc/<pid>/task/<tid>/schedstat) at a 1 s interval.

Usage: envoy_experiments.py ENVOY_BIN MODULE_DIR WAKEMETER_BIN OUT_DIR [sidecar|loops|module ...]
Ports 20010-20029 on 127.0.0.1. Prints markdown tables.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from envoy_e2e import LOOP_STATS, bootstrap, loop_counts_of

NGINX_PORT = 20010
ENVOY_PORT = 20011
ADMIN_PORT = 20012
WRK = "wrk -t2 -c50 -d{d}s --latency http://127.0.0.1:{p}/"


def nginx_conf(out):
    conf = os.path.join(out, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2;
daemon off;
pid {out}/nginx.pid;
error_log {out}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  server {{ listen 127.0.0.1:{NGINX_PORT}; location / {{ return 200 "ok\\n"; }} }}
}}
""")
    return conf


def envoy_yaml(out, name, module_config=None):
    path = os.path.join(out, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(bootstrap(NGINX_PORT, json.dumps(module_config), with_module=module_config is not None,
                          admin_port=ADMIN_PORT, listen_port=ENVOY_PORT))
    return path


def admin(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}{path}", timeout=60) as r:
        return r.read().decode()


def start_envoy(envoy, module_dir, yaml, log, concurrency=2):
    env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=module_dir)
    p = subprocess.Popen([envoy, "-c", yaml, "--use-dynamic-base-id", "--concurrency", str(concurrency)],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if p.poll() is not None:
            sys.exit(f"envoy exited early, see {log}")
        try:
            if admin("/ready").strip() == "LIVE":
                return p
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("envoy not ready")


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wrk(seconds, port):
    out = subprocess.run(WRK.format(d=seconds, p=port), shell=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {}
    for pct, val, unit in re.findall(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M):
        lat[pct] = float(val) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]
    if "50" not in lat or "99" not in lat:
        sys.exit(f"no latency percentiles in wrk's output:\n{out}")
    return rps, lat.get("50"), lat.get("99"), out


def task_cpu(pid):
    """{tid: (name, run ns)} of every thread, from schedstat."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            ns = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
            out[int(tid)] = (name, ns)
        except OSError:
            pass
    return out


def loop_counts():
    return loop_counts_of(admin(LOOP_STATS))


def module_polls():
    out = {}
    for line in admin("/stats/prometheus").splitlines():
        m = re.match(r"envoy_dynamicmodulescustom_wakemeter_(worker_\d+)_poll_calls\{\} (\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


CGROUP = "wakemeter-envoy-experiment"


def cgroup2_root():
    for line in open("/proc/self/mounts"):
        dev, mnt, fstype = line.split()[:3]
        if fstype == "cgroup2":
            return mnt
    sys.exit("no cgroup2 filesystem mounted: the sidecar experiment selects nginx and Envoy by cgroup")


def sidecar(envoy, module_dir, wakemeter, out):
    # nginx and Envoy in one cgroup, which `ab --cgroup` records: the
    # control is nginx alone, the variant nginx behind Envoy.
    cg = os.path.join(cgroup2_root(), CGROUP)
    os.makedirs(cg, exist_ok=True)
    procs = os.path.join(cg, "cgroup.procs")

    def join_cgroup():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    nginx = subprocess.Popen(["nginx", "-c", nginx_conf(out)], start_new_session=True, preexec_fn=join_cgroup)
    time.sleep(1)
    try:
        plain = envoy_yaml(out, "sidecar")
        results = {}
        for label in ("sidecar", "concurrency"):
            if label == "sidecar":
                args = ["--cgroup", cg,
                        "--control-load", WRK.format(d=10, p=NGINX_PORT),
                        "--variant-load", WRK.format(d=10, p=ENVOY_PORT),
                        "--variant", f"echo $$ > {procs}; exec {envoy} -c {plain} --use-dynamic-base-id --concurrency 2"]
            else:
                args = ["--name", "envoy", "--match", "name", "--load", WRK.format(d=10, p=ENVOY_PORT),
                        "--control", f"exec {envoy} -c {plain} --use-dynamic-base-id --concurrency 1",
                        "--variant", f"exec {envoy} -c {plain} --use-dynamic-base-id --concurrency 2"]
            cmd = [wakemeter, "ab", "--runs", "3", "--dir", os.path.join(out, f"ab-{label}")] + args
            print("$ " + " ".join(f"'{a}'" if " " in a else a for a in cmd), flush=True)
            r = subprocess.run(cmd, capture_output=True, text=True)
            results[label] = r.stdout
            print(r.stdout, flush=True)
            if r.returncode != 0:
                print(r.stderr[-3000:])
        return results
    finally:
        stop(nginx)
        time.sleep(0.5)
        try:
            os.rmdir(cg)
        except OSError:
            pass


def loops(envoy, module_dir, wakemeter, out, seconds=30):
    nginx = subprocess.Popen(["nginx", "-c", nginx_conf(out)], start_new_session=True)
    time.sleep(1)
    p = start_envoy(envoy, module_dir, envoy_yaml(out, "loops", {"interval_ms": 1000, "ebpf": True}),
                    os.path.join(out, "loops-envoy.log"))
    try:
        time.sleep(3)
        watch_out = os.path.join(out, "loops-watch.ndjson")
        c0, m0 = loop_counts(), module_polls()
        watch = subprocess.Popen([wakemeter, "watch", "--pid", str(p.pid), "--every", "10s", "--json",
                                  "--seconds", str(seconds + 14)],
                                 stdout=open(watch_out, "w"), stderr=open(watch_out + ".err", "w"))
        # wait for the attach (stderr says so), then idle, load, idle
        deadline = time.monotonic() + 60
        while "attached" not in open(watch_out + ".err").read() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        rps, _, _, _ = wrk(seconds, ENVOY_PORT)
        watch.wait(timeout=seconds + 120)
        time.sleep(2)
        c1, m1 = loop_counts(), module_polls()
        reports = [json.loads(l) for l in open(watch_out) if l.strip()]
        # Sum epoll_wait calls per worker over the reports' windows, using
        # only windows that do not overlap the previous one.
        calls = {}
        covered_ns = 0
        last_end = 0
        for r in reports:
            iv = r.get("interval")
            if not iv:
                continue
            start = iv["end_monotonic_ns"] - iv["duration_ns"]
            if start < last_end:
                continue
            last_end = iv["end_monotonic_ns"]
            covered_ns += iv["duration_ns"]
            secs = iv["duration_ns"] / 1e9
            for t in iv["threads"]:
                m = re.match(r"wrk:worker_(\d+)$", t["name"])
                k = t.get("kernel")
                if m and k:
                    n = sum(s["calls_per_sec"] for s in k.get("calls_by_syscall", [])
                            if s["syscall"] in ("epoll_wait", "epoll_pwait", "epoll_pwait2")) * secs
                    calls[f"worker_{m.group(1)}"] = calls.get(f"worker_{m.group(1)}", 0) + n
        rows = []
        for w in sorted(c1):
            envoy_loops = c1[w] - c0.get(w, 0)
            mod = m1.get(w, 0) - m0.get(w, 0)
            ext = calls.get(w, 0)
            rows.append((w, envoy_loops, mod, mod / envoy_loops if envoy_loops else 0,
                         round(ext), ext / envoy_loops if envoy_loops else 0))
        print(f"\nloops: {seconds} s of `{WRK.format(d=seconds, p=ENVOY_PORT)}` ({rps:.0f} req/s); "
              f"watch covered {covered_ns / 1e9:.1f} s in {len(reports)} reports")
        print("| worker | Envoy loops (loop_duration_us count) | module eBPF epoll_wait | ratio | `wakemeter watch` eBPF epoll_wait | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        for w, e, mod, r1, ext, r2 in rows:
            print(f"| {w} | {e} | {mod} | {r1:.4f} | {ext} | {r2:.4f} |")
        return rows
    finally:
        stop(p)
        stop(nginx)


def module(envoy, module_dir, wakemeter, out, runs=3, seconds=10):
    nginx = subprocess.Popen(["nginx", "-c", nginx_conf(out)], start_new_session=True)
    time.sleep(1)
    rows = []
    try:
        for run in range(1, runs + 1):
            order = (False, True) if run % 2 else (True, False)
            for with_module in order:
                cfg = {"interval_ms": 1000} if with_module else None
                name = f"module-{'on' if with_module else 'off'}-{run}"
                p = start_envoy(envoy, module_dir, envoy_yaml(out, name, cfg), os.path.join(out, name + ".log"))
                time.sleep(2)
                before = task_cpu(p.pid)
                t0 = time.monotonic()
                rps, p50, p99, _ = wrk(seconds, ENVOY_PORT)
                t1 = time.monotonic()
                after = task_cpu(p.pid)
                envoy_ns = sum(after[t][1] - before[t][1] for t in after if t in before)
                own_ns = sum(after[t][1] - before[t][1] for t in after
                             if t in before and after[t][0] in ("wakemeter", "wm-publish"))
                hook = ""
                if with_module:
                    page = admin("/wakemeter")
                    m = re.search(r"stats hook on Envoy's main thread: last ([\d.]+) us, mean ([\d.]+) us, max ([\d.]+) us", page)
                    if m:
                        hook = f"{m.group(2)} / {m.group(3)}"
                stop(p)
                rows.append((run, with_module, rps, p50, p99, envoy_ns / 1e3 / (rps * (t1 - t0)),
                             own_ns / 1e9 / (t1 - t0) * 100, hook))
        print("\n| run | module | requests/s | p50 ms | p99 ms | Envoy CPU µs/request | module threads' CPU, % of a core | stats hook mean / max µs |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for run, on, rps, p50, p99, cpr, own, hook in rows:
            print(f"| {run} | {'loaded' if on else 'none'} | {rps:.0f} | {p50:.3f} | {p99:.3f} | {cpr:.1f} | "
                  f"{own:.3f} | {hook} |" if on else
                  f"| {run} | none | {rps:.0f} | {p50:.3f} | {p99:.3f} | {cpr:.1f} | - | - |")
        for on in (False, True):
            sel = [r for r in rows if r[1] == on]
            mean = lambda i: sum(r[i] for r in sel) / len(sel)
            print(f"mean {'loaded' if on else 'none'}: {mean(2):.0f} req/s, p99 {mean(4):.3f} ms, "
                  f"{mean(5):.1f} µs CPU/request" + (f", module {mean(6):.3f}% of a core" if on else ""))
        return rows
    finally:
        stop(nginx)


def main():
    envoy, module_dir, wakemeter, out = sys.argv[1:5]
    which = sys.argv[5:] or ["sidecar", "loops", "module"]
    os.makedirs(out, exist_ok=True)
    for w in which:
        print(f"== {w} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)", flush=True)
        {"sidecar": sidecar, "loops": loops, "module": module}[w](envoy, module_dir, wakemeter, out)


if __name__ == "__main__":
    main()
