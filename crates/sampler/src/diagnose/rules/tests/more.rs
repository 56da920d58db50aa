//! The rules' tests, continued: the helpers are in `mod.rs`.

use super::*;

/// A Go server's scheduler threads under load: 2,400 epoll calls/s, 45% of
/// them non-blocking and finding nothing, blocked 30% of the time, at 40%
/// of a core spent serving requests. The other 55% of polls found work:
/// busy, not busy-polling. A loop that spins on empty polls is.
#[test]
fn a_busy_worker_that_polls_between_tasks_is_not_a_busy_poller() {
    let go_worker = poller(2400.0, 0.45, 30.0, 40.0);
    assert!(kernel_kinds(&go_worker).is_empty());
    let spinner = poller(250_000.0, 0.999, 2.0, 95.0);
    assert_eq!(kernel_kinds(&spinner), vec![FindingKind::BusyPoller]);
}

/// A thread in the kernel view whose `polls` poll(2) calls/s all have a
/// timeout and `ready` of them (0-1) return events without blocking.
fn ready_poller(polls: f64, ready: f64, blocked: f64, cpu: f64) -> ThreadInterval {
    let mut th = poller(polls, 0.0, blocked, cpu);
    if let Some(k) = th.kernel.as_mut() {
        k.blocking_polls_per_sec = polls * (1.0 - ready);
        k.idle_nonblocking_polls_per_sec = 0.0;
        k.idle_poll_ratio = 0.0;
        k.zero_timeout_poll_ratio = 0.0;
        k.calls_by_syscall = vec![SyscallRate {
            syscall: crate::kernel::Syscall::Poll,
            calls_per_sec: polls,
        }];
    }
    th
}

/// libevent with an `EV_ET` eventfd on its `poll` backend: every poll has
/// a timeout and returns the still-readable eventfd at once, 250,000
/// times a second, the thread never blocked. Neither idle nor
/// zero-timeout, yet a busy poller, named with its cause. A worker
/// whose polls find work as fast as it serves it (8,000/s, blocked 10%)
/// is not, nor one whose polls mostly block.
#[test]
fn a_loop_whose_polls_return_ready_at_once_is_a_busy_poller() {
    let spinner = ready_poller(250_000.0, 1.0, 0.0, 99.0);
    assert_eq!(kernel_kinds(&spinner), vec![FindingKind::BusyPoller]);
    let t = Thresholds::default();
    let previous = Severities::default();
    let mut cx = linux_ctx(&t, &previous, 10_000_000_000);
    let k = spinner.kernel.as_ref().expect("a kernel view");
    assert!(kernel::kernel_busy_poller(&mut cx, &spinner, k));
    let f = cx.out.finish(&t);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].summary
            .contains("100% of its polls return ready at once")
            && f[0].summary.contains("poll(2) 250000/s")
            && f[0].summary.contains("EV_ET"),
        "{}",
        f[0].summary
    );
    assert!(f[0].advice.contains("epoll, kqueue"), "{}", f[0].advice);
    assert_eq!(f[0].evidence("ready_at_once_ratio"), Some(1.0));
    let worker = ready_poller(8_000.0, 1.0, 10.0, 60.0);
    assert!(kernel_kinds(&worker).is_empty());
    let waiting = ready_poller(250_000.0, 0.3, 40.0, 60.0);
    assert!(kernel_kinds(&waiting).is_empty());
}

/// Python's `http.server` under wrk: one thread per connection, each
/// gone before the next sample, so the process used 0.70 of a core while
/// its one long-lived thread ran 0.15 and waited 0.31. Its threads want
/// at least 1.0 CPUs, not the 0.5 of that thread alone; the summary says
/// the figure is a floor and what it leaves out.
#[test]
fn run_queue_demand_counts_the_cpu_of_threads_never_listed() {
    let t = Thresholds::default();
    let h = steady_with_unlisted(10, &[main_thread()], 0.55);
    let found = findings(&h, &t, &Severities::new());
    let rq: Vec<&Finding> = found
        .iter()
        .filter(|f| f.kind == FindingKind::RunQueueContention)
        .collect();
    assert_eq!(rq.len(), 1, "{found:#?}");
    let runnable = rq[0].evidence("runnable_threads").unwrap_or(0.0);
    assert!((runnable - 1.01).abs() < 0.01, "{:#?}", rq[0]);
    let unlisted = rq[0].evidence("unlisted_threads_cpus").unwrap_or(0.0);
    assert!((unlisted - 0.55).abs() < 0.01, "{:#?}", rq[0]);
    assert!(
        rq[0]
            .summary
            .contains("at least 1.0 of this process's threads want a CPU")
            && rq[0].summary.contains("0.55 cores' worth"),
        "{}",
        rq[0].summary
    );
    // Without unlisted threads the figure is the threads' own.
    let h = steady_with_unlisted(10, &[main_thread()], 0.0);
    let found = findings(&h, &t, &Severities::new());
    let rq = found
        .iter()
        .find(|f| f.kind == FindingKind::RunQueueContention)
        .expect("a run-queue finding");
    assert!(
        rq.summary
            .ends_with("(about 0.5 of this process's threads want a CPU)"),
        "{}",
        rq.summary
    );
    assert_eq!(rq.evidence("unlisted_threads_cpus"), None);
}

/// "About 1.0 of this process's threads want a CPU on 2 cores" while a
/// thread waits 36% of the time: the process alone does not fill the
/// machine, so the competition is outside it, and the advice looks there
/// (other processes, a quota, an affinity), not at its thread pools.
/// Four threads each wanting a core on two: its own threads compete.
#[test]
fn contention_says_who_competes() {
    let t = Thresholds::default();
    let outside = Steady {
        name: "server".to_string(),
        cpu: 0.6,
        wait: 0.36,
        woken: 50,
        preempted: 200,
    };
    let found = findings(&steady(10, &[outside]), &t, &Severities::new());
    let rq = found
        .iter()
        .find(|f| f.kind == FindingKind::RunQueueContention)
        .expect("a run-queue finding");
    assert!(
        rq.summary
            .contains("the competition is outside this process")
            && rq.summary.contains("want only 1.0 CPUs of its 2 cores"),
        "{}",
        rq.summary
    );
    assert!(rq.advice.contains("cpu.stat"), "{}", rq.advice);
    assert!(!rq.advice.contains("Size thread pools"), "{}", rq.advice);
    let own: Vec<Steady> = (0..4)
        .map(|n| Steady {
            name: format!("pool-{n}"),
            cpu: 0.5,
            wait: 0.5,
            woken: 50,
            preempted: 200,
        })
        .collect();
    let found = findings(&steady(10, &own), &t, &Severities::new());
    let rq = found
        .iter()
        .find(|f| f.kind == FindingKind::RunQueueContention)
        .expect("a run-queue finding");
    assert!(
        rq.summary.contains(
            "its own threads compete: this process has 4.0 threads wanting a CPU on 2 cores"
        ),
        "{}",
        rq.summary
    );
    assert!(rq.advice.contains("Size thread pools"), "{}", rq.advice);
}

/// What the platform read names the cause, and the advice follows it:
/// a quota that throttled first, then an affinity, then other processes;
/// a quota that never throttled and processes using little are no cause.
/// The own-threads case keeps its words.
#[test]
fn who_competes_follows_the_cause() {
    use crate::platform::competition::{Competition, Competitor, Quota};
    let t = Thresholds::default();
    let outside = Steady {
        name: "server".to_string(),
        cpu: 0.6,
        wait: 0.36,
        woken: 50,
        preempted: 200,
    };
    let base = findings(&steady(10, &[outside]), &t, &Severities::new());
    let busy = |cpu_percent| Competitor {
        pid: 4242,
        name: "stress-ng-cpu".to_string(),
        cpu_percent,
    };
    let idle_quota = Quota {
        cpus: 2.0,
        throttled_periods: 0,
        throttled_ms: 0.0,
    };
    let c = Competition {
        load1: 3.1,
        machine_cpus: 2,
        allowed: None,
        quota: Some(idle_quota.clone()),
        top: vec![busy(97.0)],
        span_s: Some(1.0),
    };
    let mut f = base.clone();
    name_competitors(&mut f, &c);
    let rq = f
        .iter()
        .find(|f| f.kind == FindingKind::RunQueueContention)
        .expect("a run-queue finding");
    assert!(
        rq.summary.ends_with(
            "Who competes: other processes: load 3.1 on 2 CPUs, the busiest \"stress-ng-cpu\" (pid 4242) 97% \
             (CPU of one core over the last 1.0 s)"
        ),
        "{}",
        rq.summary
    );
    assert!(
        rq.advice.starts_with("Other processes take the cores"),
        "{}",
        rq.advice
    );
    assert_eq!(rq.evidence("throttled_periods"), Some(0.0));

    let c = Competition {
        allowed: Some((1, "0".to_string())),
        quota: Some(Quota {
            cpus: 0.5,
            throttled_periods: 9,
            throttled_ms: 410.0,
        }),
        top: vec![busy(4.0)],
        span_s: None,
        ..c
    };
    let mut f = base.clone();
    name_competitors(&mut f, &c);
    let rq = f
        .iter()
        .find(|f| f.kind == FindingKind::RunQueueContention)
        .expect("a run-queue finding");
    assert!(
        rq.summary.ends_with(
            "Who competes: a CPU quota of 0.50 CPUs throttled it 9 times (410 ms held off a CPU) since its cgroup \
             was created; its CPU affinity allows 1 of the machine's 2 CPUs (0)"
        ),
        "{}",
        rq.summary
    );
    assert!(
        rq.advice.starts_with("A CPU quota throttles"),
        "{}",
        rq.advice
    );
    assert!(rq.advice.contains("taskset"), "{}", rq.advice);
    assert!(!rq.advice.contains("Other processes"), "{}", rq.advice);

    // Nothing named: the finding is left as it was.
    let quiet = Competition {
        allowed: None,
        quota: Some(idle_quota),
        top: vec![busy(4.0)],
        ..c
    };
    let mut f = base.clone();
    name_competitors(&mut f, &quiet);
    assert_eq!(f, base);
}

/// The one long-lived thread of Python's `http.server` under wrk: 15%
/// CPU, 31% waiting for a CPU.
fn main_thread() -> Steady {
    Steady {
        name: "python3".to_string(),
        cpu: 0.15,
        wait: 0.31,
        woken: 5000,
        preempted: 1000,
    }
}

/// A history of threads sampled every second for `secs` seconds, thread
/// `n` (named `names[n]`) woken `woken(n, s)` times during second `s`, at
/// 0.5% CPU and never preempted.
fn wavy(secs: u64, names: &[&str], woken: impl Fn(usize, u64) -> u64) -> History {
    use std::sync::Arc;

    use crate::history::{Encoders, Header};
    use crate::model::{CpuTimeSource, ProcessSample};
    use crate::model::{ThreadIdent, ThreadRow};

    let idents: Vec<Arc<ThreadIdent>> = names
        .iter()
        .enumerate()
        .map(|(n, name)| {
            Arc::new(ThreadIdent {
                tid: 100 + n as u64,
                serial: n as u64,
                name: (*name).into(),
                cpu_time_source: CpuTimeSource::ThreadClock,
            })
        })
        .collect();
    let mut enc = Encoders::default();
    let mut h = History::new(1000, u64::MAX);
    let mut totals = vec![0u64; names.len()];
    for s in 0..=secs {
        if s > 0 {
            for (n, total) in totals.iter_mut().enumerate() {
                *total += woken(n, s - 1);
            }
        }
        let packed: Vec<ThreadRow> = idents
            .iter()
            .zip(&totals)
            .map(|(ident, total)| ThreadRow {
                ident: ident.clone(),
                total_cpu_time_ns: 5_000_000 * s,
                total_run_queue_wait_ns: 0,
                total_switches: *total,
                total_voluntary_switches: *total,
                total_involuntary_switches: 0,
            })
            .collect();
        let header = Header {
            seq: s,
            monotonic_ns: 1_000_000_000 + s * 1_000_000_000,
            unix_time_ns: 0,
            process: ProcessSample {
                pid: 7,
                rss_bytes: 1 << 20,
                total_cpu_time_ns: 5_000_000 * s * names.len() as u64,
                thread_count: names.len() as u32,
                ..Default::default()
            },
            switch_split_read: true,
            sampler_cost_ns: 0,
            total_sampler_cpu_time_ns: 0,
            warnings: Vec::new(),
        };
        h.push(Arc::new(Stored::new(
            &mut enc,
            header,
            packed,
            &[],
            &[],
            None,
        )));
    }
    h
}

/// Four alike workers (a JVM pool, Node's V8 workers) woken about 50
/// times/s by the threads that hand them work, their per-second rates
/// varying around the 0.25 steadiness line: they are all steady or none
/// is, never "2 threads behave alike" out of four that do. A thread of
/// another name is judged on its own.
#[test]
fn alike_threads_are_steady_together_or_not_at_all() {
    let t = Thresholds::default();
    let names = [
        "pool-1-thread-1",
        "pool-1-thread-2",
        "pool-1-thread-3",
        "pool-1-thread-4",
        "ticker",
    ];
    // Thread n alternates 50 + a and 50 - a: variation a / 50.
    let run = |swings: [u64; 5]| {
        let h = wavy(10, &names, |n, s| {
            if s % 2 == 0 {
                50 + swings[n]
            } else {
                50 - swings[n]
            }
        });
        let found = findings(&h, &t, &Severities::new());
        found
            .into_iter()
            .filter(|f| f.kind == FindingKind::PeriodicWakeups)
            .map(|f| match f.subject {
                Subject::Threads { tids, .. } => tids.len(),
                _ => 1,
            })
            .collect::<Vec<usize>>()
    };
    // Variations 0.22, 0.24, 0.28, 0.30 (median 0.26): none of the pool;
    // the ticker at 0.04 still is.
    assert_eq!(run([11, 12, 14, 15, 2]), vec![1]);
    // Variations 0.20, 0.22, 0.24, 0.26 (median 0.23): all four, one
    // group; the ticker at 0.30 is not steady.
    assert_eq!(run([10, 11, 12, 13, 15]), vec![4]);
}

/// A thread of `name` at `cpu`% of a core, waiting for a CPU `wait`% of
/// the time, with `voluntary` voluntary switches/s (from /proc).
fn proc_thread(tid: u64, name: &str, cpu: f64, wait: f64, voluntary: f64) -> ThreadInterval {
    serde_json::from_value(serde_json::json!({
        "tid": tid, "serial": tid, "name": name, "started_in_interval": false,
        "cpu_time_ns": 0u64, "cpu_percent": cpu,
        "switches": null, "switches_per_sec": null,
        "voluntary_switches": null, "voluntary_switches_per_sec": voluntary,
        "involuntary_switches": null, "involuntary_switches_per_sec": null,
        "run_queue_wait_ns": null, "run_queue_wait_percent": wait,
        "kernel": null
    }))
    .expect("a thread interval")
}

/// A loop of `kind` on thread `tid` woken `rate` times a second over 2 s,
/// one event per wakeup, never idle nor timed out, `wait_ns` per wait.
fn woken_loop(kind: &str, tid: u64, rate: f64, wait_ns: u64) -> crate::interval::LoopInterval {
    let wakeups = (rate * 2.0) as u64;
    serde_json::from_value(serde_json::json!({
        "id": 1, "name": "tokio-worker", "kind": kind, "tid": tid,
        "wakeups": wakeups, "wakeups_per_sec": rate,
        "idle_wakeups": 0, "idle_wakeup_ratio": 0.0, "timed_out_wakeups": 0,
        "early_wakeups": 0, "zero_timeout_waits": 0, "zero_timeout_ratio": 0.0,
        "events": wakeups, "events_per_wakeup": 1.0,
        "wait_ns": wakeups * wait_ns, "busy_ns": wakeups * 5_000,
        "utilization": 0.27,
        "poll_delay_histogram": crate::Log2Histogram::default(),
        "mean_poll_delay_ns": 0, "p99_poll_delay_ns": null, "current_wait_ns": 0
    }))
    .expect("a loop interval")
}

fn loop_findings(i: &crate::interval::Interval) -> Vec<Finding> {
    let t = Thresholds::default();
    let previous = Severities::default();
    let mut cx = linux_ctx(&t, &previous, i.duration_ns);
    loops::busy_poller_loops(&mut cx, i);
    loops::spinning_workers(&mut cx, i);
    cx.out.finish(&t)
}

/// Seen on the CI machine: a tokio worker unparked 71,000 times a second
/// by its sibling spinning on `yield_now`, 13.6 µs in each park (78 µs on
/// the machine the rule was drawn on), was called a loop whose waits
/// return ready at once, and the spinning sibling went unnamed. A tokio
/// worker's probe cannot see that (one event per unpark, no timeouts):
/// the pair is a spinning worker on any machine. The same loop written by
/// an application (its own events and timeouts) is a ready-at-once loop.
#[test]
fn a_worker_woken_fast_by_a_spinning_sibling_is_the_spinner_not_a_ready_loop() {
    let mut i: crate::interval::Interval = serde_json::from_value(serde_json::json!({
        "from_seq": 1, "to_seq": 3, "end_monotonic_ns": 2_000_000_000u64,
        "duration_ns": 2_000_000_000u64,
        "process": crate::interval::ProcessInterval::default(),
        "threads": [], "threads_exited": 0, "loops": [], "sleeps": [],
        "sampler_cpu_time_ns": 0, "sampler_cpu_percent": 0.0
    }))
    .expect("an interval");
    i.threads = vec![
        proc_thread(11, "tokio-worker", 95.0, 5.0, 0.0),
        proc_thread(12, "tokio-worker", 55.0, 2.0, 71_000.0),
    ];
    for wait_ns in [13_600, 78_000] {
        i.loops = vec![woken_loop("tokio_worker", 12, 71_040.0, wait_ns)];
        let f = loop_findings(&i);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(f[0].summary.contains("never waits"), "{}", f[0].summary);
        assert_eq!(
            f[0].subject,
            Subject::Loop {
                name: "tokio-worker".into(),
                tid: Some(11)
            }
        );
    }
    i.loops = vec![woken_loop("application", 12, 71_040.0, 13_600)];
    let f = loop_findings(&i);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(
        f[0].summary.contains("return ready at once"),
        "{}",
        f[0].summary
    );
}
