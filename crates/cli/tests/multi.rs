//! `wakemeter watch` over several processes: `--pid` repeated, `--name`
//! (with a restart) and `--cgroup`, and their bad inputs.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Sleeper, as_foreground, bin, run};
use wakemeter_testkit::Running;

/// A bound on waits and runs that only a hang reaches (a loaded machine
/// is slow, never wrong).
const LIMIT: Duration = Duration::from_secs(300);

/// The `target.pid` of every JSON report line.
fn reported_pids(stdout: &str) -> BTreeSet<u64> {
    stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["target"]["pid"].as_u64().unwrap()
        })
        .collect()
}

/// The lines a child writes to `pipe`, collected by a thread as they come;
/// join the thread to have them all once the child has exited.
type Lines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;
fn lines_of(pipe: impl Read + Send + 'static) -> (Lines, std::thread::JoinHandle<()>) {
    use std::io::BufRead;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    (lines, reader)
}

/// Everything collected so far, one line each.
fn all_of(lines: &std::sync::Mutex<Vec<String>>) -> String {
    let mut all = lines.lock().unwrap().join("\n");
    all.push('\n');
    all
}

/// Waits (bounded by `LIMIT`) until a collected line satisfies `ok`.
fn wait_for_line(lines: &std::sync::Mutex<Vec<String>>, what: &str, ok: impl Fn(&str) -> bool) {
    let start = Instant::now();
    while !lines.lock().unwrap().iter().any(|l| ok(l)) {
        assert!(start.elapsed() < LIMIT, "never {what}:\n{}", all_of(lines));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A copy of `sleep` under a name of its own, so `--name` matches only the
/// processes of this test.
fn named_sleep(name: &str) -> PathBuf {
    // A directory per name: each test removes its own when it ends, while
    // the others run (one directory for the whole process lost a test's
    // program under it before its restart).
    let dir = std::env::temp_dir().join(format!("wakemeter-multi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    if !path.exists() {
        std::fs::copy("/bin/sleep", &path).unwrap();
    }
    path
}

#[test]
fn repeated_pids_give_one_report_line_per_process() {
    let (a, b) = (Sleeper::new("30"), Sleeper::new("30"));
    let r = run(
        bin().args([
            "watch",
            "--pid",
            &a.pid().to_string(),
            "--pid",
            &b.pid().to_string(),
            "--every",
            "1",
            "--seconds",
            "3",
            "--json",
            "--no-ebpf",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let expected: BTreeSet<u64> = [a.pid(), b.pid()].into_iter().map(u64::from).collect();
    assert_eq!(reported_pids(&r.stdout()), expected, "{}", r.said());
}

#[test]
fn a_name_follows_a_restart() {
    let name = format!("wmrst{}", std::process::id() % 100_000);
    let exe = named_sleep(&name);
    let first = Running(Command::new(&exe).arg("60").spawn().unwrap());
    let first_pid = first.0.id();
    // No fixed run length: on a loaded machine the watcher's start took
    // more than the 2 s the test gave it before the restart, and the
    // restart's discovery more than the rest of an 8 s run. The test
    // waits for each step in the watcher's own output (a report of the
    // first process, then of the second) and stops it with SIGINT;
    // `--seconds` is only a hang guard.
    let mut watcher = as_foreground(&mut bin())
        .args(["watch", "--name", &name, "--every", "1", "--seconds", "300"])
        .args(["--json", "--no-ebpf"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, stdout_reader) = lines_of(watcher.stdout.take().unwrap());
    let (stderr, stderr_reader) = lines_of(watcher.stderr.take().unwrap());
    let reported = |pid: u32| {
        move |l: &str| {
            serde_json::from_str::<serde_json::Value>(l)
                .is_ok_and(|v| v["target"]["pid"].as_u64() == Some(u64::from(pid)))
        }
    };
    wait_for_line(
        &stdout,
        "a report of the first process",
        reported(first_pid),
    );
    drop(first);
    let second = Running(Command::new(&exe).arg("60").spawn().unwrap());
    let second_pid = second.0.id();
    wait_for_line(
        &stdout,
        "a report of the second process",
        reported(second_pid),
    );
    let exited = format!("process {first_pid} ({name}) exited; no longer watched");
    wait_for_line(&stderr, "the first process's exit", |l| l.contains(&exited));
    // SAFETY: signals our own child, which has not been waited for yet.
    unsafe { libc::kill(watcher.id() as i32, libc::SIGINT) };
    let started = Instant::now();
    let status = watcher.wait().unwrap();
    assert!(started.elapsed() < LIMIT);
    // The child has exited: its pipes end, so the readers end too.
    stdout_reader.join().unwrap();
    stderr_reader.join().unwrap();
    let stdout = all_of(&stdout);
    let stderr = all_of(&stderr);
    let said = format!("{status:?}\n{stdout}\n{stderr}");
    // Plain `watch` (no trace to finish) ends on SIGINT's default action,
    // as on a user's Ctrl-C; what it printed before is whole lines.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{said}");
    let pids = reported_pids(&stdout);
    assert!(pids.contains(&u64::from(first_pid)), "{said}");
    assert!(pids.contains(&u64::from(second_pid)), "{said}");
    assert!(
        stderr.contains(&format!(
            "process {first_pid} ({name}) exited; no longer watched"
        )),
        "{said}"
    );
    assert!(
        stderr.contains(&format!("watching process {second_pid} ({name})")),
        "{said}"
    );
    drop(second);
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

#[test]
fn the_cap_names_what_it_leaves_out() {
    let name = format!("wmcap{}", std::process::id() % 100_000);
    let exe = named_sleep(&name);
    let kids: Vec<Running> = (0..3)
        .map(|_| Running(Command::new(&exe).arg("60").spawn().unwrap()))
        .collect();
    let mut pids: Vec<u32> = kids.iter().map(|k| k.0.id()).collect();
    pids.sort_unstable();
    let r = run(
        bin()
            .args(["watch", "--name", &name, "--max-processes", "2"])
            .args(["--every", "1", "--seconds", "2", "--json", "--no-ebpf"]),
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let expected: BTreeSet<u64> = pids[..2].iter().copied().map(u64::from).collect();
    assert_eq!(reported_pids(&r.stdout()), expected, "{}", r.said());
    assert!(
        r.stderr()
            .contains(&format!("watching the 2 lowest PIDs, not {}", pids[2])),
        "{}",
        r.said()
    );
    drop(kids);
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

/// A cgroup v2 directory made for a test, removed on drop (its processes
/// must be gone first).
struct TestCgroup(PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
#[ignore = "needs root"]
fn a_cgroup_watches_the_processes_in_it_and_below() {
    let name = format!("wakemeter-test-{}", std::process::id());
    // The cgroup v2 root: /sys/fs/cgroup, or .../unified on hybrid hosts.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let root = PathBuf::from(
        mounts
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_owned())
            })
            .expect("no cgroup2 filesystem is mounted"),
    );
    assert!(root.join("cgroup.procs").is_file(), "{root:?}");
    let group = TestCgroup(root.join(&name));
    std::fs::create_dir(&group.0).unwrap();
    let child_group = TestCgroup(group.0.join("inner"));
    std::fs::create_dir(&child_group.0).unwrap();
    let (top, below, outside) = (Sleeper::new("30"), Sleeper::new("30"), Sleeper::new("30"));
    std::fs::write(group.0.join("cgroup.procs"), top.pid().to_string()).unwrap();
    std::fs::write(child_group.0.join("cgroup.procs"), below.pid().to_string()).unwrap();
    // Relative to /sys/fs/cgroup, as a pod's path is given.
    let r = run(
        bin().args(["watch", "--cgroup", &name]).args([
            "--every",
            "1",
            "--seconds",
            "2",
            "--json",
            "--no-ebpf",
        ]),
        LIMIT,
    );
    let pids = reported_pids(&r.stdout());
    drop((top, below, outside));
    drop(child_group);
    drop(group);
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(pids.len() == 2, "exactly the two processes: {}", r.said());
    assert!(!root.join(&name).exists());
}

#[test]
fn a_name_that_matches_nothing_is_one_clear_error() {
    let r = run(
        bin().args(["watch", "--name", "no-such-proc-wm", "--seconds", "2"]),
        LIMIT,
    );
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(r.stdout.is_empty(), "{}", r.said());
    assert!(
        r.stderr()
            .starts_with("wakemeter: no process named no-such-proc-wm"),
        "{}",
        r.said()
    );
}

#[test]
fn a_missing_cgroup_is_one_clear_error() {
    let r = run(
        bin().args(["watch", "--cgroup", "/no/such/cgroup-wm", "--seconds", "2"]),
        LIMIT,
    );
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(r.stdout.is_empty(), "{}", r.said());
    assert!(
        r.stderr()
            .starts_with("wakemeter: cgroup /no/such/cgroup-wm does not exist"),
        "{}",
        r.said()
    );
}

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

/// Scrapes `addr` until `ok` holds (bounded), and returns that scrape.
fn scrape_until(addr: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let body = scrape(addr);
        if ok(&body) {
            return body;
        }
        assert!(start.elapsed() < LIMIT, "never {what}:\n{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn listen_labels_each_process_and_follows_a_restart() {
    let name = format!("wmprm{}", std::process::id() % 100_000);
    let exe = named_sleep(&name);
    let first = Running(Command::new(&exe).arg("60").spawn().unwrap());
    let other = Running(Command::new(&exe).arg("60").spawn().unwrap());
    let (first_pid, other_pid) = (first.0.id(), other.0.id());
    let mut watcher = Running(
        bin()
            .args(["watch", "--name", &name, "--every", "1", "--seconds", "30"])
            .args(["--json", "--no-ebpf", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(watcher.0.stderr.take().unwrap());
    let addr = common::metrics_address(&mut err);
    // Keep reading stderr, so the watcher never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let threads =
        |pid: u32| format!("wakemeter_process_threads{{pid=\"{pid}\",process=\"{name}\"}} 1");
    let body = scrape_until(&addr, "exposed both processes", |b| {
        b.contains(&threads(first_pid)) && b.contains(&threads(other_pid))
    });
    assert!(
        body.contains(&format!(
            // Thread names have their numbers collapsed; process names not.
            "wakemeter_thread_cpu_seconds_total{{pid=\"{first_pid}\",process=\"{name}\",thread=\"wmprm{{n}}\"}}"
        )),
        "{body}"
    );
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("wakemeter_exporter_dropped_series_total"))
            .count(),
        1,
        "{body}"
    );
    // A restart: the first exits and another of the name starts. The new
    // PID appears, the old one's series are removed, the other stays.
    drop(first);
    let second = Running(Command::new(&exe).arg("60").spawn().unwrap());
    let second_pid = second.0.id();
    let body = scrape_until(&addr, "followed the restart", |b| {
        b.contains(&threads(second_pid)) && !b.contains(&format!("pid=\"{first_pid}\""))
    });
    assert!(body.contains(&threads(other_pid)), "{body}");
    drop(watcher);
    drop((second, other));
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}
