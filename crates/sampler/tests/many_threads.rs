//! A report of a process with hundreds of threads stays bounded: it lists
//! at most `report_threads` of them (the busiest by CPU and by switches
//! among them), folds the rest into groups by name, and the groups add up
//! to the whole process. The target is a real child process (this test
//! binary, started again as `child_process`), sampled by PID.

#![cfg(any(target_os = "linux", target_os = "android"))]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use wakemeter::compare::DEFAULT_MAX_GROUPS;
use wakemeter::{SamplerBuilder, Target};
use wakemeter_testkit::{
    Running, Work, park_threads, ready_until_stdin_closes, start_until_ready, this_test,
    thread_named,
};

/// Set in the child's environment.
const CHILD_ENV: &str = "WAKEMETER_MANY_THREADS_CHILD";
const IDLE: usize = 590;
const BUSY: usize = 2;
const CHATTY: usize = 4;
const LISTED: u32 = 8;

/// The child: `IDLE` parked `worker-N` threads, `BUSY` `busy-N` threads
/// working half the time in 20 ms slices, and `CHATTY` `chatty-N` threads
/// sleeping 1 ms at a time (many switches, little CPU). It says "ready"
/// on stdout and exits when its stdin closes. Does nothing in a normal
/// test run.
#[test]
fn child_process() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let spawn = |name: String, body: fn()| {
        std::thread::Builder::new()
            .name(name)
            .stack_size(64 * 1024)
            .spawn(body)
            .unwrap();
    };
    park_threads("worker", IDLE);
    for i in 0..BUSY {
        spawn(format!("busy-{i}"), || {
            loop {
                let until = Instant::now() + Duration::from_millis(20);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }
    for i in 0..CHATTY {
        spawn(format!("chatty-{i}"), || {
            loop {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    }
    ready_until_stdin_closes();
}

/// The child process (killed when dropped).
fn spawn_child() -> Running {
    start_until_ready(&mut this_test("child_process", CHILD_ENV, "1"))
}

#[test]
fn a_report_of_hundreds_of_threads_lists_few_and_groups_all() {
    let child = spawn_child();
    let pid = child.pid();
    let sampler = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_switch_split_every(1)
        .with_report_threads(LISTED)
        .build()
        .unwrap();
    // No background thread: the report and the full interval below are
    // made from the same two snapshots.
    let busy: Vec<u32> = (0..BUSY)
        .map(|i| thread_named(pid, &format!("busy-{i}")))
        .collect();
    let chatty: Vec<u32> = (0..CHATTY)
        .map(|i| thread_named(pid, &format!("chatty-{i}")))
        .collect();
    let before =
        |tids: &[u32]| -> Vec<Work> { tids.iter().map(|&t| Work::of_thread(pid, t)).collect() };
    let (busy_before, chatty_before) = (before(&busy), before(&chatty));
    sampler.sample_now().unwrap();
    // Wait for the work the ranking below is about, not a fixed second:
    // on a loaded machine a busy thread can get ~1/8 of a core or less, and
    // one second held too little of it. Each busy thread runs 100 ms (its
    // spin alone is far above a chatty thread's CPU) and each chatty
    // thread sleeps 200 times (far above a busy thread's 1 per 40 ms).
    let start = Instant::now();
    loop {
        let ran = |tids: &[u32], was: &[Work], done: fn(Work) -> bool| {
            tids.iter()
                .zip(was)
                .all(|(&t, &w)| done(Work::of_thread(pid, t).since(w)))
        };
        if ran(&busy, &busy_before, |w| w.cpu_ns >= 100_000_000)
            && ran(&chatty, &chatty_before, |w| w.voluntary_switches >= 200)
            && start.elapsed() >= Duration::from_secs(1)
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "the child's threads did not run in 240 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sampler.sample_now().unwrap();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count();
    let report = sampler.report();
    let full = sampler.interval_over(sampler.thresholds().window).unwrap();
    let interval = report.interval.as_ref().unwrap();
    assert_eq!(
        (interval.from_seq, interval.to_seq),
        (full.from_seq, full.to_seq)
    );

    // Every thread is counted: the kernel's task list is the reference.
    assert_eq!(full.threads.len(), tasks);
    assert_eq!(interval.process.thread_count as usize, tasks);

    // At most LISTED in the report, in its JSON too; the rest folded.
    let json = serde_json::to_value(&report).unwrap();
    let listed = json["interval"]["threads"].as_array().unwrap().len();
    assert!(listed <= LISTED as usize, "{listed} threads listed");
    assert_eq!(listed, interval.threads.len());
    assert_eq!(report.threads_folded as usize, tasks - listed);

    // The busiest by CPU and the ones switching most are among them.
    let names: Vec<&str> = interval.threads.iter().map(|t| t.name.as_str()).collect();
    for i in 0..BUSY {
        assert!(names.contains(&format!("busy-{i}").as_str()), "{names:?}");
    }
    for i in 0..CHATTY {
        assert!(names.contains(&format!("chatty-{i}").as_str()), "{names:?}");
    }

    // The groups: bounded, one per group name, adding up to all threads.
    let groups = &report.thread_groups;
    assert!(groups.len() <= DEFAULT_MAX_GROUPS + 1);
    let group = |name: &str| groups.iter().find(|g| g.name == name).unwrap();
    assert_eq!(group("worker-{n}").threads as usize, IDLE);
    assert_eq!(group("busy-{n}").threads as usize, BUSY);
    assert_eq!(group("chatty-{n}").threads as usize, CHATTY);
    assert_eq!(
        groups.iter().map(|g| g.threads as usize).sum::<usize>(),
        tasks
    );
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0);
    let cpu: f64 = groups.iter().map(|g| g.cpu_percent).sum();
    let all_cpu: f64 = full.threads.iter().map(|t| t.cpu_percent).sum();
    assert!(close(cpu, all_cpu), "groups {cpu}% vs threads {all_cpu}%");
    let switches: f64 = groups.iter().filter_map(|g| g.switches_per_sec).sum();
    let all_switches: f64 = full.threads.iter().filter_map(|t| t.switches_per_sec).sum();
    assert!(
        close(switches, all_switches),
        "{switches} vs {all_switches}"
    );
    // And the process's own CPU clock agrees with the threads' sum (no
    // thread exited; the two are read a few microseconds apart).
    let process = interval.process.cpu_percent;
    assert!(
        (process - cpu).abs() <= 1.0 + 0.05 * process,
        "process {process}% vs its threads {cpu}%"
    );

    // What this is for: the report is a fraction of the full list.
    let report_bytes = serde_json::to_vec(&report).unwrap().len();
    let full_bytes = serde_json::to_vec(&full).unwrap().len();
    assert!(
        report_bytes * 10 < full_bytes,
        "report {report_bytes} bytes, all threads {full_bytes}"
    );
}
