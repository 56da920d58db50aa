#!/usr/bin/env python3
"""End-to-end test of libwakemeter_envoy.so inside a real Envoy.

Run by scripts/envoy-test.sh (which installs Envoy and builds the module):

    envoy_e2e.py ENVOY_BIN MODULE_DIR [--ebpf]

Every port is ephemeral (port 0, read back from Envoy's admin). Steps:
 1. a bad module config is refused by `envoy --mode validate`, naming the field;
 2. Envoy (2 workers) with the module proxies a bounded load to an upstream
    served by this script; while it runs, /proc/<pid>/task/*/schedstat is
    read every 10 ms;
 3. GET /wakemeter names the dispatchers (main_thread, worker_N) with the
    thread ids Envoy's threads have; ?format=json is a Report whose
    per-thread CPU over its window agrees with schedstat (interpolated at
    the window's ends) within 3% or 5 ms;
 4. /stats/prometheus carries the module's series; with --ebpf, the
    module's poll_calls counter of each worker agrees with Envoy's own
    loop count (histogram count of listener_manager.worker_N.dispatcher.
    loop_duration_us) within 5% over the load window;
 5. SIGTERM: Envoy exits 0;
 6. a panic injected in the admin hook, then in the main-thread stats hook
    (test-only config) gives 503 on the admin path, one error line in
    Envoy's log, and Envoy keeps proxying.
Prints one `envoy-e2e: ok` line with the figures, or fails with the reason.
"""

import http.client
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HANG_GUARD_S = 180


def fail(msg):
    print(f"envoy-e2e: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_upstream():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def bootstrap(upstream_port, module_config, with_module=True, admin_port=0, listen_port=0):
    """Envoy's bootstrap YAML: a listener proxying to upstream_port, the admin
    port, and (with_module) the wakemeter module given the JSON text
    module_config. Port 0: the kernel picks one."""
    ext = ""
    if with_module:
        ext = f"""
bootstrap_extensions:
- name: envoy.bootstrap.dynamic_modules
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.bootstrap.dynamic_modules.v3.DynamicModuleBootstrapExtension
    dynamic_module_config: {{name: wakemeter_envoy}}
    extension_name: wakemeter
    extension_config:
      "@type": type.googleapis.com/google.protobuf.StringValue
      value: {json.dumps(module_config)}
"""
    return f"""
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}
stats_flush_interval: 1s
enable_dispatcher_stats: true
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: {listen_port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, route: {{cluster: upstream}}}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: upstream
    type: STATIC
    load_assignment:
      cluster_name: upstream
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream_port}}}}}}}}}]}}]
{ext}"""


class Envoy:
    def __init__(self, binary, module_dir, workdir, name, yaml):
        self.dir = workdir
        self.cfg = os.path.join(workdir, f"{name}.yaml")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.addr_path = os.path.join(workdir, f"{name}.admin")
        with open(self.cfg, "w") as f:
            f.write(yaml)
        env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=module_dir)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "-c", self.cfg, "--use-dynamic-base-id", "--concurrency", "2",
             "--admin-address-path", self.addr_path, "-l", "info"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            if self.proc.poll() is not None:
                fail(f"envoy exited ({self.proc.returncode}) before serving:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                fail("envoy not ready within the hang guard")
            if os.path.exists(self.addr_path) and open(self.addr_path).read().strip():
                try:
                    if self.get("/ready")[0] == 200:
                        break
                except OSError:
                    pass
            time.sleep(0.05)
        listeners = json.loads(self.get("/listeners?format=json")[1])
        sock = listeners["listener_statuses"][0]["local_address"]["socket_address"]
        self.listener_port = sock["port_value"]

    def admin(self):
        host, port = open(self.addr_path).read().strip().rsplit(":", 1)
        return host, int(port)

    def get(self, path):
        host, port = self.admin()
        c = http.client.HTTPConnection(host, port, timeout=60)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        return r.status, body

    def log_text(self):
        self.log.flush()
        return open(self.log_path).read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                fail("envoy did not exit within 60 s of SIGTERM")
        return self.proc.returncode


def schedstat_poller(pid, samples, stop):
    """Every 10 ms: (CLOCK_MONOTONIC ns, {tid: run ns}) of every thread."""
    task = f"/proc/{pid}/task"
    while not stop.is_set():
        t0 = time.monotonic_ns()
        row = {}
        try:
            for tid in os.listdir(task):
                try:
                    with open(f"{task}/{tid}/schedstat") as f:
                        row[int(tid)] = int(f.read().split()[0])
                except OSError:
                    pass
        except OSError:
            return
        t1 = time.monotonic_ns()
        samples.append(((t0 + t1) // 2, row))
        time.sleep(0.01)


def interpolate(samples, tid, t):
    """The thread's run ns at monotonic time t, interpolated."""
    pts = [(ts, row[tid]) for ts, row in samples if tid in row]
    for (ta, va), (tb, vb) in zip(pts, pts[1:]):
        if ta <= t <= tb:
            return va + (vb - va) * (t - ta) / max(tb - ta, 1)
    return None


def drive_load(port, seconds, clients=2):
    done = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = 0
        while time.monotonic() < stop_at:
            c.request("GET", "/")
            r = c.getresponse()
            r.read()
            if r.status != 200:
                fail(f"proxied request answered {r.status}")
            n += 1
        c.close()
        with lock:
            done[0] += n

    ts = [threading.Thread(target=client) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return done[0]


LOOP_STATS = "/stats?format=json&histogram_buckets=cumulative&filter=dispatcher.loop_duration_us"


def loop_counts(envoy):
    """Envoy's own loop count per worker: histogram sample counts."""
    return loop_counts_of(envoy.get(LOOP_STATS)[1])


def loop_counts_of(stats_json):
    """{worker_N: loops} from the JSON of the admin's LOOP_STATS page."""
    body = json.loads(stats_json)
    counts = {}
    for s in body.get("stats", []):
        for h in s.get("histograms", []) if isinstance(s.get("histograms"), list) else []:
            m = re.match(r".*worker_(\d+)\.dispatcher\.loop_duration_us$", h["name"])
            if m and h.get("buckets"):
                counts[f"worker_{m.group(1)}"] = h["buckets"][-1]["cumulative"]
    return counts


def prom_values(envoy, suffix):
    """{role: value} of the module's per-dispatcher series `suffix`."""
    text = envoy.get("/stats/prometheus")[1]
    out = {}
    for line in text.splitlines():
        m = re.match(r"envoy_dynamicmodulescustom_wakemeter_(main_thread|worker_\d+)_" + suffix + r"\{\} (\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def main():
    if len(sys.argv) < 3:
        fail("usage: envoy_e2e.py ENVOY_BIN MODULE_DIR [--ebpf]")
    binary, module_dir = sys.argv[1], sys.argv[2]
    ebpf = "--ebpf" in sys.argv[3:]
    threading.Timer(HANG_GUARD_S * 2, lambda: os._exit(3)).start()
    work = tempfile.mkdtemp(prefix="wakemeter-envoy-")
    upstream, up_port = start_upstream()

    # 1. A bad config: refused, naming the field.
    bad = os.path.join(work, "bad.yaml")
    with open(bad, "w") as f:
        f.write(bootstrap(up_port, json.dumps({"interval_ms": "fast"})))
    env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=module_dir)
    r = subprocess.run([binary, "-c", bad, "--mode", "validate", "--use-dynamic-base-id"],
                       capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)
    out = r.stdout + r.stderr
    if r.returncode == 0 or "field `interval_ms`" not in out:
        fail(f"a bad config was not refused naming its field (rc {r.returncode}):\n{out[-2000:]}")
    refusal = next((l for l in out.splitlines() if "interval_ms" in l), "")

    # 2. Envoy with the module, under load, beside /proc.
    config = {"interval_ms": 500, "ebpf": ebpf,
              "thresholds": {"window": {"secs": 4, "nanos": 0}}}
    envoy = Envoy(binary, module_dir, work, "module", bootstrap(up_port, json.dumps(config)))
    log = envoy.log_text()
    if "wakemeter: sampling Envoy's threads" not in log:
        fail(f"the module did not start:\n{log[-3000:]}")
    samples, stop = [], threading.Event()
    poller = threading.Thread(target=schedstat_poller, args=(envoy.proc.pid, samples, stop))
    poller.start()
    time.sleep(1.5)  # two samples at least: the workers are found by name
    loops0, polls0 = loop_counts(envoy), prom_values(envoy, "poll_calls")
    requests = drive_load(envoy.listener_port, 5, clients=4)
    # Both counts lag: Envoy flushes histograms each second, the module
    # publishes after each sample. Wait for both to pass the load.
    time.sleep(2.5)
    loops1, polls1 = loop_counts(envoy), prom_values(envoy, "poll_calls")

    # 3. /wakemeter names the dispatchers; the JSON agrees with /proc.
    status, page = envoy.get("/wakemeter")
    if status != 200:
        fail(f"/wakemeter answered {status}: {page}")
    comm = {}
    for tid in os.listdir(f"/proc/{envoy.proc.pid}/task"):
        comm[int(tid)] = open(f"/proc/{envoy.proc.pid}/task/{tid}/comm").read().strip()
    for line_role, want in (("main_thread", "envoy"), ("worker_0", "wrk:worker_0"), ("worker_1", "wrk:worker_1")):
        m = re.search(rf"^\s+{line_role}\s+(\d+)\s", page, re.M)
        if not m:
            fail(f"/wakemeter does not list {line_role}:\n{page}")
        if comm.get(int(m.group(1))) != want:
            fail(f"{line_role} is tid {m.group(1)}, whose name is {comm.get(int(m.group(1)))!r}, not {want!r}")
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        status, body = envoy.get("/wakemeter?format=json")
        if status != 200:
            fail(f"/wakemeter?format=json answered {status}: {body[:500]}")
        report = json.loads(body)
        iv = report.get("interval")
        if iv and samples and iv["end_monotonic_ns"] - iv["duration_ns"] > samples[0][0] \
                and iv["end_monotonic_ns"] < samples[-1][0]:
            break
        if time.monotonic() > deadline:
            fail("no report window inside the /proc polling window")
        time.sleep(0.2)
    if report.get("schema_version") is None or report["target"]["pid"] != envoy.proc.pid:
        fail(f"the JSON is not a Report of Envoy's process: {body[:300]}")
    start_ns = iv["end_monotonic_ns"] - iv["duration_ns"]
    checked = 0
    worst = 0.0
    for t in iv["threads"]:
        if comm.get(t["tid"]) not in ("envoy", "wrk:worker_0", "wrk:worker_1"):
            continue
        a = interpolate(samples, t["tid"], start_ns)
        b = interpolate(samples, t["tid"], iv["end_monotonic_ns"])
        if a is None or b is None:
            fail(f"no /proc samples around the window for tid {t['tid']}")
        ref = b - a
        diff = abs(t["cpu_time_ns"] - ref)
        if diff > max(0.03 * ref, 5e6):
            fail(f"thread {comm[t['tid']]} ({t['tid']}): wakemeter {t['cpu_time_ns']} ns, /proc {ref:.0f} ns")
        worst = max(worst, diff / max(ref, 1))
        checked += 1
    if checked != 3:
        fail(f"the report's window lists {checked} of Envoy's 3 dispatchers")

    # 4. Envoy's /stats/prometheus carries the module's series.
    prom = envoy.get("/stats/prometheus")[1]
    for series in ("wakemeter_worker_0_cpu_permille", "wakemeter_worker_1_voluntary_switches_per_sec",
                   "wakemeter_main_thread_run_queue_wait_permille", "wakemeter_findings_busy_poller",
                   "wakemeter_findings_raised_cpu_hog", "wakemeter_sampler_cpu_ppm"):
        if f"envoy_dynamicmodulescustom_{series}" not in prom:
            fail(f"/stats/prometheus lacks {series}")
    agreement = "no eBPF: loop counts not compared"
    if ebpf:
        ratios = []
        for w in ("worker_0", "worker_1"):
            envoy_loops = loops1.get(w, 0) - loops0.get(w, 0)
            ours = polls1.get(w, 0) - polls0.get(w, 0)
            if envoy_loops < 1000:
                # A worker the kernel gave no connection: a few timer
                # loops, where a one-sample lag is a large share.
                continue
            ratio = ours / envoy_loops
            if abs(ratio - 1) > 0.05:
                fail(f"{w}: module epoll_wait calls {ours} vs Envoy loops {envoy_loops} (ratio {ratio:.3f})")
            ratios.append(f"{w} {ours}/{envoy_loops} = {ratio:.3f}")
        if not ratios:
            fail(f"no worker ran 1000 loops under load: {loops0} -> {loops1}")
        agreement = "epoll_wait calls / Envoy loops: " + ", ".join(ratios)
    cost = re.search(r"stats hook on Envoy's main thread: .*", page)

    stop.set()
    poller.join()
    rc = envoy.stop()
    if rc != 0:
        fail(f"envoy exited {rc} after SIGTERM:\n{envoy.log_text()[-2000:]}")
    if "wakemeter: internal error" in envoy.log_text():
        fail("the module reported an internal error")

    # 6. A panic in the admin hook, then in the main-thread stats hook:
    # 503, one log line, Envoy keeps serving.
    panic_lines = []
    for site in ("admin_request", "publish"):
        config = {"interval_ms": 500, "test_panic": site}
        envoy = Envoy(binary, module_dir, work, f"panic-{site}", bootstrap(up_port, json.dumps(config)))
        deadline = time.monotonic() + HANG_GUARD_S
        while site == "publish" and "wakemeter: internal error" not in envoy.log_text():
            if time.monotonic() > deadline:
                fail("the injected publish panic never happened")
            time.sleep(0.1)
        for _ in range(2):
            status, body = envoy.get("/wakemeter")
            if status != 503 or "disabled" not in body:
                fail(f"after the injected {site} panic /wakemeter answered {status}: {body}")
        if drive_load(envoy.listener_port, 1) < 1 or envoy.get("/ready")[0] != 200:
            fail(f"envoy stopped serving after the module's {site} panic")
        rc = envoy.stop()
        lines = [l for l in envoy.log_text().splitlines() if "wakemeter: internal error" in l]
        if rc != 0 or len(lines) != 1 or "panicked" in envoy.log_text():
            fail(f"after the injected {site} panic: rc {rc}, {len(lines)} error lines:\n{envoy.log_text()[-2000:]}")
        panic_lines.append(lines[0])
    upstream.shutdown()

    print(f"envoy-e2e: ok: {requests} requests proxied; dispatchers named; per-thread CPU of 3 dispatchers "
          f"within {worst * 100:.2f}% of /proc schedstat over a {iv['duration_ns'] / 1e9:.1f} s window; "
          f"{agreement}; {cost.group(0) if cost else ''}")
    print(f"envoy-e2e: bad config refused: {refusal.strip()[-160:]}")
    for line in panic_lines:
        print(f"envoy-e2e: injected panic: 503 on /wakemeter, Envoy kept serving, one log line: {line.strip()[-150:]}")
    os._exit(0)


if __name__ == "__main__":
    main()
