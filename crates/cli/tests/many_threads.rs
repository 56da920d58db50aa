//! `watch` of a process with hundreds of threads: each JSON report lists
//! at most the configured number of threads and folds the rest into
//! groups by name that still count every thread; the tables say how many
//! were folded. The target is this test binary, started again as
//! `child_process` with many threads.

#![cfg(any(target_os = "linux", target_os = "android"))]
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{run, watch};
use wakemeter::config::DEFAULT_REPORT_THREADS;
use wakemeter_testkit::{park_threads, ready_until_stdin_closes, start_until_ready, this_test};

const CHILD_ENV: &str = "WAKEMETER_CLI_MANY_THREADS_CHILD";
/// Parked `worker-N` threads of the child.
const WORKERS: usize = 300;

/// The child: `WORKERS` parked threads; says "ready", exits when its
/// stdin closes. Does nothing in a normal test run.
#[test]
fn child_process() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    park_threads("worker", WORKERS);
    ready_until_stdin_closes();
}

/// Runs `watch --json` on a fresh child with `extra` arguments and checks
/// every report against the kernel's task list: `listed` threads one by
/// one, every thread counted in the groups.
fn reports_list(extra: &[&str], listed: usize) {
    let child = start_until_ready(&mut this_test("child_process", CHILD_ENV, "1"));
    let pid = child.pid();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count();
    assert!(tasks > WORKERS);
    let mut args = vec!["--every", "1", "--seconds", "3", "--json", "--no-ebpf"];
    args.extend_from_slice(extra);
    let r = run(&mut watch(pid, &args), Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.said());
    let out = r.stdout();
    let reports: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| !v["interval"].is_null())
        .collect();
    assert!(!reports.is_empty(), "{}", r.said());
    for v in &reports {
        let count = v["interval"]["process"]["thread_count"].as_u64().unwrap() as usize;
        assert_eq!(count, tasks, "the kernel's task list is the reference");
        assert_eq!(v["interval"]["threads"].as_array().unwrap().len(), listed);
        assert_eq!(
            v["config"]["report_threads"].as_u64().unwrap() as usize,
            listed
        );
        assert_eq!(
            v["threads_folded"].as_u64().unwrap() as usize,
            count - listed
        );
        let groups = v["thread_groups"].as_array().unwrap();
        let in_groups: u64 = groups.iter().map(|g| g["threads"].as_u64().unwrap()).sum();
        assert_eq!(in_groups as usize, count);
        let workers = groups.iter().find(|g| g["name"] == "worker-{n}").unwrap();
        assert_eq!(workers["threads"].as_u64().unwrap() as usize, WORKERS);
    }
    // Each report is a few tens of KiB, not one record per thread.
    let per_report = out.len() / reports.len();
    assert!(per_report < 64 * 1024, "{per_report} bytes per report");
}

#[test]
fn json_reports_list_a_bounded_number_of_threads_and_count_all() {
    reports_list(&[], DEFAULT_REPORT_THREADS as usize);
}

#[test]
fn report_threads_sets_how_many_threads_are_listed() {
    reports_list(&["--report-threads", "5"], 5);
}

#[test]
fn the_tables_say_how_many_threads_were_folded() {
    let child = start_until_ready(&mut this_test("child_process", CHILD_ENV, "1"));
    let pid = child.pid();
    let r = run(
        &mut watch(pid, &["--every", "1", "--seconds", "2", "--no-ebpf"]),
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let out = r.stdout();
    assert!(out.contains("more threads not listed; all"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("worker-{n}") && l.contains(&WORKERS.to_string())),
        "{out}"
    );
}
