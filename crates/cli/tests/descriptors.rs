//! `watch`/`record` over many real processes under a low descriptor limit:
//! every sampler of the CLI shares one descriptor budget, processes that
//! cannot be covered are named in one warning, and an incomplete `record`
//! says so in its exit status unless `--allow-partial` accepts it.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use common::{bin, run};

/// Generous: the runs last a few seconds on a quiet machine.
const LIMIT: Duration = Duration::from_secs(120);

/// A program that starts N threads (its argument) and parks them all.
const PARKED_THREADS_C: &str = r#"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
static void *park(void *a) { (void)a; for (;;) pause(); return 0; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 64 * 1024);
    for (int i = 0; i < n; i++) { pthread_t t; pthread_create(&t, &at, park, 0); }
    for (;;) pause();
}
"#;

/// `count` processes of a name of their own, each with `threads` parked
/// threads besides its main one; killed and reaped on drop.
struct Flock {
    children: Vec<Child>,
    name: String,
    dir: PathBuf,
}

impl Flock {
    fn new(tag: &str, count: usize, threads: usize) -> Flock {
        let name = format!("wm{tag}{}", std::process::id() % 100_000);
        let dir = std::env::temp_dir().join(format!("wakemeter-fds-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(&name);
        let src = dir.join("parked.c");
        std::fs::write(&src, PARKED_THREADS_C).unwrap();
        let built = Command::new("cc")
            .args(["-O2", "-pthread", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("MISSING: a C compiler (cc): {e}"));
        assert!(built.success(), "cc failed on {}", src.display());
        let children = (0..count)
            .map(|_| Command::new(&exe).arg(threads.to_string()).spawn().unwrap())
            .collect();
        Flock {
            children,
            name,
            dir,
        }
    }

    fn pids(&self) -> BTreeSet<u64> {
        self.children.iter().map(|c| u64::from(c.id())).collect()
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `wakemeter ARGS` under a soft descriptor limit of `nofile`.
fn limited(nofile: u32, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(bin().get_program())
        .args(args);
    c
}

/// The PIDs a warning line of stderr names after its last ": ".
fn named(stderr: &str, marker: &str) -> BTreeSet<u64> {
    stderr
        .lines()
        .filter(|l| l.contains(marker))
        .flat_map(|l| {
            l.rsplit(": ")
                .next()
                .unwrap()
                .split(", ")
                .map(|p| p.parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The most descriptors `pid` holds while it runs (looked at every 20 ms).
fn most_descriptors_while_running(child: &mut Child) -> usize {
    let dir = format!("/proc/{}/fd", child.id());
    let mut most = 0;
    while child.try_wait().unwrap().is_none() {
        if let Ok(d) = std::fs::read_dir(&dir) {
            most = most.max(d.count());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    most
}

#[test]
fn three_hundred_processes_under_1024_descriptors_are_all_watched_without_starving_the_host() {
    // The attack of issue 29: 300 processes of 8 threads under `ulimit -n
    // 1024`. Before, each sampler kept a quarter of the table for its own
    // threads: the CLI sat at 1,022 of 1,024 descriptors and printed a line
    // per process it could not start, at every look. Now the samplers
    // share one budget, none is built on the top 64 descriptors (the
    // host's), and what cannot start is named in one warning per change.
    let flock = Flock::new("w", 300, 8);
    let mut cmd = limited(
        1024,
        &[
            "watch",
            "--name",
            &flock.name,
            "--max-processes",
            "1024",
            "--every",
            "1",
            "--seconds",
            "5",
            "--json",
            "--no-ebpf",
        ],
    );
    let out = flock.dir.join("watch.out");
    let err = flock.dir.join("watch.err");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    let most = most_descriptors_while_running(&mut child);
    let status = child.wait().unwrap();
    let stdout = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    let said = format!("{status:?}, at most {most} descriptors\n{stderr}");
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        most <= 1024 - 64 + 4,
        "the top of the table is the host's: {said}"
    );
    let warnings = stderr.lines().filter(|l| l.contains("not watched")).count();
    assert!(
        warnings <= 2,
        "one warning per change, not per process: {said}"
    );
    assert!(
        !stderr.lines().any(|l| l.starts_with("wakemeter: process ")),
        "no line per process: {said}"
    );
    let r = common::Run {
        code: status.code(),
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
        elapsed: Duration::ZERO,
        timed_out: false,
    };
    assert_eq!(r.code, Some(0), "{}", r.said());
    let reported: BTreeSet<u64> = r
        .stdout()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["target"]["pid"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(reported, flock.pids(), "{}", r.said());
}

fn record(flock: &Flock, out: &Path, extra: &[&str]) -> common::Run {
    let mut args = vec![
        "record",
        "--name",
        &flock.name,
        "--seconds",
        "3",
        "--period",
        "0.5",
        "--no-ebpf",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    // 80 descriptors leave 16 below the top 64 (the host's): a few
    // recorded processes (a section file each, and the samplers' kept
    // files). (128 held all 60 once samplers beyond a part of the budget
    // stopped keeping their process files between samples.)
    run(&mut limited(80, &args), LIMIT)
}

#[test]
fn a_record_that_cannot_cover_its_selection_fails_and_names_what_is_missing() {
    let flock = Flock::new("r", 60, 0);
    let out = flock.dir.join("rec.ndjson");
    let r = record(&flock, &out, &[]);
    assert_eq!(r.code, Some(1), "{}", r.said());
    let missing = named(&r.stderr(), "never recorded");
    assert!(!missing.is_empty(), "{}", r.said());
    assert!(missing.is_subset(&flock.pids()), "{}", r.said());
    assert!(r.stderr().contains("--allow-partial"), "{}", r.said());
    // What could be recorded is still written, and nothing named missing is in it.
    let written: BTreeSet<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            (v["record"] == "header").then(|| v["target"]["pid"].as_u64())?
        })
        .collect();
    assert!(!written.is_empty(), "{}", r.said());
    assert!(written.is_disjoint(&missing), "{written:?} {missing:?}");
    assert_eq!(
        written.len() + missing.len(),
        flock.pids().len(),
        "every process is either recorded or named: {}",
        r.said()
    );

    let accepted = record(&flock, &out, &["--allow-partial"]);
    assert_eq!(accepted.code, Some(0), "{}", accepted.said());
    assert!(
        !named(&accepted.stderr(), "never recorded").is_empty(),
        "still named: {}",
        accepted.said()
    );
}

/// `watch --name` over the flock under `ulimit -n nofile`, `--seconds 2`.
fn watch_limited(flock: &Flock, nofile: u32, extra: &[&str]) -> common::Run {
    let mut args = vec![
        "watch",
        "--name",
        &flock.name,
        "--max-processes",
        "1024",
        "--every",
        "1",
        "--seconds",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    run(&mut limited(nofile, &args), LIMIT)
}

/// Reports per PID (JSON lines of `watch`).
fn reports(r: &common::Run) -> std::collections::BTreeMap<u64, usize> {
    let mut by_pid = std::collections::BTreeMap::new();
    for l in r.stdout().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        *by_pid
            .entry(v["target"]["pid"].as_u64().unwrap())
            .or_insert(0) += 1;
    }
    by_pid
}

fn reported_pids(r: &common::Run) -> BTreeSet<u64> {
    reports(r).into_keys().collect()
}

/// Issue 38: under `ulimit -n 256`, `watch --name` over 300 processes
/// watched 62 of them: each sampler held 3 process-level descriptors for
/// life. Now the first samplers keep theirs within a fixed part of the
/// budget and the others hold none between samples: all 300 are watched
/// and reported, and the top of the table stays the host's.
#[test]
fn three_hundred_processes_under_256_descriptors_are_all_watched() {
    let flock = Flock::new("a", 300, 0);
    let mut cmd = limited(
        256,
        &[
            "watch",
            "--name",
            &flock.name,
            "--max-processes",
            "1024",
            "--every",
            "1",
            "--seconds",
            "3",
            "--json",
            "--no-ebpf",
        ],
    );
    let (out, err) = (flock.dir.join("all.out"), flock.dir.join("all.err"));
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    let most = most_descriptors_while_running(&mut child);
    let status = child.wait().unwrap();
    let r = common::Run {
        code: status.code(),
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
        elapsed: Duration::ZERO,
        timed_out: false,
    };
    let by_pid = reports(&r);
    let mut per = std::collections::BTreeMap::<usize, usize>::new();
    for n in by_pid.values() {
        *per.entry(*n).or_insert(0) += 1;
    }
    eprintln!(
        "ulimit -n 256, 300 processes: {} watched, at most {most} descriptors; \
         processes by reports: {per:?}",
        by_pid.len()
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    assert!(!r.stderr().contains("never watched"), "{}", r.said());
    assert_eq!(reported_pids(&r), flock.pids(), "{}", r.said());
    assert!(
        most <= 256 - 64 + 4,
        "the top of the table is the host's: {most}"
    );
}

/// Under a limit too low for the selection (`ulimit -n 80`: the top 64
/// are the host's), the processes that do not fit are named, the exit
/// status is 1 unless `--allow-partial`, and every process is either
/// reported or named.
#[test]
fn a_watch_that_cannot_cover_its_selection_fails_and_names_what_is_missing() {
    let flock = Flock::new("p", 300, 0);
    let r = watch_limited(&flock, 80, &["--no-ebpf"]);
    assert_eq!(r.code, Some(1), "{}", r.said());
    let missing = named(&r.stderr(), "never watched");
    let reported = reported_pids(&r);
    eprintln!(
        "ulimit -n 80, 300 processes: {} watched, {} named never watched",
        reported.len(),
        missing.len()
    );
    assert!(!missing.is_empty() && !reported.is_empty(), "{}", r.said());
    assert!(missing.is_disjoint(&reported), "{}", r.said());
    assert_eq!(
        &missing | &reported,
        flock.pids(),
        "every process is either watched or named: {}",
        r.said()
    );
    assert!(r.stderr().contains("--allow-partial"), "{}", r.said());
    assert!(
        r.stderr().contains("out of file descriptors"),
        "said why: {}",
        r.said()
    );

    let accepted = watch_limited(&flock, 80, &["--no-ebpf", "--allow-partial"]);
    assert_eq!(accepted.code, Some(0), "{}", accepted.said());
    assert!(
        !named(&accepted.stderr(), "never watched").is_empty(),
        "still named: {}",
        accepted.said()
    );
}

/// With eBPF (root), under `ulimit -n 256`, all 300 processes are watched
/// (an exit watch holds a pidfd only within its share of the limit; past
/// it, the start time tells an exit). Under `ulimit -n 80` a process that
/// cannot fit is left out before anything is attached to it: before,
/// every look attached each of the processes left out to the shared
/// programs (561 "joined" lines for processes never watched) before their
/// sampler was refused.
#[test]
#[ignore = "needs root"]
fn with_ebpf_all_fit_and_no_process_left_out_is_attached() {
    let flock = Flock::new("e", 300, 0);
    let joined = |r: &common::Run| -> BTreeSet<u64> {
        r.stderr()
            .lines()
            .filter(|l| l.contains("joined the attached programs"))
            .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
            .collect()
    };
    let all = watch_limited(&flock, 256, &[]);
    eprintln!(
        "ulimit -n 256, 300 processes with eBPF: {} watched, {} joined",
        reported_pids(&all).len(),
        joined(&all).len()
    );
    assert_eq!(all.code, Some(0), "{}", all.said());
    assert_eq!(reported_pids(&all), flock.pids(), "{}", all.said());
    assert!(joined(&all).is_subset(&flock.pids()), "{}", all.said());

    // The kernel programs alone take most of what 80 leave: maybe none
    // fits. It ends (a start that ran out of descriptors ends the look)
    // and names what it left out.
    let r = watch_limited(&flock, 80, &[]);
    assert_eq!(r.code, Some(1), "{}", r.said());
    let reported = reported_pids(&r);
    // Named in the warning of the look (when nothing was measured, there
    // is no closing list).
    let missing = &named(&r.stderr(), "are not watched") | &named(&r.stderr(), "never watched");
    eprintln!(
        "ulimit -n 80, 300 processes with eBPF: {} watched, {} joined, {} never watched",
        reported.len(),
        joined(&r).len(),
        missing.len()
    );
    assert!(!missing.is_empty(), "{}", r.said());
    assert_eq!(&missing | &reported, flock.pids(), "{}", r.said());
    assert!(joined(&r).is_subset(&reported), "{}", r.said());
    assert!(joined(&r).is_disjoint(&missing), "{}", r.said());
}
