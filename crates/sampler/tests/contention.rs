//! Run-queue contention from outside the process says who competes, on
//! real processes: a busy shell loop pinned to one CPU beside another
//! (affinity and the competitor by pid), one in a cgroup with a CPU quota
//! (throttling, checked against the cgroup's own `cpu.stat`), and one
//! beside two unpinned busy loops (the competitors by pid). Each test
//! samples until a report names what it asserts on, with a hang guard of
//! minutes: on a busy machine other processes may outrank the test's own
//! competitors for a while.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wakemeter::{Finding, FindingKind, Sampler, SamplerBuilder, Target, Thresholds};

/// How long a test samples for the report it waits for, at most.
const HANG_GUARD: Duration = Duration::from_secs(240);

/// A busy shell loop, killed and reaped on drop.
struct Busy(Child);

impl Busy {
    /// `sh` spinning forever, pinned to `cpus` when given (`taskset -c`).
    fn spawn(cpus: Option<&str>) -> Busy {
        let mut cmd = match cpus {
            Some(list) => {
                let mut c = Command::new("taskset");
                c.args(["-c", list, "sh"]);
                c
            }
            None => Command::new("sh"),
        };
        cmd.args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        Busy(cmd.spawn().expect("taskset and sh run"))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One test at a time: each one's busy loops would compete with the others'.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn thresholds() -> Thresholds {
    // A busy loop beside `stress-ng --cpu 8` and builds gets 3 to 10% of a
    // core: below the default 5% a thread must use to be named, the
    // finding came and went. What these tests check is who competes.
    Thresholds::default()
        .with_window(Duration::from_secs(2))
        .with_min_window(Duration::from_secs(1))
        .with_run_queue_min_cpu_percent(1.0)
}

fn sampler_of(pid: u32) -> Sampler {
    SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_interval(Duration::from_millis(100))
        .with_thresholds(thresholds())
        .build()
        .expect("sampler of the busy loop")
}

/// Samples `pid` until a run-queue contention finding on it satisfies
/// `wanted` (each stored snapshot diagnosed once, as a report would),
/// and returns it; panics with the last findings after [`HANG_GUARD`].
fn contention_until(pid: u32, wanted: impl Fn(&Finding) -> bool) -> Finding {
    let s = sampler_of(pid);
    let start = Instant::now();
    let mut last = Vec::new();
    let mut samples = 0u32;
    while start.elapsed() < HANG_GUARD {
        s.sample_now().expect("the busy loop is alive");
        samples += 1;
        std::thread::sleep(Duration::from_millis(100));
        // A report a second, as `wakemeter watch` prints them, once the
        // findings window is full.
        if samples < 20 || !samples.is_multiple_of(10) {
            continue;
        }
        last = s.findings();
        if let Some(f) = last
            .iter()
            .find(|f| f.kind == FindingKind::RunQueueContention && wanted(f))
        {
            return f.clone();
        }
    }
    panic!("no report named it in {HANG_GUARD:?}: last findings {last:#?}");
}

#[test]
fn pinned_beside_a_busy_process_names_the_affinity_and_the_competitor() {
    let _one = one_at_a_time();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online CPUs");
    if online.trim() == "0" {
        eprintln!("SKIPPED: one CPU only, no affinity can be narrower than the machine");
        return;
    }
    let target = Busy::spawn(Some("0"));
    let competitor = Busy::spawn(Some("0"));
    let named = format!("(pid {})", competitor.pid());
    let f = contention_until(target.pid(), |f| f.summary.contains(&named));
    assert!(
        f.summary
            .contains("its CPU affinity allows 1 of the machine's"),
        "{f:#?}"
    );
    assert_eq!(f.evidence("allowed_cpus"), Some(1.0), "{f:#?}");
    assert!(f.advice.contains("taskset"), "{f:#?}");
    assert!(
        f.advice.contains("Other processes take the cores"),
        "{f:#?}"
    );
}

#[test]
fn beside_busy_processes_names_them() {
    let _one = one_at_a_time();
    let target = Busy::spawn(None);
    // Three busy loops want the machine's CPUs (two on the CI machine).
    let a = Busy::spawn(None);
    let b = Busy::spawn(None);
    let (pa, pb) = (format!("(pid {})", a.pid()), format!("(pid {})", b.pid()));
    // The finding names the three busiest others. On a machine with more
    // busy processes than these two (`stress-ng --cpu 8`, builds), they
    // share the top with those, and a report naming both may not come in
    // minutes: one of them, named by pid over the span, is what to wait for.
    // The busiest of them used a busy loop's share of the two CPUs or more
    // (5% is a share of 40 runnable loops).
    let f = contention_until(target.pid(), |f| {
        (f.summary.contains(&pa) || f.summary.contains(&pb))
            && f.summary.contains("over the last")
            && f.evidence("top_competitor_cpu_percent")
                .is_some_and(|c| c >= 5.0)
    });
    assert!(f.summary.contains("other processes: load"), "{f:#?}");
    let who = f.summary.split_once("Who competes:").map(|(_, w)| w);
    assert!(
        who.is_some_and(|w| !w.contains("affinity") && !w.contains("quota")),
        "neither confines it: {f:#?}"
    );
    assert!(
        f.advice.starts_with("Other processes take the cores"),
        "{f:#?}"
    );
}

/// A cgroup made for one test (cgroup v1 `cpu` or v2 with the cpu
/// controller), removed on drop once its process is gone.
struct QuotaCgroup {
    dir: std::path::PathBuf,
    v1: bool,
}

impl QuotaCgroup {
    /// A child cgroup allowing `quota_us` per `period_us`; `None` (with
    /// the reason) where this machine or user cannot make one.
    fn new(quota_us: u64, period_us: u64) -> Result<QuotaCgroup, String> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(|e| e.to_string())?;
        let name = format!("wakemeter-contention-{}", std::process::id());
        let v1 = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu")).then(|| f[1])
        });
        let (dir, v1) = match v1 {
            Some(root) => (std::path::Path::new(root).join(&name), true),
            None => {
                let root = mounts
                    .lines()
                    .find_map(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        (f.len() > 2 && f[2] == "cgroup2").then(|| f[1])
                    })
                    .ok_or("no cgroup filesystem with the cpu controller")?;
                let root = std::path::Path::new(root);
                let controllers = std::fs::read_to_string(root.join("cgroup.subtree_control"))
                    .map_err(|e| format!("cgroup v2 without subtree_control: {e}"))?;
                if !controllers.split_whitespace().any(|c| c == "cpu") {
                    return Err("cgroup v2 without the cpu controller enabled".into());
                }
                (root.join(&name), false)
            }
        };
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create a cgroup (root?): {e}"))?;
        let cg = QuotaCgroup { dir, v1 };
        let written = if cg.v1 {
            std::fs::write(cg.dir.join("cpu.cfs_period_us"), period_us.to_string()).and_then(|()| {
                std::fs::write(cg.dir.join("cpu.cfs_quota_us"), quota_us.to_string())
            })
        } else {
            std::fs::write(cg.dir.join("cpu.max"), format!("{quota_us} {period_us}"))
        };
        written.map_err(|e| format!("cannot set the quota: {e}"))?;
        Ok(cg)
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .expect("move into the cgroup");
    }

    /// Periods throttled so far, from the cgroup's own `cpu.stat`.
    fn nr_throttled(&self) -> u64 {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).expect("cpu.stat");
        stat.lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|v| v.trim().parse().ok())
            .expect("nr_throttled")
    }
}

impl Drop for QuotaCgroup {
    fn drop(&mut self) {
        // The busy loop was killed first; its cgroup empties when reaped.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
#[ignore = "needs root"]
fn throttled_by_a_quota_names_the_quota() {
    let _one = one_at_a_time();
    let cg = match QuotaCgroup::new(20_000, 100_000) {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let before = cg.nr_throttled();
    let f = {
        let target = Busy::spawn(None);
        cg.add(target.pid());
        contention_until(target.pid(), |f| {
            f.summary.contains("a CPU quota of 0.20 CPUs throttled it")
        })
    };
    let grown = cg.nr_throttled() - before;
    let named = f.evidence("throttled_periods").expect("throttled periods");
    // The report's count is of a span within the test's: at least one, at
    // most what the cgroup itself counted over the whole test.
    assert!(
        named >= 1.0 && named <= grown as f64,
        "{named} vs {grown}: {f:#?}"
    );
    assert_eq!(f.evidence("quota_cpus"), Some(0.2), "{f:#?}");
    assert!(
        f.advice.starts_with("A CPU quota throttles the process"),
        "{f:#?}"
    );
}
