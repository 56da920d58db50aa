//! Against the real Prometheus server (Debian package `prometheus`,
//! installed through `scripts/prereqs.sh` when missing): it scrapes the
//! endpoint on loopback, and PromQL through its HTTP API returns the
//! series and values this test made. `promtool check metrics` lints the
//! text format. No timing is asserted; waits are bounded.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use wakemeter::{Sampler, SamplerBuilder, Target};
use wakemeter_prometheus::{Exporter, ExporterConfig, MetricsServer};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs the Debian package through the project's own script when
/// the tools are missing.
fn ensure_prometheus() {
    // The tests of this file run in parallel: one installs, the others
    // wait for it (two apt-get runs at once fail on the dpkg lock).
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one_at_a_time = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if have("prometheus") && have("promtool") {
        return;
    }
    let prereqs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/prereqs.sh");
    let ok = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && apt_install prometheus",
            prereqs.display()
        ))
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok && have("prometheus") && have("promtool"),
        "MISSING: prometheus (Debian package)"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A GET over HTTP/1.0; returns the body, or `None` if not reachable.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    c.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.split(' ')
        .nth(1)
        .is_some_and(|code| code == "200")
        .then(|| body.to_string())
}

fn encode_query(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The Prometheus server, killed and its data removed on drop.
struct Server {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    fn start(target: SocketAddr) -> Server {
        // One directory per server: the tests of this file run at once.
        static SERVERS: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "wakemeter-prom-test-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: wakemeter\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        Server { child, dir, addr }
    }

    /// The result vector of an instant query.
    fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let Some(body) = http_get(
            self.addr,
            &format!("/api/v1/query?query={}", encode_query(q)),
        ) else {
            return Vec::new();
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The single value of `q` evaluated at `at` (Unix seconds), if one.
    fn value_at(&self, q: &str, at: f64) -> Option<f64> {
        let body = http_get(
            self.addr,
            &format!("/api/v1/query?query={}&time={at:.3}", encode_query(q)),
        )?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        match v["data"]["result"].as_array()?.as_slice() {
            [one] => one["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// Waits (bounded) until `q` returns exactly one value, and returns it.
    fn wait_for_one(&self, q: &str) -> f64 {
        let start = Instant::now();
        loop {
            let r = self.query(q);
            let got: Vec<f64> = r
                .iter()
                .filter_map(|s| s["value"][1].as_str()?.parse().ok())
                .collect();
            if let [v] = got[..] {
                return v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "`{q}` never returned one value: last {r:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits (bounded) until `q` returns exactly the one value `want`.
    fn wait_for(&self, q: &str, want: f64) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let r = self.query(q);
            let got: Vec<f64> = r
                .iter()
                .filter_map(|s| s["value"][1].as_str()?.parse().ok())
                .collect();
            if got == [want] {
                return r;
            }
            if start.elapsed() > Duration::from_secs(300) {
                let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                panic!("`{q}` never returned [{want}]: last {r:?}\nprometheus log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// `promtool check metrics` on the text format the endpoint at `addr`
/// serves to plain clients: no complaint at all.
fn promtool_check(addr: SocketAddr) {
    let text = http_get(addr, "/metrics").unwrap();
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn prometheus_scrapes_the_endpoint_and_promql_sees_the_values() {
    ensure_prometheus();
    let s = SamplerBuilder::new()
        .with_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    // Known counts: 7 wakeups of a loop probe (3 with a zero timeout),
    // 4 sleeps of 1 ms.
    let mut io = s.loop_probe("io-12").unwrap();
    for i in 0..7 {
        io.before_wait(Some(if i < 3 {
            Duration::ZERO
        } else {
            Duration::from_millis(1)
        }));
        std::thread::sleep(Duration::from_millis(if i < 3 { 0 } else { 2 }));
        io.after_wait(1);
    }
    let mut nap = s.sleep_probe("nap").unwrap();
    for _ in 0..4 {
        nap.sleep(Duration::from_millis(1));
    }
    let gate = std::sync::Arc::new(std::sync::Barrier::new(4));
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let g = gate.clone();
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    g.wait();
                })
                .unwrap()
        })
        .collect();
    let _sampling = s.start().unwrap();
    let exporter = Exporter::new(ExporterConfig::default()).unwrap();
    let _updates = exporter.spawn_updater(s.clone()).unwrap();
    let endpoint = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), exporter.clone()).unwrap();
    let prom = Server::start(endpoint.local_addr());

    prom.wait_for("up{job=\"wakemeter\"}", 1.0);
    prom.wait_for("wakemeter_loop_wakeups_total{loop=\"io-{n}\"}", 7.0);
    prom.wait_for(
        "wakemeter_loop_zero_timeout_waits_total{loop=\"io-{n}\"}",
        3.0,
    );
    prom.wait_for("wakemeter_loop_events_total{loop=\"io-{n}\"}", 7.0);
    prom.wait_for("wakemeter_sleep_calls_total{sleep_site=\"nap\"}", 4.0);
    prom.wait_for("wakemeter_thread_group_threads{thread=\"worker-{n}\"}", 3.0);
    let kinds = wakemeter::FindingKind::ALL.len() * wakemeter::Severity::ALL.len();
    prom.wait_for("count(wakemeter_findings)", kinds as f64);
    prom.wait_for(
        &format!(
            "count(wakemeter_target_info{{pid=\"{}\"}})",
            std::process::id()
        ),
        1.0,
    );
    // A histogram PromQL can take quantiles of: the 4 timed-out waits
    // returned late by 1 ms or so, well under 1 s.
    prom.wait_for(
        "wakemeter_loop_poll_delay_seconds_count{loop=\"io-{n}\"}",
        7.0,
    );
    prom.wait_for("histogram_quantile(0.5, wakemeter_loop_poll_delay_seconds_bucket{loop=\"io-{n}\"}) < 1", {
        let r = prom.query("histogram_quantile(0.5, wakemeter_loop_poll_delay_seconds_bucket{loop=\"io-{n}\"})");
        r.first().and_then(|s| s["value"][1].as_str()?.parse().ok()).unwrap_or(f64::NAN)
    });
    // The scrape itself was clean: Prometheus parsed the OpenMetrics text.
    let targets = http_get(prom.addr, "/api/v1/targets").unwrap();
    let t: serde_json::Value = serde_json::from_str(&targets).unwrap();
    let active = &t["data"]["activeTargets"][0];
    assert_eq!(active["health"], "up", "{active}");
    assert_eq!(active["lastError"], "", "{active}");

    // promtool lints the text format the endpoint serves to plain clients.
    promtool_check(endpoint.local_addr());
    gate.wait();
    workers.into_iter().for_each(|w| w.join().unwrap());
}

/// A shell that burns some CPU in its own loop, says so with a file, then
/// waits on a `sleep` child: its CPU time stops growing.
struct Burner {
    child: Child,
    done: PathBuf,
}

impl Burner {
    fn start(tag: &str) -> Burner {
        let done =
            std::env::temp_dir().join(format!("wakemeter-prom-burn-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&done);
        let child = Command::new("sh")
            .process_group(0)
            .arg("-c")
            .arg(format!(
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; : > '{}'; sleep 60",
                done.display()
            ))
            .spawn()
            .unwrap();
        Burner { child, done }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (bounded) until the loop is over.
    fn wait_done(&self) {
        let start = Instant::now();
        while !self.done.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "the loop never ended"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// CPU time of the shell itself (utime + stime of /proc/PID/stat), in seconds.
    fn proc_cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // Fields 14 and 15 of stat; 3 is the first after the name.
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        ticks as f64 / clock_ticks_per_sec()
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        // The shell and its `sleep`: the whole process group.
        // SAFETY: kill has no memory effects; the group is this child's own.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.done);
    }
}

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions and touches no memory of ours.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert!(t > 0);
    t as f64
}

#[test]
fn two_processes_are_two_sets_of_series_that_agree_with_proc() {
    ensure_prometheus();
    let burners = [Burner::start("a"), Burner::start("b")];
    for b in &burners {
        b.wait_done();
    }
    let samplers: Vec<Sampler> = burners
        .iter()
        .map(|b| {
            SamplerBuilder::new()
                .with_target(Target::Pid(b.pid()))
                .with_interval(Duration::from_millis(200))
                .build()
                .unwrap()
        })
        .collect();
    let _sampling: Vec<_> = samplers.iter().map(|s| s.start().unwrap()).collect();
    let exporter = Exporter::new(ExporterConfig::default().with_per_process(true)).unwrap();
    // The set a watcher keeps: the samplers whose process still runs.
    let set = Arc::new(Mutex::new(samplers.clone()));
    let followed = set.clone();
    let _updates = exporter
        .spawn_set_updater(Duration::from_millis(200), move || {
            let set = followed.lock().unwrap();
            set.iter().filter(|s| s.is_running()).cloned().collect()
        })
        .unwrap();
    let endpoint = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), exporter.clone()).unwrap();
    let prom = Server::start(endpoint.local_addr());

    prom.wait_for("up{job=\"wakemeter\"}", 1.0);
    prom.wait_for("count(wakemeter_process_threads{process=\"sh\"})", 2.0);
    for b in &burners {
        let labels = format!("pid=\"{}\",process=\"sh\"", b.pid());
        let ours = prom.wait_for_one(&format!("wakemeter_process_cpu_seconds_total{{{labels}}}"));
        let proc = b.proc_cpu_seconds();
        // /proc/PID/stat counts in clock ticks (utime + stime, the
        // scheduler's runtime cut into ticks): two ticks, and 2 % for a
        // loaded machine's rounding, is the tolerance.
        let tick = 1.0 / clock_ticks_per_sec();
        assert!(proc > 0.0, "the loop burned no CPU? {proc}");
        eprintln!(
            "process {}: wakemeter {ours} s, /proc/PID/stat {proc} s",
            b.pid()
        );
        assert!(
            (ours - proc).abs() <= 2.0 * tick + 0.02 * proc,
            "process {}: wakemeter {ours} s, /proc/PID/stat {proc} s",
            b.pid()
        );
        prom.wait_for(&format!("wakemeter_process_threads{{{labels}}}"), 1.0);
        prom.wait_for(
            &format!("count(wakemeter_thread_cpu_seconds_total{{{labels},thread=\"sh\"}})"),
            1.0,
        );
    }
    promtool_check(endpoint.local_addr());

    // One exits: its series leave, the other's stay.
    let [a, b] = burners;
    let gone = b.pid();
    drop(b);
    prom.wait_for("count(wakemeter_process_threads{process=\"sh\"})", 1.0);
    prom.wait_for(
        &format!("count(wakemeter_process_threads{{pid=\"{}\"}})", a.pid()),
        1.0,
    );
    assert!(
        prom.query(&format!("wakemeter_process_threads{{pid=\"{gone}\"}}"))
            .is_empty()
    );
    drop(set);
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Raises this process's soft descriptor limit to `want` (at most the
/// hard limit): the hostile clients and their server ends take two each.
fn raise_fd_limit(want: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own and nothing else.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    if r.rlim_cur < want {
        r.rlim_cur = want.min(r.rlim_max);
        // SAFETY: setrlimit reads the struct we own.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
    }
}

/// `idle` connections that never send a byte and `trickling` ones that
/// send one byte of a request head a second, held open (each reconnected
/// when the server closes it) by one thread until dropped.
struct Hostile {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Hostile {
    fn start(addr: SocketAddr, idle: usize, trickling: usize) -> Hostile {
        let connect = move || {
            let c = TcpStream::connect(addr).unwrap();
            c.set_nonblocking(true).unwrap();
            c
        };
        let mut idle: Vec<TcpStream> = (0..idle).map(|_| connect()).collect();
        let mut slow: Vec<(TcpStream, usize)> = (0..trickling).map(|_| (connect(), 0)).collect();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let head = b"GET /metrics HTTP/1.1\r\nX-Slow: ";
            let mut reconnects = 0u64;
            let mut last_byte = Instant::now();
            let mut buf = [0u8; 512];
            while !flag.load(Ordering::Relaxed) {
                for c in &mut idle {
                    // Closed by the server (its deadline): data or EOF.
                    if !matches!(c.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    {
                        *c = connect();
                        reconnects += 1;
                    }
                }
                if last_byte.elapsed() >= Duration::from_secs(1) {
                    last_byte = Instant::now();
                    for (c, i) in &mut slow {
                        let byte = head.get(*i).copied().unwrap_or(b'a');
                        let closed = !matches!(c.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
                        if closed || c.write(&[byte]).is_err() {
                            *c = connect();
                            *i = 0;
                            reconnects += 1;
                        } else {
                            *i += 1;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            reconnects
        });
        Hostile {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; returns how many times a connection was re-opened.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap())
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The acceptance test of the endpoint: 200 idle and 10 trickling
/// connections held open while the real Prometheus scrapes every second,
/// until it has stored 30 scrapes; its own record shows every one of them
/// succeeded (`up` always 1).
#[test]
fn prometheus_misses_no_scrape_while_200_idle_and_10_trickling_clients_hold_on() {
    ensure_prometheus();
    raise_fd_limit(4096);
    let s = SamplerBuilder::new()
        .with_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let _sampling = s.start().unwrap();
    let exporter = Exporter::new(ExporterConfig::default()).unwrap();
    let _updates = exporter.spawn_updater(s.clone()).unwrap();
    let endpoint = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), exporter.clone()).unwrap();
    let hostile = Hostile::start(endpoint.local_addr(), 200, 10);
    let prom = Server::start(endpoint.local_addr());
    prom.wait_for("up{job=\"wakemeter\"}", 1.0);
    // 30 scrapes stored after `from`, however long a loaded machine takes
    // to make them (Prometheus's own record, read back by PromQL over the
    // range since `from`); a scrape that failed is one with `up` 0.
    let from = unix_now();
    let over = |to: f64| format!("{:.0}s", (to - from).ceil().max(1.0));
    let start = Instant::now();
    let (to, scrapes) = loop {
        let to = unix_now();
        let q = format!("count_over_time(up{{job=\"wakemeter\"}}[{}])", over(to));
        if let Some(n) = prom.value_at(&q, to).filter(|n| *n >= 30.0) {
            break (to, n);
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "Prometheus stored fewer than 30 scrapes in 10 minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let stats = endpoint.stats();
    let reconnects = hostile.stop();
    let at = |q: &str| {
        let start = Instant::now();
        loop {
            if let Some(v) = prom.value_at(q, to) {
                return v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "`{q}` gave no value"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    let range = over(to);
    let worst = at(&format!("min_over_time(up{{job=\"wakemeter\"}}[{range}])"));
    let slowest = at(&format!(
        "max_over_time(scrape_duration_seconds{{job=\"wakemeter\"}}[{range}])"
    ));
    eprintln!(
        "{range} under 200 idle + 10 trickling clients: {scrapes} scrapes, min up {worst}, \
         slowest scrape {slowest:.4} s; endpoint {stats:?}; {reconnects} hostile reconnects"
    );
    assert_eq!(worst, 1.0, "a scrape failed");
    // The hostile clients were there all along: the server cut them at
    // its deadline and they came back.
    assert!(stats.connections >= 210, "{stats:?}");
    assert!(stats.timeouts > 0 && reconnects > 0, "{stats:?}");
}
