//! The one "sample stored" notification every consumer is built on, and the
//! overhead accounting of work done on the sampler's behalf.

#![cfg(unix)]

use std::time::Duration;

use wakemeter::{SampleWait, SamplerBuilder};
use wakemeter_testkit::thread_cpu_ns;

#[test]
fn waiters_wake_on_each_stored_snapshot_in_order() {
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(10))
        .build()
        .expect("sampler");
    // Nothing stored and nothing running: the wait times out.
    assert_eq!(
        sampler.wait_for_sample(None, Duration::from_millis(20)),
        SampleWait::TimedOut
    );
    let _guard = sampler.start().expect("start");
    let mut last = None;
    for _ in 0..5 {
        match sampler.wait_for_sample(last, Duration::from_secs(30)) {
            SampleWait::Stored { seq } => {
                assert!(last.is_none_or(|l| seq > l), "{seq} after {last:?}");
                assert!(sampler.latest().expect("stored").seq >= seq);
                last = Some(seq);
            }
            other => panic!("expected a stored snapshot, got {other:?}"),
        }
    }
    // On-demand samples wake waiters too.
    let seq = sampler.sample().expect("sample");
    assert!(matches!(
        sampler.wait_for_sample(Some(seq - 1), Duration::from_secs(30)),
        SampleWait::Stored { seq: s } if s >= seq
    ));
}

#[test]
fn a_waiter_hears_that_the_run_ended() {
    // A long interval: after the first snapshot nothing new comes for 60 s.
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_secs(60))
        .build()
        .expect("sampler");
    let guard = sampler.start().expect("start");
    let first = match sampler.wait_for_sample(None, Duration::from_secs(30)) {
        SampleWait::Stored { seq } => seq,
        other => panic!("expected the first snapshot, got {other:?}"),
    };
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(guard);
    });
    // Without the notification this would sleep out its 60 s timeout.
    assert_eq!(
        sampler.wait_for_sample(Some(first), Duration::from_secs(60)),
        SampleWait::Stopped
    );
    stopper.join().expect("stopper");
    assert!(!sampler.stats().running);
}

#[test]
fn work_done_for_the_sampler_counts_as_its_overhead() {
    let sampler = SamplerBuilder::new().build().expect("sampler");
    sampler.sample().expect("sample");
    let before = sampler.stats().total_sampler_cpu_time_ns;
    // 20 ms of this thread's CPU, by its own CPU clock.
    let burned = sampler.account(|| {
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < 20_000_000 {
            std::hint::black_box(0u64);
        }
        thread_cpu_ns() - start
    });
    let after = sampler.stats().total_sampler_cpu_time_ns;
    assert!(after - before >= burned, "{before} + {burned} > {after}");
    // Readers count themselves: a report adds its own CPU time.
    let _ = sampler.report();
    assert!(sampler.stats().total_sampler_cpu_time_ns > after);
}
