//! Unit tests of the Darwin backend's logic against the fake Mach `Sys`.
//! They run on any host; the real Mach calls are only compile-checked here.

use super::fake::{FakeSys, KERN_FAILURE, KERN_INVALID_ARGUMENT, TASK_VM_INFO_REV7_COUNT};
use super::*;
use crate::interval::Interval;
use crate::model::Snapshot;

const PID: u32 = 4242;

fn backend(sys: FakeSys) -> DarwinBackend<FakeSys> {
    DarwinBackend::new(sys, Target::SelfProcess).expect("fake backend")
}

fn try_sample(
    b: &mut DarwinBackend<FakeSys>,
    split: bool,
) -> Result<(Vec<ThreadRow>, ProcessSample)> {
    let mut threads = Vec::new();
    let mut warnings = Vec::new();
    let p = b.sample(
        SampleRequest {
            switch_split: split,
            quiet: &[],
        },
        &mut threads,
        &mut warnings,
    )?;
    assert!(warnings.is_empty(), "the Darwin backend has no warnings");
    Ok((threads, p))
}

fn sample(b: &mut DarwinBackend<FakeSys>, split: bool) -> (Vec<ThreadRow>, ProcessSample) {
    try_sample(b, split).expect("sample")
}

/// Every send right handed out has been released exactly once.
fn assert_ports_balanced(sys: &FakeSys) {
    assert_eq!(sys.outstanding(), 0, "leaked ports: {:?}", sys.refs);
    assert_eq!(
        sys.bad_releases, 0,
        "ports released twice or never handed out"
    );
}

fn tv(seconds: i32, microseconds: i32) -> TimeValue {
    TimeValue {
        seconds,
        microseconds,
    }
}

fn by_tid(threads: &[ThreadRow], tid: u64) -> &ThreadRow {
    threads
        .iter()
        .find(|t| t.ident.tid == tid)
        .expect("thread sampled")
}

#[test]
fn time_value_to_ns() {
    assert_eq!(tv(0, 0).as_ns(), 0);
    assert_eq!(tv(1, 500_000).as_ns(), 1_500_000_000);
    assert_eq!(tv(0, 1).as_ns(), 1_000, "one microsecond is the resolution");
    assert_eq!(
        tv(2_000_000_000, 999_999).as_ns(),
        2_000_000_000_999_999_000
    );
    // The kernel never writes negative parts; they must not wrap to huge values.
    assert_eq!(tv(-1, 5).as_ns(), 5_000);
    assert_eq!(tv(3, -5).as_ns(), 3_000_000_000);
    let t = ThreadTimes {
        user_time: tv(1, 250_000),
        system_time: tv(0, 750_000),
    };
    assert_eq!(t.cpu_ns(), 2_000_000_000);
}

#[test]
fn mach_ticks_to_ns() {
    let intel = Timebase { numer: 1, denom: 1 };
    let apple_silicon = Timebase {
        numer: 125,
        denom: 3,
    };
    assert_eq!(intel.ticks_to_ns(123_456_789), 123_456_789);
    // 24 MHz ticks: 24 million ticks are one second.
    assert_eq!(apple_silicon.ticks_to_ns(24_000_000), 1_000_000_000);
    assert_eq!(apple_silicon.ticks_to_ns(3), 125);
    // No intermediate overflow for large counts (~6.8 years of CPU in ticks)...
    assert_eq!(
        apple_silicon.ticks_to_ns(u64::MAX / 125),
        (u128::from(u64::MAX / 125) * 125 / 3) as u64
    );
    // ...and saturation instead of wrapping beyond u64.
    assert_eq!(apple_silicon.ticks_to_ns(u64::MAX), u64::MAX);
    // A failed mach_timebase_info (zeros) must not divide by zero.
    assert_eq!(Timebase { numer: 0, denom: 0 }.ticks_to_ns(77), 77);
    assert_eq!(Timebase { numer: 1, denom: 0 }.ticks_to_ns(77), 77);
}

#[test]
fn names_stop_at_nul_and_survive_bad_bytes() {
    let mut raw = [0u8; THREAD_NAME_BYTES];
    raw[..6].copy_from_slice(b"worker");
    raw[7] = b'x'; // after the NUL: ignored
    assert_eq!(&*name_from_bytes(&raw), "worker");
    assert_eq!(
        &*name_from_bytes(&[b'a'; THREAD_NAME_BYTES]),
        "a".repeat(64)
    );
    assert_eq!(&*name_from_bytes(&[0xff, b'z', 0]), "\u{fffd}z");
    assert_eq!(&*name_from_bytes(&[0; 4]), "");
}

#[test]
fn reads_threads_memory_power_and_releases_every_port() {
    let mut sys = FakeSys::new(PID);
    sys.spawn(0x207, 5001, "com.apple.main-thread.worker");
    sys.thread(0x207).times = ThreadTimes {
        user_time: tv(2, 1),
        system_time: tv(0, 500_000),
    };
    sys.power = PowerInfo {
        // 48 million ticks = 2 s at 24 MHz.
        total_user: 36_000_000,
        total_system: 12_000_000,
        task_interrupt_wakeups: 900,
        task_platform_idle_wakeups: 120,
    };
    let mut b = backend(sys);
    let (threads, p) = sample(&mut b, false);
    assert_ports_balanced(&b.sys);
    assert_eq!(threads.len(), 2);
    let w = by_tid(&threads, 5001);
    assert_eq!(&*w.ident.name, "com.apple.main-thread.worker");
    assert_eq!(w.ident.cpu_time_source, CpuTimeSource::MachThreadInfo);
    assert_eq!(w.total_cpu_time_ns, 2_500_001_000);
    // No per-thread form on Apple: absent, never zero.
    for t in &threads {
        assert_eq!(t.total_run_queue_wait_ns, ABSENT);
        assert_eq!(t.total_switches, ABSENT);
        assert_eq!(t.total_voluntary_switches, ABSENT);
        assert_eq!(t.total_involuntary_switches, ABSENT);
    }
    assert_eq!(
        p,
        ProcessSample {
            pid: PID,
            rss_bytes: 40 << 20,
            peak_rss_bytes: Some(50 << 20),
            phys_footprint_bytes: Some(30 << 20),
            total_cpu_time_ns: 2_000_000_000,
            thread_count: 2,
            total_interrupt_wakeups: Some(900),
            total_platform_idle_wakeups: Some(120),
        }
    );
    // Each listed port was released once, in listing order.
    assert_eq!(b.sys.released, vec![0x103, 0x207]);
}

#[test]
fn phys_footprint_only_from_revision_1_replies() {
    let mut b = backend(FakeSys::new(PID));
    b.sys.vm_count = TASK_VM_INFO_REV0_COUNT;
    let (_, p) = sample(&mut b, false);
    assert_eq!(p.phys_footprint_bytes, None, "rev0 reply has no footprint");
    assert_eq!(p.rss_bytes, 40 << 20, "resident sizes are in rev0");
    assert_eq!(p.peak_rss_bytes, Some(50 << 20));
    for count in [TASK_VM_INFO_REV1_COUNT, 42, 84, TASK_VM_INFO_REV7_COUNT] {
        b.sys.vm_count = count;
        let (_, p) = sample(&mut b, false);
        assert_eq!(p.phys_footprint_bytes, Some(30 << 20), "count {count}");
    }
    b.sys.vm_count = TASK_VM_INFO_REV1_COUNT - 1;
    let (_, p) = sample(&mut b, false);
    assert_eq!(
        p.phys_footprint_bytes, None,
        "a partial footprint is not trusted"
    );
    assert_ports_balanced(&b.sys);
}

#[test]
fn short_or_failed_task_replies_are_errors_and_leak_nothing() {
    let mut b = backend(FakeSys::new(PID));
    b.sys.spawn(0x300, 7, "pool");
    b.sys.vm_count = TASK_VM_INFO_REV0_COUNT - 1;
    let err = try_sample(&mut b, false).unwrap_err();
    assert!(err.to_string().contains("TASK_VM_INFO"), "{err}");
    assert!(err.to_string().contains("35 words"), "{err}");
    assert_ports_balanced(&b.sys);

    b.sys.vm_count = TASK_VM_INFO_REV7_COUNT;
    b.sys.power_count = TASK_POWER_INFO_COUNT - 2;
    let err = try_sample(&mut b, false).unwrap_err();
    assert!(err.to_string().contains("TASK_POWER_INFO"), "{err}");
    assert_ports_balanced(&b.sys);

    b.sys.power_count = TASK_POWER_INFO_COUNT;
    b.sys.power_kr = Some(KERN_FAILURE);
    let err = try_sample(&mut b, false).unwrap_err();
    assert!(
        matches!(&err, Error::Unreadable { path, .. } if path == "task_info(TASK_POWER_INFO)"),
        "{err}"
    );
    assert!(err.to_string().contains("KERN_FAILURE"), "{err}");
    assert_ports_balanced(&b.sys);

    b.sys.power_kr = None;
    b.sys.vm_kr = Some(KERN_INVALID_ARGUMENT);
    assert!(try_sample(&mut b, false).is_err());
    assert_ports_balanced(&b.sys);

    // Recovered: sampling works again with the same identities.
    b.sys.vm_kr = None;
    let (threads, _) = sample(&mut b, false);
    assert_eq!(threads.len(), 2);
    assert_ports_balanced(&b.sys);
}

#[test]
fn task_threads_failure_is_an_error_without_side_effects() {
    let mut b = backend(FakeSys::new(PID));
    let (first, _) = sample(&mut b, false);
    b.sys.task_threads_kr = Some(KERN_FAILURE);
    let err = try_sample(&mut b, false).unwrap_err();
    assert!(err.to_string().contains("task_threads"), "{err}");
    assert_ports_balanced(&b.sys);
    assert_eq!(b.tracked_len(), 1, "identities survive a failed listing");
    b.sys.task_threads_kr = None;
    let (again, _) = sample(&mut b, false);
    assert_eq!(again[0].ident.serial, first[0].ident.serial);
}

#[test]
fn threads_exiting_mid_sample_are_skipped_without_error() {
    let mut b = backend(FakeSys::new(PID));
    for (port, id) in [(0x400, 1), (0x401, 2), (0x402, 3), (0x403, 4), (0x404, 5)] {
        b.sys.spawn(port, id, "w");
    }
    b.sys.thread(0x400).exited = true; // listed, then gone: every info call fails
    b.sys.thread(0x401).basic_count = THREAD_BASIC_INFO_COUNT - 1; // short reply
    b.sys.thread(0x402).identifier_count = 2; // short reply
    b.sys.thread(0x403).name_fails = true; // only the name is missing: still sampled
    let (threads, p) = sample(&mut b, false);
    let mut tids: Vec<u64> = threads.iter().map(|t| t.ident.tid).collect();
    tids.sort_unstable();
    assert_eq!(tids, vec![4, 5, 1000]);
    assert_eq!(&*by_tid(&threads, 4).ident.name, "");
    assert_eq!(p.thread_count, 3);
    // Ports of skipped threads are released too.
    assert_eq!(b.sys.released.len(), 6);
    assert_ports_balanced(&b.sys);
    assert_eq!(b.tracked_len(), 3, "skipped threads are not tracked");
}

#[test]
fn identity_follows_thread_id_not_port_name() {
    let mut b = backend(FakeSys::new(PID));
    b.sys.spawn(0x500, 77, "old");
    b.sys.thread(0x500).times.user_time = tv(9, 0);
    let (before, _) = sample(&mut b, false);
    let old_serial = by_tid(&before, 77).ident.serial;

    // The thread exits; a new thread gets the same port name.
    b.sys.exit(0x500);
    b.sys.spawn(0x500, 78, "new");
    b.sys.thread(0x500).times.user_time = tv(0, 10);
    let (after, _) = sample(&mut b, false);
    assert!(after.iter().all(|t| t.ident.tid != 77));
    let new = by_tid(&after, 78);
    assert_ne!(
        new.ident.serial, old_serial,
        "never merged with the old thread"
    );
    assert_eq!(&*new.ident.name, "new");
    assert_eq!(new.total_cpu_time_ns, 10_000);
    assert_eq!(b.tracked_len(), 2, "the exited thread is forgotten");

    // The same thread under another port name keeps its serial.
    let main_serial = by_tid(&after, 1000).ident.serial;
    let main = b.sys.thread(0x103).clone();
    b.sys.exit(0x103);
    b.sys.threads.push((0x999, main));
    let (moved, _) = sample(&mut b, false);
    assert_eq!(by_tid(&moved, 1000).ident.serial, main_serial);
    assert_ports_balanced(&b.sys);
}

#[test]
fn names_are_read_when_first_seen_and_on_split_samples() {
    let mut b = backend(FakeSys::new(PID));
    b.sys.spawn(0x600, 10, "before");
    let (a, _) = sample(&mut b, false);
    assert_eq!(b.sys.info_calls[2], 2, "both new threads' names read");
    // No split: no name calls, names unchanged even after a rename.
    b.sys.thread(0x600).name = b"after".to_vec();
    let (c, _) = sample(&mut b, false);
    assert_eq!(b.sys.info_calls[2], 2);
    assert_eq!(&*by_tid(&c, 10).ident.name, "before");
    // A split sample picks the rename up; the serial stays.
    let (d, _) = sample(&mut b, true);
    assert_eq!(b.sys.info_calls[2], 4);
    let (a, d) = (&by_tid(&a, 10).ident, &by_tid(&d, 10).ident);
    assert_eq!(a.serial, d.serial);
    assert_eq!((&*a.name, &*d.name), ("before", "after"));
    // Unchanged names keep the same identity record (no reallocation).
    let main_before = by_tid(&c, 1000).ident.clone();
    let (e, _) = sample(&mut b, true);
    assert!(Arc::ptr_eq(&main_before, &by_tid(&e, 1000).ident));
    // A failing or short name read keeps the last name.
    b.sys.thread(0x600).extended_count = THREAD_EXTENDED_INFO_COUNT - 1;
    b.sys.thread(0x600).name = b"ignored".to_vec();
    let (f, _) = sample(&mut b, true);
    assert_eq!(&*by_tid(&f, 10).ident.name, "after");
    assert_ports_balanced(&b.sys);
}

#[test]
fn a_thread_listed_twice_is_sampled_once() {
    let mut b = backend(FakeSys::new(PID));
    let main = b.sys.thread(0x103).clone();
    b.sys.threads.push((0x104, main));
    let (threads, p) = sample(&mut b, false);
    assert_eq!(threads.len(), 1);
    assert_eq!(p.thread_count, 1);
    assert_ports_balanced(&b.sys);
}

#[test]
fn other_processes_are_unsupported() {
    let err = DarwinBackend::new(FakeSys::new(PID), Target::Pid(PID + 1))
        .err()
        .expect("another pid is refused");
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("task_for_pid"), "{err}");
    // The own PID is the calling task.
    let mut b = DarwinBackend::new(FakeSys::new(PID), Target::Pid(PID)).expect("own pid");
    assert_eq!(sample(&mut b, false).1.pid, PID);
}

#[test]
fn deltas_of_two_samples_give_rates() {
    let mut b = backend(FakeSys::new(PID));
    b.sys.power = PowerInfo {
        total_user: 24_000_000, // 1 s
        total_system: 0,
        task_interrupt_wakeups: 1_000,
        task_platform_idle_wakeups: 100,
    };
    b.sys.thread(0x103).times.user_time = tv(1, 0);
    let snapshot = |b: &mut DarwinBackend<FakeSys>, seq: u64, at_ns: u64| {
        let (threads, process) = sample(b, false);
        Snapshot {
            seq,
            monotonic_ns: at_ns,
            unix_time_ns: at_ns,
            process,
            threads: threads.iter().map(ThreadRow::to_sample).collect(),
            switch_split_read: false,
            sampler_cost_ns: 0,
            total_sampler_cpu_time_ns: 0,
            loops: Vec::new(),
            sleeps: Vec::new(),
            kernel: None,
            warnings: Vec::new(),
        }
    };
    let from = snapshot(&mut b, 0, 1_000_000_000);
    // Two seconds later: 300 more interrupt wakeups (150/s, the iOS limit),
    // 20 more idle wakeups, 0.5 s more process CPU, 0.25 s more on main.
    b.sys.power.task_interrupt_wakeups += 300;
    b.sys.power.task_platform_idle_wakeups += 20;
    b.sys.power.total_system += 12_000_000;
    b.sys.thread(0x103).times.system_time = tv(0, 250_000);
    let to = snapshot(&mut b, 1, 3_000_000_000);
    let i = Interval::between(&from, &to);
    assert_eq!(i.process.interrupt_wakeups_per_sec, Some(150.0));
    assert_eq!(i.process.platform_idle_wakeups_per_sec, Some(10.0));
    assert_eq!(i.process.cpu_time_ns, 500_000_000);
    assert_eq!(i.process.cpu_percent, 25.0);
    let main = &i.threads[0];
    assert!(!main.started_in_interval);
    assert_eq!(main.cpu_time_ns, 250_000_000);
    assert_eq!(main.cpu_percent, 12.5);
    assert_eq!(main.switches_per_sec, None);
    assert_eq!(main.run_queue_wait_percent, None);
    assert_eq!(to.threads[0].total_voluntary_switches, None);
}

#[test]
fn steady_sampling_releases_every_port_every_time() {
    let mut b = backend(FakeSys::new(PID));
    for n in 0..20u32 {
        // Churn: a thread starts every round and the one from two rounds ago exits.
        b.sys.spawn(0x1000 + n, 100 + u64::from(n), "churn");
        if n >= 2 {
            b.sys.exit(0x1000 + n - 2);
        }
        if n % 3 == 0 {
            b.sys.thread(0x1000 + n).exited = true;
        }
        sample(&mut b, n % 2 == 0);
        assert_ports_balanced(&b.sys);
        assert!(b.tracked_len() <= 3);
    }
}
