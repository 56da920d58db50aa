//! Tests of the sampler: typed errors, intervals, shared answers, the history lock.

use super::*;

#[test]
fn builder_rejects_bad_config_with_typed_errors() {
    let field = |b: SamplerBuilder| match b.build() {
        Err(Error::InvalidConfig { field, .. }) => field,
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    assert_eq!(
        field(SamplerBuilder::new().with_interval(Duration::ZERO)),
        "interval"
    );
    assert_eq!(
        field(SamplerBuilder::new().with_interval(Duration::from_micros(10))),
        "interval"
    );
    assert_eq!(field(SamplerBuilder::new().with_history(0)), "history");
    assert_eq!(
        field(SamplerBuilder::new().with_history(MAX_HISTORY + 1)),
        "history"
    );
    assert_eq!(
        field(SamplerBuilder::new().with_switch_split_every(0)),
        "switch_split_every"
    );
    assert_eq!(
        field(SamplerBuilder::new().with_thread_name("a-name-longer-than-15")),
        "thread_name"
    );
}

#[test]
fn interval_between_adds_up_to_the_whole_span() {
    let s = SamplerBuilder::new().with_history(3).build().unwrap();
    for _ in 0..4 {
        s.sample().unwrap();
    }
    // Snapshot 0 was evicted; a reversed or equal pair is no interval.
    assert!(s.interval_between(0, 3).is_none());
    assert!(s.interval_between(2, 2).is_none());
    assert!(s.interval_between(3, 2).is_none());
    let (a, b) = (
        s.interval_between(1, 2).unwrap(),
        s.interval_between(2, 3).unwrap(),
    );
    let whole = s.interval_between(1, 3).unwrap();
    assert_eq!((whole.from_seq, whole.to_seq), (1, 3));
    assert_eq!(a.duration_ns + b.duration_ns, whole.duration_ns);
    assert_eq!(
        a.process.cpu_time_ns + b.process.cpu_time_ns,
        whole.process.cpu_time_ns
    );
}

/// The interval between the two newest snapshots is computed once and
/// shared by every follower (the owned calls get a copy of it, and
/// keep none of theirs); it is
/// what a fresh computation gives, also when an end did not read the
/// switch split, and a newer snapshot is never answered from it.
#[test]
fn followers_share_the_newest_interval_and_it_equals_a_fresh_one() {
    let s = SamplerBuilder::new()
        .with_switch_split_every(3)
        .build()
        .unwrap();
    let fresh = |from: u64, to: u64| {
        let h = s.history();
        let find = |seq| h.iter().find(|x| x.header.seq == seq).unwrap();
        between_in_history(&h, find(from), find(to))
    };
    s.sample().unwrap();
    for _ in 0..4 {
        let to = s.sample().unwrap();
        let owned = s.latest_interval().unwrap();
        assert_eq!(owned, fresh(to - 1, to));
        assert!(
            s.inner.readings.interval(to - 1, to).is_none(),
            "an owned call keeps none"
        );
        let first = s.latest_interval_shared().unwrap();
        assert_eq!((first.from_seq, first.to_seq), (to - 1, to));
        let again = s.interval_between_shared(to - 1, to).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "computed once");
        assert_eq!(*first, fresh(to - 1, to));
        assert_eq!(s.latest_interval().unwrap(), *first);
        assert_eq!(s.interval_between(to - 1, to).unwrap(), *first);
    }
    let newest = s.latest_interval_shared().unwrap();
    let to = s.sample().unwrap();
    let next = s.latest_interval_shared().unwrap();
    assert_eq!((next.from_seq, next.to_seq), (to - 1, to));
    assert!(!Arc::ptr_eq(&newest, &next));
    // A follower behind the others gets its own pair, computed now,
    // and the shared one stays.
    let behind = s.interval_between_shared(to - 2, to - 1).unwrap();
    assert_eq!(*behind, fresh(to - 2, to - 1));
    let span = s.interval_between_shared(to - 3, to).unwrap();
    assert_eq!(*span, fresh(to - 3, to));
    assert!(Arc::ptr_eq(&s.latest_interval_shared().unwrap(), &next));
}

/// The shared interval is written over the one it replaces (its
/// records and names reused): as threads come and go, with names of
/// every length, it still equals a fresh computation.
#[test]
fn an_interval_written_over_the_one_it_replaces_equals_a_fresh_one() {
    let s = SamplerBuilder::new().build().unwrap();
    let fresh = |from: u64, to: u64| {
        let h = s.history();
        let find = |seq| h.iter().find(|x| x.header.seq == seq).unwrap();
        between_in_history(&h, find(from), find(to))
    };
    let mut parked: Vec<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)> = Vec::new();
    s.sample().unwrap();
    for n in 0..8usize {
        if n % 3 == 2 {
            // Ends the oldest: its sender dropped, its recv fails.
            if let Some((tx, h)) = parked.pop() {
                drop(tx);
                h.join().unwrap();
            }
        } else {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let h = std::thread::Builder::new()
                .name("n".repeat(1 + n * 2))
                .spawn(move || {
                    let _ = rx.recv();
                })
                .unwrap();
            parked.insert(0, (tx, h));
        }
        let to = s.sample().unwrap();
        let shared = s.latest_interval_shared().unwrap();
        assert_eq!(*shared, fresh(to - 1, to), "round {n}");
    }
    for (tx, h) in parked {
        drop(tx);
        h.join().unwrap();
    }
}

/// Findings and a report's body are computed once per stored snapshot
/// and shared: they say what a fresh computation says, the parts read
/// at each call (stats, time) still move, and a newer snapshot is never
/// answered from an older one's entry.
#[test]
fn readers_share_one_computation_per_snapshot_and_never_answer_an_older_one() {
    let s = SamplerBuilder::new().build().unwrap();
    s.sample().unwrap();
    let seq = s.sample().unwrap();
    let first = s.report();
    let again = s.report();
    let fresh = s.report_body(&s.diagnose_history(&s.history()));
    let body = |r: &Report| ReportBody {
        interval: r.interval.clone(),
        thread_groups: r.thread_groups.clone(),
        threads_folded: r.threads_folded,
        findings: r.findings.clone(),
        warnings: r.warnings.clone(),
    };
    assert_eq!(body(&first), fresh);
    assert_eq!(body(&again), fresh);
    assert_eq!(s.findings(), fresh.findings);
    assert_eq!(
        s.findings_with(s.thresholds()).unwrap(),
        fresh.findings,
        "the shared findings are what a fresh computation finds"
    );
    assert!(again.unix_time_ns >= first.unix_time_ns);
    assert_eq!(first.interval.as_ref().map(|i| i.to_seq), Some(seq));

    let newer = s.sample().unwrap();
    let later = s.report();
    assert_eq!(later.interval.as_ref().map(|i| i.to_seq), Some(newer));
    assert_eq!(later.stats.total_samples, first.stats.total_samples + 1);
    assert_eq!(
        body(&later),
        s.report_body(&s.diagnose_history(&s.history()))
    );
}

/// A reader holds the history lock only to copy the ring: while
/// `report()` and `snapshots()` run on a long history, the lock the
/// sampler needs is free nearly all the time (both used to hold it for
/// their whole run).
#[test]
fn report_does_not_hold_the_history_lock_while_it_works() {
    // Many threads per snapshot: the reader's work (intervals over every
    // thread) is then far larger than its copy of the ring.
    let gate = Arc::new(std::sync::Barrier::new(101));
    let parked: Vec<_> = (0..100)
        .map(|_| {
            let g = gate.clone();
            std::thread::spawn(move || {
                g.wait();
            })
        })
        .collect();
    let s = SamplerBuilder::new().with_history(2_000).build().unwrap();
    for _ in 0..2_000 {
        s.sample().unwrap();
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (s, done) = (s.clone(), done.clone());
        std::thread::spawn(move || {
            for _ in 0..3 {
                std::hint::black_box(s.report());
                std::hint::black_box(s.snapshots());
            }
            done.store(true, Ordering::Release);
        })
    };
    let (mut tries, mut free) = (0u64, 0u64);
    while !done.load(Ordering::Acquire) {
        tries += 1;
        free += u64::from(s.inner.history.try_lock().is_ok());
        std::thread::yield_now();
    }
    reader.join().unwrap();
    gate.wait();
    for p in parked {
        p.join().unwrap();
    }
    assert!(
        tries >= 10,
        "the reports ended before the check began ({tries} tries)"
    );
    assert!(
        free * 4 >= tries * 3,
        "history lock free in only {free} of {tries} tries while report() ran"
    );
}

/// A kernel source over the TIDs it is handed (threads of this process):
/// every counter an interval reads moves between reads, by amounts that
/// differ by thread and by read, with names, histograms, wakers, ready
/// descriptors and calls by syscall, as the eBPF source's entries have.
/// The threads it knows change: one more is handed to it every few reads.
struct MovingKernel {
    tids: Arc<Mutex<Vec<u64>>>,
    threads: Vec<crate::kernel::KernelThreadStats>,
    round: u64,
}

impl crate::kernel::KernelSource for MovingKernel {
    fn read(&mut self) -> std::result::Result<crate::KernelSample, crate::KernelSourceError> {
        use crate::kernel::{FdKind, KernelThreadStats, ReadyFd, Syscall, SyscallCalls, Waker};
        self.round += 1;
        let r = self.round;
        let tids = lock(&self.tids).clone();
        for &tid in &tids {
            if !self.threads.iter().any(|t| t.tid == tid) {
                self.threads.push(KernelThreadStats {
                    tid,
                    name: format!("kernel-{tid}"),
                    ..Default::default()
                });
            }
        }
        for (i, t) in self.threads.iter_mut().enumerate() {
            let i = i as u64;
            let x = r.wrapping_mul(2_654_435_761).wrapping_add(i * 40_503) % 1000;
            t.total_on_cpu_ns += 1_000_000 * i + x * 7_919;
            t.total_voluntary_switches += 100 * i + x % 97;
            t.total_involuntary_switches += x % 13;
            t.total_off_cpu.sleep_ns += (i % 3 != 1) as u64 * (300_000_000 + x * 104_729);
            t.total_off_cpu.poll_ns += x * 15_485;
            t.total_off_cpu.lock_ns += x * 3_001;
            t.total_off_cpu.preempted_ns += x * 1_299;
            t.total_wakes += 100 * i + x % 89;
            t.total_interrupt_wakes += 50 * i;
            t.total_process_thread_wakes += x % 29;
            t.total_other_process_wakes += x % 3;
            // Every third thread polls without blocking, 100,000 times
            // a read: a busy poller at any pace of reads up to a second.
            let polls = if i % 3 == 1 { 100_000 } else { x % 31 };
            t.poll.total_calls += polls;
            t.poll.total_idle_calls += polls * 9 / 10;
            t.poll.total_zero_timeout_calls += polls * 6 / 10;
            t.poll.total_blocked_calls += x % 5;
            t.poll.total_idle_nonblocking_calls += polls * 8 / 10;
            t.poll.total_blocked_ns += 150_000 + x * 3_571;
            t.sleep.total_calls += 100 * (i % 2);
            t.sleep.total_known_request_calls += 90 * (i % 2);
            t.sleep.total_requested_ns += 90_000_000 * (i % 2);
            t.sleep.total_actual_ns += 95_000_000 * (i % 2) + x * 1_117;
            t.sleep.total_interrupted_calls += x % 4;
            t.total_timed_futex_waits += x % 17;
            t.total_futex_timeouts += x % 5;
            for k in 0..4 {
                t.off_cpu_histogram.record((x + k * 131) * 1_000);
                t.run_queue_latency_histogram.record((x + k * 17) * 100);
                t.poll.timeout_histogram.record(1_000_000 << (k % 4));
            }
            t.top_wakers = (0..i % 4)
                .map(|w| Waker {
                    tid: 20_000 + w,
                    name: format!("waker-{w}"),
                    total_wakes: r * (100 + w) + x,
                })
                .collect();
            t.calls_by_syscall = [Syscall::Poll, Syscall::EpollPwait, Syscall::ClockNanosleep]
                .into_iter()
                .enumerate()
                .map(|(k, s)| SyscallCalls::new(s, r * (k as u64 + i % 3)))
                .filter(|c| c.total_calls > 0)
                .collect();
            t.ready_fds = (0..i % 3)
                .map(|k| ReadyFd::new(3 + k as i32, FdKind::from_code(k + r % 3)))
                .collect();
        }
        Ok(crate::KernelSample {
            source: "moving".into(),
            pid: std::process::id(),
            // Not in TID order, as a source may hand them.
            threads: self.threads.iter().rev().cloned().collect(),
            total_dropped_events: 0,
            total_thread_exits: r / 3,
        })
    }
}

/// The intervals of a report and of its rules decode each end as an
/// interval reads it (no kernel histograms, no names) and the newest
/// once for all of them: on a history of a kernel view whose every
/// counter moves, every interval and the report's whole body (interval,
/// findings, groups, warnings) are what decoding every end whole at
/// each interval gives.
#[test]
fn lean_and_shared_decoding_gives_the_report_of_decoding_everything() {
    let tids = Arc::new(Mutex::new(Vec::new()));
    // Windows of tens of milliseconds, so that every rule runs on a
    // history taken in a fraction of a second. Run-queue contention is
    // kept rare and compared apart: who competes for the CPU is read from
    // the machine at each diagnosis, so two diagnoses of one history may
    // name different competitors.
    let ms = Duration::from_millis;
    let t = Thresholds::default()
        .with_window(ms(40))
        .with_min_window(ms(10))
        .with_cpu_window(ms(80))
        .with_cpu_min_window(ms(20))
        .with_wakeups_window(ms(120))
        .with_wakeups_min_window(ms(20))
        .with_memory_min_window(ms(20))
        .with_wakeups_budget_everywhere(true)
        .with_run_queue_wait_percent(100.0)
        .with_run_queue_critical_wait_percent(100.0)
        // Any thread that ran is a CPU hog: the CPU window's interval,
        // computed without the kernel view, is then read.
        .with_cpu_hog_percent(0.01)
        .with_cpu_hog_critical_percent(0.02);
    let s = SamplerBuilder::new()
        .with_switch_split_every(3)
        .with_thresholds(t)
        .with_kernel_source(Box::new(MovingKernel {
            tids: tids.clone(),
            threads: Vec::new(),
            round: 0,
        }))
        .build()
        .unwrap();
    let stop = Arc::new(std::sync::Barrier::new(7));
    let mut handles = Vec::new();
    for n in 0..14u64 {
        if n % 2 == 0 && handles.len() < 6 {
            let (stop, tids, started) = (
                stop.clone(),
                tids.clone(),
                Arc::new(std::sync::Barrier::new(2)),
            );
            let go = started.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("kt-{n}"))
                    .spawn(move || {
                        lock(&tids).push(crate::platform::clock::current_tid());
                        go.wait();
                        stop.wait();
                    })
                    .unwrap(),
            );
            started.wait();
        }
        s.sample().unwrap();
        std::thread::sleep(ms(5));
    }
    let h = s.history();
    assert!(h.len() >= 14, "{} snapshots", h.len());
    let newest = h.latest().unwrap();
    let kernel = newest.kernel().unwrap();
    assert!(
        kernel.threads.len() >= 6,
        "the kernel view covers the threads"
    );
    // Every interval of the history, one `SharedEnd` throughout: it
    // keeps the end of one `to` and decodes the next one's, and each
    // interval is written over the records of the ones before, given back.
    let mut shared = SharedEnd::default();
    for to in h.iter() {
        for from in h.iter().filter(|f| f.header.seq < to.header.seq) {
            let lean = crate::interval::between_in_history_sharing(&h, from, to, &mut shared);
            let whole = crate::interval::between_in_history_sharing(
                &h,
                from,
                to,
                &mut SharedEnd::decoding_everything(),
            );
            assert_eq!(lean, whole, "{} to {}", from.header.seq, to.header.seq);
            let with_kernel = lean.threads.iter().filter(|t| t.kernel.is_some()).count();
            assert!(
                with_kernel >= 1,
                "kernel views in {} to {}",
                from.header.seq,
                to.header.seq
            );
            shared.give_back(lean.threads);
        }
    }
    // The report's body, each from the same remembered severities.
    let body = |shared: &mut SharedEnd| {
        *lock(&s.inner.severities) = diagnose::SeverityMemory::default();
        s.report_body(&s.diagnose_history_sharing(&h, shared))
    };
    // Run-queue contention at 100% of the time still fires (a test
    // thread of this binary waited for a CPU the whole window beside
    // stress-ng), and its competitors are read from the machine at each
    // diagnosis: compared without it.
    let without_contention = |mut b: ReportBody| {
        b.findings
            .retain(|f| f.kind != diagnose::FindingKind::RunQueueContention);
        b
    };
    let lean = without_contention(body(&mut SharedEnd::default()));
    let whole = without_contention(body(&mut SharedEnd::decoding_everything()));
    assert_eq!(lean, whole);
    // Twice over the records the diagnoses before gave back, as the
    // sampler's next reports are.
    let mut reused = SharedEnd::with_spare(shared.into_spare());
    for _ in 0..2 {
        assert_eq!(without_contention(body(&mut reused)), whole);
    }
    assert!(
        !lean.findings.is_empty(),
        "the moving counters make findings"
    );
    assert!(
        lean.findings
            .iter()
            .any(|f| f.kind == diagnose::FindingKind::CpuHog),
        "a CPU hog is found over the CPU window"
    );
    stop.wait();
    for h in handles {
        h.join().unwrap();
    }
}
