//! Unit tests of the Linux backend's logic against the fake `Sys`.

use super::descriptors::{EXHAUSTION_BACKOFF_SAMPLES, KEPT_SHARE_DIVISOR};
use super::fake::{FakeSys, OPEN};
use super::*;

fn backend(sys: FakeSys, target: Target) -> LinuxBackend<FakeSys> {
    LinuxBackend::new(sys, target).expect("fake backend")
}

fn sample(
    b: &mut LinuxBackend<FakeSys>,
    split: bool,
) -> (Vec<ThreadRow>, Vec<SampleWarning>, ProcessSample) {
    let mut threads = Vec::new();
    let mut warnings = Vec::new();
    let p = b
        .sample(
            SampleRequest {
                switch_split: split,
                quiet: &[],
            },
            &mut threads,
            &mut warnings,
        )
        .expect("sample");
    (threads, warnings, p)
}

#[test]
fn reads_clock_schedstat_status_and_memory() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "worker");
    *sys.thread(11) = FakeThread {
        cpu_ns: 5_000,
        wait_ns: 700,
        slices: 9,
        vol: 6,
        invol: 3,
        ..sys.thread(11).clone()
    };
    let mut b = backend(sys, Target::SelfProcess);
    let (threads, warnings, p) = sample(&mut b, true);
    assert!(warnings.is_empty());
    assert_eq!(threads.len(), 2);
    let w = threads.iter().find(|t| t.ident.tid == 11).unwrap();
    assert_eq!(&*w.ident.name, "worker");
    assert_eq!(w.ident.cpu_time_source, CpuTimeSource::ThreadClock);
    assert_eq!(
        (
            w.total_cpu_time_ns,
            w.total_run_queue_wait_ns,
            w.total_switches
        ),
        (5_000, 700, 9)
    );
    assert_eq!(
        (w.total_voluntary_switches, w.total_involuntary_switches),
        (6, 3)
    );
    assert_eq!(p.rss_bytes, 100 * 4096);
    assert_eq!(p.peak_rss_bytes, Some(800 * 1024));
    assert_eq!(p.thread_count, 2);
    // Without the split, switch counts are absent rather than stale.
    let (threads, _, _) = sample(&mut b, false);
    assert!(threads.iter().all(|t| t.total_voluntary_switches == ABSENT));
}

#[test]
fn exited_threads_drop_out_and_close_descriptors() {
    let base = OPEN.with(|c| c.get());
    let mut sys = FakeSys::new(10);
    for tid in 11..20 {
        sys.spawn(tid, "pool");
    }
    let mut b = backend(sys, Target::SelfProcess);
    let (threads, _, _) = sample(&mut b, false);
    assert_eq!(threads.len(), 10);
    // 2 process files + 2 per thread.
    assert_eq!(OPEN.with(|c| c.get()) - base, 2 + 2 * 10);
    for tid in 11..20 {
        b.reader.sys.exit(tid);
    }
    let (threads, _, _) = sample(&mut b, false);
    assert_eq!(threads.len(), 1);
    assert_eq!(b.tracked_len(), 1);
    assert_eq!(OPEN.with(|c| c.get()) - base, 2 + 2);
    drop(b);
    assert_eq!(OPEN.with(|c| c.get()), base);
}

#[test]
fn reused_tid_gets_a_new_serial_and_is_never_merged() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "old");
    sys.thread(11).cpu_ns = 9_000_000;
    let mut b = backend(sys, Target::SelfProcess);
    let (before, _, _) = sample(&mut b, false);
    let old = before
        .iter()
        .find(|t| t.ident.tid == 11)
        .unwrap()
        .ident
        .serial;
    // The thread exits and a new one takes the same TID before the next sample.
    b.reader.sys.exit(11);
    b.reader.sys.spawn(11, "new");
    b.reader.sys.thread(11).cpu_ns = 1_000;
    let (after, _, _) = sample(&mut b, false);
    let t = after.iter().find(|t| t.ident.tid == 11).unwrap();
    assert_ne!(t.ident.serial, old);
    assert_eq!(&*t.ident.name, "new");
    assert_eq!(t.total_cpu_time_ns, 1_000);
}

#[test]
fn rename_keeps_serial() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "before");
    let mut b = backend(sys, Target::SelfProcess);
    let (a, _, _) = sample(&mut b, true);
    // pthread_setname_np runs on the thread itself: it was scheduled.
    let t = b.reader.sys.thread(11);
    t.name = "after".into();
    t.cpu_ns += 1000;
    t.slices += 1;
    let (c, _, _) = sample(&mut b, true);
    let (a, c) = (&a[1].ident, &c[1].ident);
    assert_eq!(a.serial, c.serial);
    assert_eq!((&*a.name, &*c.name), ("before", "after"));
}

#[test]
fn other_process_uses_schedstat_then_stat_ticks() {
    let mut sys = FakeSys::new(77);
    sys.self_process = false;
    sys.thread(77).cpu_ns = 42_000_000;
    let mut b = backend(sys, Target::Pid(77));
    let (t, _, _) = sample(&mut b, false);
    assert_eq!(t[0].ident.cpu_time_source, CpuTimeSource::Schedstat);
    assert_eq!(t[0].total_cpu_time_ns, 42_000_000);

    let mut sys = FakeSys::new(77);
    sys.has_schedstat = false;
    sys.thread(77).cpu_ns = 42_000_000;
    let mut b = backend(sys, Target::Pid(77));
    let (t, _, _) = sample(&mut b, false);
    assert_eq!(t[0].ident.cpu_time_source, CpuTimeSource::StatTicks);
    assert_eq!(t[0].total_cpu_time_ns, 40_000_000, "4 ticks of 10 ms");
    assert_eq!(t[0].total_run_queue_wait_ns, ABSENT);
    assert_eq!(t[0].total_switches, ABSENT);
}

#[test]
fn descriptor_exhaustion_degrades_and_recovers() {
    let base = OPEN.with(|c| c.get());
    let mut sys = FakeSys::new(10);
    for tid in 11..15 {
        sys.spawn(tid, "w");
        sys.thread(tid).cpu_ns = 1;
    }
    // Room for the process files, the schedstat probe and two threads only.
    sys.max_files = (base as usize) + 2 + 4;
    let mut b = backend(sys, Target::SelfProcess);
    let (threads, warnings, _) = sample(&mut b, false);
    assert_eq!(
        threads.len(),
        5,
        "every thread is still sampled (CPU from its clock)"
    );
    assert_eq!(
        warnings,
        vec![SampleWarning::DescriptorsExhausted {
            threads_without_descriptors: 3
        }]
    );
    let degraded = threads
        .iter()
        .filter(|t| t.total_run_queue_wait_ns == ABSENT)
        .count();
    assert_eq!(degraded, 3);
    b.reader.sys.max_files = usize::MAX;
    let (threads, warnings, _) = sample(&mut b, false);
    assert!(warnings.is_empty());
    assert!(threads.iter().all(|t| t.total_run_queue_wait_ns != ABSENT));
}

#[test]
fn target_gone_is_no_such_process() {
    let sys = FakeSys::new(5);
    let mut b = backend(sys, Target::Pid(5));
    b.reader.sys.exit(5);
    let mut threads = Vec::new();
    let err = b
        .sample(
            SampleRequest {
                switch_split: false,
                quiet: &[],
            },
            &mut threads,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::NoSuchProcess { pid: 5 }), "{err}");
}

#[test]
fn listing_is_skipped_only_while_the_thread_set_is_unchanged() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "a");
    let mut b = backend(sys, Target::SelfProcess);
    assert_eq!(sample(&mut b, false).0.len(), 2);
    // One exits and another starts between samples: same count, new set.
    b.reader.sys.exit(11);
    b.reader.sys.spawn(12, "b");
    let (t, _, p) = sample(&mut b, false);
    let tids: Vec<u64> = t.iter().map(|t| t.ident.tid).collect();
    assert_eq!(tids, vec![10, 12]);
    assert_eq!(p.thread_count, 2);
    // A thread starts, none exits.
    b.reader.sys.spawn(13, "c");
    let (t, _, _) = sample(&mut b, false);
    assert_eq!(t.len(), 3);
    assert_eq!(b.tracked_len(), 3);
}

#[test]
fn idle_threads_skip_the_schedstat_and_status_reads_and_stay_exact() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "idle");
    sys.spawn(12, "busy");
    for tid in [11, 12] {
        let t = sys.thread(tid);
        (t.cpu_ns, t.slices, t.vol, t.invol) = (5_000, 3, 2, 1);
    }
    let mut b = backend(sys, Target::SelfProcess);
    sample(&mut b, true);
    let (sched0, status0) = (b.reader.sys.schedstat_reads, b.reader.sys.status_reads);
    // 12 runs and switches; 11 and the main thread stay blocked.
    let t = b.reader.sys.thread(12);
    (t.cpu_ns, t.slices, t.vol) = (9_000, 4, 3);
    let (threads, _, _) = sample(&mut b, true);
    assert_eq!(
        b.reader.sys.schedstat_reads - sched0,
        1,
        "only the thread whose clock moved reads schedstat"
    );
    assert_eq!(
        b.reader.sys.status_reads - status0,
        1,
        "only the thread that switched reads status"
    );
    let get = |tid| threads.iter().find(|t| t.ident.tid == tid).unwrap().clone();
    let (idle, busy) = (get(11), get(12));
    assert_eq!(
        (
            idle.total_cpu_time_ns,
            idle.total_voluntary_switches,
            idle.total_involuntary_switches
        ),
        (5_000, 2, 1)
    );
    assert_eq!(
        (
            busy.total_cpu_time_ns,
            busy.total_voluntary_switches,
            busy.total_switches
        ),
        (9_000, 3, 4)
    );
}

#[test]
fn a_thread_on_a_cpu_always_reads_its_clock() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "spinner");
    // On a CPU: its clock runs ahead of schedstat, which only catches up at a tick.
    sys.thread(11).pending_ns = 700;
    let mut b = backend(sys, Target::SelfProcess);
    sample(&mut b, false);
    b.reader.sys.thread(11).pending_ns = 900;
    let (threads, _, _) = sample(&mut b, false);
    let t = threads.iter().find(|t| t.ident.tid == 11).unwrap();
    assert_eq!(
        t.total_cpu_time_ns,
        1_000 + 900,
        "the in-progress slice is counted"
    );
}

#[test]
fn a_sleeping_thread_renamed_by_another_shows_the_name_once_it_runs() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "old");
    let mut b = backend(sys, Target::SelfProcess);
    sample(&mut b, true);
    b.reader.sys.thread(11).name = "new".into();
    let (t, _, _) = sample(&mut b, true);
    assert_eq!(&*t[1].ident.name, "old");
    b.reader.sys.thread(11).slices += 1;
    b.reader.sys.thread(11).cpu_ns += 10;
    let (t, _, _) = sample(&mut b, true);
    assert_eq!(&*t[1].ident.name, "new");
}

#[test]
fn schedstat_without_sched_info_is_absent_not_zero_and_never_freezes_switch_counts() {
    let mut sys = FakeSys::new(10);
    sys.schedstat_zeros = true;
    sys.spawn(11, "w");
    let t = sys.thread(11);
    (t.cpu_ns, t.vol) = (5_000, 1);
    let mut b = backend(sys, Target::SelfProcess);
    sample(&mut b, true);
    let t = b.reader.sys.thread(11);
    (t.cpu_ns, t.vol) = (6_000, 2);
    let (threads, _, _) = sample(&mut b, true);
    let w = threads.iter().find(|t| t.ident.tid == 11).unwrap();
    assert_eq!(w.total_cpu_time_ns, 6_000);
    assert_eq!(w.total_voluntary_switches, 2, "switch counts are re-read");
    assert_eq!(
        (w.total_switches, w.total_run_queue_wait_ns),
        (ABSENT, ABSENT)
    );
}

/// Spawns `n` threads after the main one (TIDs `pid + 1 ..`), each having
/// run and switched a little so every counter is non-zero.
fn many_threads(pid: u32, n: u32) -> FakeSys {
    let mut sys = FakeSys::new(pid);
    for tid in pid + 1..=pid + n {
        sys.spawn(tid, "pool");
        let t = sys.thread(tid);
        (t.cpu_ns, t.wait_ns, t.slices, t.vol, t.invol) = (5_000, 300, 4, 3, 1);
    }
    sys
}

/// Every thread present with every counter (nothing degraded).
fn assert_complete(threads: &[ThreadRow], count: usize, split: bool) {
    assert_eq!(threads.len(), count);
    for t in threads {
        assert_ne!(t.total_cpu_time_ns, ABSENT, "{t:?}");
        assert_ne!(t.total_run_queue_wait_ns, ABSENT, "{t:?}");
        assert_ne!(t.total_switches, ABSENT, "{t:?}");
        if split {
            assert_ne!(t.total_voluntary_switches, ABSENT, "{t:?}");
        }
        assert!(!t.ident.name.is_empty(), "{t:?}");
    }
}

/// Every thread runs and switches once (so its `status` is read again).
fn run_all(sys: &mut FakeSys) {
    for t in sys.threads.values_mut() {
        t.cpu_ns += 1_000;
        t.slices += 1;
        t.vol += 1;
    }
}

fn kept(b: &LinuxBackend<FakeSys>) -> u64 {
    let (counted, held) = b.kept_descriptors();
    assert_eq!(counted, held, "the policy's count matches the table");
    held
}

#[test]
fn kept_descriptors_stay_within_a_quarter_of_the_limit() {
    let base = OPEN.with(|c| c.get());
    let mut sys = many_threads(10, 300);
    sys.nofile = Some(400);
    let mut b = backend(sys, Target::SelfProcess);
    for _ in 0..3 {
        let (threads, warnings, _) = sample(&mut b, true);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_complete(&threads, 301, true);
        // The share holds the process files and the kept ones: the rest
        // is the host's.
        assert_eq!(kept(&b), 400 / KEPT_SHARE_DIVISOR - 2);
        assert_eq!(OPEN.with(|c| c.get()) - base, 100);
    }
    // The kept ones are read in place, the others by open-read-close
    // (threads that ran: an idle thread's clock says schedstat is unchanged).
    run_all(&mut b.reader.sys);
    let opens = b.reader.sys.opens;
    sample(&mut b, false);
    let reopened = b.reader.sys.opens - opens;
    assert_eq!(
        reopened,
        301 - 98,
        "only threads without a kept schedstat reopen"
    );
}

#[test]
fn the_top_of_the_table_is_left_to_the_host() {
    let base = OPEN.with(|c| c.get()) as u64;
    let mut sys = many_threads(10, 50);
    sys.nofile = Some(1000);
    let mut b = backend(sys, Target::SelfProcess);
    // The host holds descriptors up to 20 short of its limit.
    let host: Vec<_> = (base + 2..1000 - 20)
        .map(|_| b.reader.sys.open("statm").expect("host file"))
        .collect();
    let (threads, warnings, _) = sample(&mut b, true);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_complete(&threads, 51, true);
    assert_eq!(kept(&b), 0, "nothing kept within the headroom");
    assert_eq!(
        OPEN.with(|c| c.get()) as u64,
        1000 - 20,
        "all 20 still free"
    );
    // The host closes some: the sampler keeps descriptors below the headroom
    // only, and then no more than the share.
    drop(host);
    run_all(&mut b.reader.sys);
    sample(&mut b, true);
    assert_eq!(kept(&b), 51 + 51, "both files of every thread");
    assert!(kept(&b) <= 1000 / KEPT_SHARE_DIVISOR);
}

#[test]
fn emfile_gives_back_kept_descriptors_and_waits_before_keeping_again() {
    let base = OPEN.with(|c| c.get());
    let mut b = backend(many_threads(10, 20), Target::SelfProcess);
    sample(&mut b, true);
    assert_eq!(kept(&b), 42);
    // Ten threads start while the process is at its limit: not even
    // open-read-close works for them.
    b.reader.sys.max_files = OPEN.with(|c| c.get()) as usize;
    for tid in 100..110 {
        b.reader.sys.spawn(tid, "late");
    }
    let (threads, warnings, _) = sample(&mut b, true);
    assert_eq!(
        threads.len(),
        31,
        "CPU time from the clock for every thread"
    );
    assert_eq!(
        warnings,
        vec![SampleWarning::DescriptorsExhausted {
            threads_without_descriptors: 10
        }]
    );
    assert_eq!(kept(&b), 0, "the kept descriptors are given back");
    assert_eq!(OPEN.with(|c| c.get()) - base, 2);
    // The host frees descriptors: every thread is read completely again, by
    // open-read-close, and the sampler does not re-take them.
    b.reader.sys.max_files = usize::MAX;
    for _ in 1..EXHAUSTION_BACKOFF_SAMPLES {
        let (threads, warnings, _) = sample(&mut b, true);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(threads.len(), 31);
        assert!(threads.iter().all(|t| t.total_run_queue_wait_ns != ABSENT));
        assert_eq!(kept(&b), 0);
    }
    run_all(&mut b.reader.sys);
    sample(&mut b, false);
    assert_eq!(kept(&b), 31, "schedstat kept again after the back-off");
    run_all(&mut b.reader.sys);
    sample(&mut b, true);
    assert_eq!(kept(&b), 31 * 2, "status too, once read again");
}

#[test]
fn a_lowered_limit_closes_the_excess_on_the_next_sample() {
    let mut sys = many_threads(10, 100);
    sys.nofile = Some(4096);
    let mut b = backend(sys, Target::SelfProcess);
    sample(&mut b, true);
    assert_eq!(kept(&b), 202);
    b.reader.sys.nofile = Some(256);
    let (threads, warnings, _) = sample(&mut b, true);
    assert!(warnings.is_empty());
    assert_complete(&threads, 101, true);
    assert_eq!(kept(&b), 256 / KEPT_SHARE_DIVISOR - 2);
}

#[test]
fn samplers_of_one_process_share_one_budget() {
    // Three samplers of one host process (as `watch --name` makes), each
    // on a target with 300 threads, under a limit of 400: together they
    // keep no more than the share one sampler may keep.
    let pool = std::sync::Arc::new(DescriptorPool::default());
    let mut backends: Vec<_> = (0..3u32)
        .map(|i| {
            let mut sys = many_threads(10 + i * 1000, 300);
            sys.nofile = Some(400);
            sys.pool = pool.clone();
            backend(sys, Target::Pid(10 + i * 1000))
        })
        .collect();
    let share = 400 / KEPT_SHARE_DIVISOR;
    for _ in 0..3 {
        for b in &mut backends {
            let (threads, warnings, _) = sample(b, true);
            assert!(warnings.is_empty(), "{warnings:?}");
            assert_complete(&threads, 301, true);
        }
        let kept_all: u64 = backends.iter().map(kept).sum();
        assert_eq!(
            pool.held(),
            kept_all + 3 * 2,
            "the pool counts every sampler"
        );
        assert!(pool.held() <= share, "{} > {share}", pool.held());
    }
    // A sampler that goes away gives its share back to the others.
    let first = kept(&backends[0]);
    assert!(first > 0);
    backends.remove(0);
    assert_eq!(pool.held(), backends.iter().map(kept).sum::<u64>() + 2 * 2);
    for b in &mut backends {
        run_all(&mut b.reader.sys);
        sample(b, true);
    }
    assert_eq!(pool.held(), share, "the freed share is used again");
}

#[test]
fn samplers_beyond_the_process_files_share_hold_no_process_descriptor() {
    // 300 samplers of one host process (`watch --name` over 300 processes)
    // under a limit of 256: the process files of the first ones fill their
    // part of the share; the others hold none between samples, and every
    // one samples its whole process.
    let pool = std::sync::Arc::new(DescriptorPool::default());
    let base = OPEN.with(|c| c.get());
    let mut backends: Vec<_> = (0..300u32)
        .map(|i| {
            let mut sys = many_threads(10 + i * 1000, 3);
            sys.nofile = Some(256);
            sys.pool = pool.clone();
            backend(sys, Target::Pid(10 + i * 1000))
        })
        .collect();
    let part = 256 / KEPT_SHARE_DIVISOR / descriptors::PROCESS_FILES_SHARE_DIVISOR;
    let keeping = backends
        .iter()
        .filter(|b| b.reader.status.is_some())
        .count() as u64;
    // The fake keeps no task directory: two process files a sampler.
    assert_eq!(keeping, part / 2);
    for _ in 0..3 {
        for b in &mut backends {
            let opens = b.reader.sys.opens;
            let (threads, _, process) = sample(b, true);
            assert_complete(&threads, 4, true);
            assert_eq!(process.rss_bytes, 100 * 4096);
            if b.reader.status.is_none() {
                // statm and status opened for this sample.
                assert!(b.reader.sys.opens >= opens + 2);
            }
        }
        let held = OPEN.with(|c| c.get()) - base;
        assert_eq!(
            held as u64,
            pool.held(),
            "only what the pool counts is open"
        );
        assert!(pool.held() <= 256 / KEPT_SHARE_DIVISOR, "{}", pool.held());
    }
    drop(backends);
    assert_eq!(OPEN.with(|c| c.get()), base);
    assert_eq!(pool.held(), 0);
}

#[test]
fn a_sampler_built_at_the_top_of_the_table_is_refused() {
    let mut sys = many_threads(10, 3);
    sys.nofile = Some(HEADROOM_DESCRIPTORS);
    let pool = sys.pool.clone();
    match LinuxBackend::new(sys, Target::Pid(10)) {
        Err(Error::DescriptorsExhausted { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a sampler took the host's last descriptors"),
    }
    assert_eq!(pool.held(), 0, "nothing counted for a refused sampler");
}

#[test]
fn a_reused_tid_without_kept_descriptors_is_a_new_thread() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "old");
    sys.thread(11).cpu_ns = 9_000_000;
    sys.thread(11).slices = 50;
    // Limit just above the headroom: the process files fit, but no
    // per-thread descriptor is ever kept.
    sys.nofile = Some(HEADROOM_DESCRIPTORS + 2);
    let mut b = backend(sys, Target::Pid(10));
    let (before, _, _) = sample(&mut b, false);
    assert_eq!(kept(&b), 0);
    let old = before.iter().find(|t| t.ident.tid == 11).unwrap();
    assert_eq!(old.total_cpu_time_ns, 9_000_000);
    b.reader.sys.exit(11);
    b.reader.sys.spawn(11, "new");
    b.reader.sys.thread(11).slices = 1;
    let (after, _, _) = sample(&mut b, false);
    let new = after.iter().find(|t| t.ident.tid == 11).unwrap();
    assert_ne!(new.ident.serial, old.ident.serial);
    assert_eq!(new.total_cpu_time_ns, 1_000);
}

#[test]
fn exits_close_descriptors_and_the_count_follows() {
    let base = OPEN.with(|c| c.get());
    let mut sys = many_threads(10, 30);
    sys.nofile = Some(200);
    let mut b = backend(sys, Target::SelfProcess);
    sample(&mut b, true);
    assert_eq!(kept(&b), 31, "31 × 2 exceeds 200 / 4: schedstat only");
    for tid in 11..=40 {
        b.reader.sys.exit(tid);
    }
    sample(&mut b, true);
    assert_eq!(kept(&b), 1);
    run_all(&mut b.reader.sys);
    sample(&mut b, true);
    assert_eq!(kept(&b), 2, "status is kept again once all fit");
    drop(b);
    assert_eq!(OPEN.with(|c| c.get()), base);
}

#[test]
fn a_thread_queued_but_not_yet_run_keeps_its_counters_until_it_runs() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "w");
    let t = sys.thread(11);
    (t.cpu_ns, t.wait_ns, t.slices) = (5_000, 100, 2);
    let mut b = backend(sys, Target::SelfProcess);
    sample(&mut b, false);
    // Migrated while queued: the wait grows, the clock does not move.
    b.reader.sys.thread(11).wait_ns = 150;
    let (t, _, _) = sample(&mut b, false);
    assert_eq!(t[1].total_run_queue_wait_ns, 100, "shown at its next run");
    let w = b.reader.sys.thread(11);
    (w.cpu_ns, w.slices) = (5_100, 3);
    let (t, _, _) = sample(&mut b, false);
    assert_eq!(
        (t[1].total_cpu_time_ns, t[1].total_run_queue_wait_ns),
        (5_100, 150)
    );
}

#[test]
fn a_reused_tid_whose_clock_is_behind_is_a_new_thread() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "old");
    sys.thread(11).cpu_ns = 9_000;
    let mut b = backend(sys, Target::SelfProcess);
    let (before, _, _) = sample(&mut b, false);
    b.reader.sys.exit(11);
    b.reader.sys.spawn(11, "new");
    let sched0 = b.reader.sys.schedstat_reads;
    let (after, _, _) = sample(&mut b, false);
    assert!(
        b.reader.sys.schedstat_reads > sched0,
        "the new thread is read"
    );
    assert_ne!(after[1].ident.serial, before[1].ident.serial);
    assert_eq!(after[1].total_cpu_time_ns, 1_000);
}

#[test]
fn own_status_is_read_on_split_samples_only_and_the_peak_follows_the_rss() {
    let mut sys = FakeSys::new(10);
    sys.spawn(11, "w");
    let mut b = backend(sys, Target::SelfProcess);
    let (_, _, p) = sample(&mut b, true);
    assert_eq!(p.peak_rss_bytes, Some(800 * 1024));
    assert_eq!(b.reader.sys.process_status_reads_avoided, 0);
    // The RSS grows past the last peak read: the peak follows it.
    b.reader.sys.rss_pages = 300;
    b.reader.sys.spawn(12, "x");
    let (t, _, p) = sample(&mut b, false);
    assert_eq!(b.reader.sys.process_status_reads_avoided, 1);
    assert_eq!(p.peak_rss_bytes, Some(300 * 4096));
    assert_eq!((t.len(), p.thread_count), (3, 3), "a new thread is found");
    // Another process's status is read on every sample (zombie check).
    let mut b = backend(FakeSys::new(20), Target::Pid(20));
    sample(&mut b, false);
    sample(&mut b, false);
    assert_eq!(b.reader.sys.process_status_reads_avoided, 0);
}

/// Samples with `quiet` named quiet, as a kernel source would.
fn sample_quiet(b: &mut LinuxBackend<FakeSys>, split: bool, quiet: &[u64]) -> Vec<ThreadRow> {
    let mut threads = Vec::new();
    b.sample(
        SampleRequest {
            switch_split: split,
            quiet,
        },
        &mut threads,
        &mut Vec::new(),
    )
    .expect("sample");
    threads
}

/// Every value of each row, by tid.
fn values(rows: &[ThreadRow]) -> Vec<(u64, String, u64, u64, u64, u64, u64)> {
    let mut v: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.ident.tid,
                r.ident.name.to_string(),
                r.total_cpu_time_ns,
                r.total_run_queue_wait_ns,
                r.total_switches,
                r.total_voluntary_switches,
                r.total_involuntary_switches,
            )
        })
        .collect();
    v.sort();
    v
}

/// Another process with three idle threads and a busy one, every counter set.
fn quiet_target() -> LinuxBackend<FakeSys> {
    let mut sys = FakeSys::new(10);
    for tid in 11..=14 {
        sys.spawn(tid, "idle");
        let t = sys.thread(tid);
        (t.cpu_ns, t.wait_ns, t.slices, t.vol, t.invol) = (5_000 + u64::from(tid), 70, 9, 6, 3);
    }
    backend(sys, Target::Pid(10))
}

#[test]
fn quiet_threads_carry_exactly_what_a_full_read_gives_without_reading() {
    let mut b = quiet_target();
    let quiet = [11, 12, 13];
    // The first sample has nothing to carry: every thread is read.
    let first = sample_quiet(&mut b, true, &quiet);
    assert_eq!(first.len(), 5);
    assert_eq!(b.reader.sys.schedstat_reads, 5);
    for split in [false, true, false, true] {
        // 14 runs and switches between samples; 11-13 stay blocked.
        let t = b.reader.sys.thread(14);
        (t.cpu_ns, t.wait_ns, t.slices, t.vol) =
            (t.cpu_ns + 900, t.wait_ns + 5, t.slices + 1, t.vol + 1);
        let (sched0, status0) = (b.reader.sys.schedstat_reads, b.reader.sys.status_reads);
        let carried = sample_quiet(&mut b, split, &quiet);
        let reads = b.reader.sys.schedstat_reads - sched0;
        // The main thread and 14 always; a quiet one only on its turn.
        assert!(
            reads == 2 || (split && reads == 3),
            "split {split}: {reads} schedstat reads"
        );
        assert!(b.reader.sys.status_reads - status0 <= 2);
        // The same moment read in full gives the same values.
        let full = sample_quiet(&mut b, split, &[]);
        assert_eq!(values(&carried), values(&full), "split {split}");
    }
}

#[test]
fn a_quiet_thread_renamed_by_a_sibling_shows_its_new_name() {
    let mut b = quiet_target();
    let quiet = [11, 12, 13];
    sample_quiet(&mut b, true, &quiet);
    sample_quiet(&mut b, true, &quiet);
    // A sibling writes its /proc/TID/comm: no counter moves, no kernel
    // entry changes; the thread stays quiet.
    b.reader.sys.thread(12).name = "renamed".into();
    let name = |rows: &[ThreadRow]| {
        rows.iter()
            .find(|r| r.ident.tid == 12)
            .map(|r| r.ident.name.to_string())
            .unwrap()
    };
    let mut seen_after = None;
    for n in 1..=QUIET_FULL_READ_EVERY {
        // Samples without the split read no name: they do not count.
        sample_quiet(&mut b, false, &quiet);
        if name(&sample_quiet(&mut b, true, &quiet)) == "renamed" {
            seen_after = Some(n);
            break;
        }
    }
    assert!(
        seen_after.is_some(),
        "not renamed after {QUIET_FULL_READ_EVERY} split samples"
    );
}
