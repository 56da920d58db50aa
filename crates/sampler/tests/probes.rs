//! LoopProbe and SleepProbe counters against known call counts and an
//! independent clock.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use common::workloads::{pipe, poll_in};
use wakemeter::Sampler;

mod common;

#[test]
fn loop_counters_are_exact_and_poll_delay_matches_the_waits() {
    let sampler = Sampler::new().unwrap();
    let (r, w) = pipe();
    let mut idle = sampler.loop_probe("idle-1ms").unwrap();
    let mut independent_wait = Duration::ZERO;
    for _ in 0..100 {
        let t0 = Instant::now();
        idle.before_wait(Some(Duration::from_millis(1)));
        let n = poll_in(r, 1);
        idle.after_wait(n);
        independent_wait += t0.elapsed();
    }
    let s = idle.stats();
    assert_eq!(s.total_wakeups, 100);
    assert_eq!(s.total_idle_wakeups, 100);
    assert_eq!(
        s.total_timed_out_wakeups, 100,
        "poll never returns before its timeout"
    );
    assert_eq!(s.total_early_wakeups, 0);
    assert!(s.total_wait_ns >= 100_000_000);
    // Nested inside the independent measurement, and delay = wait - timeout exactly.
    assert!(s.total_wait_ns <= independent_wait.as_nanos() as u64);
    assert_eq!(s.total_poll_delay_ns, s.total_wait_ns - 100 * 1_000_000);
    assert_eq!(s.poll_delay_histogram.count(), 100);

    let mut mixed = sampler.loop_probe("mixed").unwrap();
    for i in 0..50 {
        // SAFETY: writing one byte from a valid buffer to our pipe.
        assert_eq!(unsafe { libc::write(w, b"x".as_ptr().cast(), 1) }, 1);
        let g = mixed.wait(Some(Duration::from_millis(100)));
        let n = poll_in(r, 100);
        g.done(n);
        let mut b = [0u8; 1];
        // SAFETY: reading one byte into a valid buffer.
        let got = unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) };
        assert_eq!(got, 1, "iteration {i}");
    }
    for _ in 0..20 {
        mixed.before_wait(Some(Duration::ZERO));
        let n = poll_in(r, 0);
        mixed.after_wait(n);
    }
    let m = mixed.stats();
    assert_eq!(m.total_wakeups, 70);
    assert_eq!(m.total_events, 50);
    assert_eq!(m.total_early_wakeups, 50);
    assert_eq!(m.total_zero_timeout_waits, 20);
    assert_eq!(m.total_idle_wakeups, 20);
    assert_eq!(m.total_timed_out_wakeups, 20);
    assert!(m.total_busy_ns > 0);

    // The sampler publishes both probes, and an interval gives the rates.
    let a = sampler.sample_now().unwrap();
    assert_eq!(a.loops.len(), 2);
    assert_eq!(a.loops[0].total_wakeups, 100);
    let tid = a.loops[0].tid.unwrap();
    assert!(
        a.thread_by_tid(tid).is_some(),
        "the loop's thread is in the snapshot"
    );
    for _ in 0..10 {
        idle.before_wait(Some(Duration::from_millis(1)));
        let n = poll_in(r, 1);
        idle.after_wait(n);
    }
    let b = sampler.sample_now().unwrap();
    let i = wakemeter::Interval::between(&a, &b);
    let l = i.loops.iter().find(|l| l.name == "idle-1ms").unwrap();
    assert_eq!(l.wakeups, 10);
    assert_eq!(l.idle_wakeup_ratio, 1.0);
    assert!(l.mean_poll_delay_ns > 0);
    assert!(l.utilization >= 0.0 && l.utilization < 1.0);
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}

#[test]
fn sleep_probe_matches_an_independent_clock() {
    let sampler = Sampler::new().unwrap();
    let mut p = sampler.sleep_probe("poll-2ms").unwrap();
    let t0 = Instant::now();
    for _ in 0..50 {
        p.sleep(Duration::from_millis(2));
    }
    let wall = t0.elapsed().as_nanos() as u64;
    let s = p.stats();
    assert_eq!(s.total_calls, 50);
    assert_eq!(s.total_requested_ns, 100_000_000);
    assert!(
        s.total_actual_ns >= 100_000_000,
        "sleep never returns early"
    );
    assert!(s.total_actual_ns <= wall);
    assert_eq!(
        s.total_oversleep_ns,
        s.total_actual_ns - s.total_requested_ns
    );
    assert_eq!(s.oversleep_histogram.count(), 50);
    assert!(s.total_cpu_ns > 0, "entering and leaving a sleep costs CPU");
    assert!(s.total_cpu_ns < s.total_actual_ns);
    // Begin/end around a foreign sleep.
    p.begin(Duration::from_micros(500));
    // SAFETY: usleep has no memory-safety preconditions.
    unsafe { libc::usleep(500) };
    p.end();
    assert_eq!(p.stats().total_calls, 51);
    let snap = sampler.sample_now().unwrap();
    assert_eq!(snap.sleeps[0].total_calls, 51);
}

#[test]
fn sleep_cpu_measured_every_nth_call_keeps_the_other_counters_exact() {
    let sampler = Sampler::new().unwrap();
    let mut p = sampler.sleep_probe("poll-every-4").unwrap();
    p.set_cpu_every(std::num::NonZeroU32::new(4).unwrap());
    let cpu0 = thread_cpu_ns();
    for _ in 0..40 {
        p.sleep(Duration::from_millis(1));
    }
    let cpu = thread_cpu_ns() - cpu0;
    let s = p.stats();
    assert_eq!(s.total_calls, 40);
    assert_eq!(s.total_requested_ns, 40_000_000);
    assert_eq!(s.oversleep_histogram.count(), 40);
    assert_eq!(
        s.total_oversleep_ns,
        s.total_actual_ns - s.total_requested_ns
    );
    // 10 measured sleeps, each counted 4 times: an estimate of the CPU
    // inside the sleeps, which the thread's whole CPU bounds (with slack
    // for sleeps that cost more than their neighbours).
    assert!(s.total_cpu_ns > 0);
    assert!(s.total_cpu_ns < 4 * cpu, "{} vs {cpu}", s.total_cpu_ns);
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn bad_use_is_defined_and_never_panics() {
    let sampler = Sampler::new().unwrap();
    let mut p = sampler.loop_probe("odd").unwrap();
    p.after_wait(3); // no before_wait
    p.before_wait(None);
    p.before_wait(Some(Duration::MAX)); // the first wait is dropped
    p.after_wait(usize::MAX);
    p.before_wait(Some(Duration::MAX));
    p.after_wait(usize::MAX); // events saturate
    {
        let _g = p.wait(Some(Duration::from_millis(5))); // dropped: 0 events
    }
    let s = p.stats();
    assert_eq!(s.total_unmatched_calls, 2);
    assert_eq!(s.total_wakeups, 3);
    assert_eq!(s.total_events, u64::MAX);
    assert_eq!(s.total_timed_out_wakeups, 0, "Duration::MAX never elapses");
    assert_eq!(s.total_early_wakeups, 3);
    // A wait that never ends shows as the current wait.
    p.before_wait(None);
    std::thread::sleep(Duration::from_millis(5));
    assert!(sampler.sample_now().unwrap().loops[0].current_wait_ns >= 5_000_000);

    let mut sp = sampler.sleep_probe("odd-sleep").unwrap();
    sp.end();
    sp.sleep(Duration::ZERO);
    assert_eq!(sp.stats().total_unmatched_calls, 1);
    assert_eq!(sp.stats().total_calls, 1);

    // A probe outlives its sampler and keeps working.
    drop(sampler);
    p.after_wait(1);
    assert_eq!(p.stats().total_wakeups, 4);
}

#[test]
fn dropped_probes_are_reported_once_more_then_forgotten() {
    let sampler = Sampler::new().unwrap();
    let mut p = sampler.loop_probe("short-lived").unwrap();
    p.before_wait(None);
    p.after_wait(1);
    drop(p);
    assert_eq!(
        sampler.sample_now().unwrap().loops.len(),
        1,
        "final counters reported"
    );
    assert!(sampler.sample_now().unwrap().loops.is_empty());
}

#[test]
fn probe_count_is_bounded() {
    let sampler = Sampler::new().unwrap();
    let probes: Vec<_> = (0..wakemeter::probe::MAX_PROBES)
        .map(|i| sampler.loop_probe(&format!("p{i}")).unwrap())
        .collect();
    let err = sampler.loop_probe("one-too-many").unwrap_err();
    assert!(
        matches!(err, wakemeter::Error::TooManyProbes { max } if max == wakemeter::probe::MAX_PROBES),
        "{err}"
    );
    drop(probes);
    sampler.sample_now().unwrap();
    assert!(sampler.loop_probe("fits-again").is_ok());
}

#[test]
fn a_freed_probe_slot_is_reusable_at_once() {
    // A host that makes a probe per request and never samples in between:
    // 4,096 create+free pairs, then more, with no sample at all.
    let sampler = Sampler::new().unwrap();
    for i in 0..wakemeter::probe::MAX_PROBES + 10 {
        let mut p = sampler.loop_probe(&format!("req{i}")).unwrap();
        p.before_wait(None);
        p.after_wait(1);
        drop(p);
        drop(sampler.sleep_probe(&format!("s{i}")).unwrap());
    }
    let live = sampler
        .loop_probe("after")
        .expect("a slot after 4,096 frees");
    // The next snapshot reports the dropped probes' final counters (the
    // 4,096 moved out when the list was full, and the 10 dropped since)
    // and the live one, then only the live one.
    let loops = sampler.sample_now().unwrap().loops;
    assert_eq!(loops.len(), wakemeter::probe::MAX_PROBES + 10 + 1);
    assert!(loops.windows(2).all(|w| w[0].id < w[1].id), "sorted by id");
    assert!(
        loops
            .iter()
            .filter(|l| l.name != "after")
            .all(|l| l.total_wakeups == 1)
    );
    assert_eq!(loops.last().unwrap().name, "after");
    let loops = sampler.sample_now().unwrap().loops;
    assert_eq!(loops.len(), 1);
    drop(live);
    // Live probes still count: 4,096 alive leave no room.
    let held: Vec<_> = (0..wakemeter::probe::MAX_PROBES)
        .map(|i| sampler.sleep_probe(&format!("held{i}")).unwrap())
        .collect();
    assert!(sampler.sleep_probe("one-too-many").is_err());
    drop(held);
    assert!(sampler.sleep_probe("fits-again").is_ok());
}
