//! Threads starting and exiting while sampling (its own test binary, so the
//! process-wide descriptor count belongs to this test alone).
#![cfg(target_os = "linux")]

mod common;

use common::*;
use wakemeter::SamplerBuilder;

/// Short-lived threads started (and joined) while sampling.
const CHURNED: usize = 2_000;

#[test]
fn churning_threads_never_error_or_leak_and_survivors_stay_exact() {
    let s = SamplerBuilder::new()
        .with_switch_split_every(1)
        .build()
        .unwrap();
    let (survivor, stop, h) = parked_thread(|| burn_cpu(20_000_000));
    s.sample_now().unwrap();
    let fds_before = open_fds();
    let rss_before = s.sample_now().unwrap().process.rss_bytes;
    let churn = std::thread::spawn(|| {
        for _ in 0..CHURNED {
            std::thread::spawn(|| burn_cpu(200_000)).join().unwrap();
        }
    });
    let mut samples = 0;
    while !churn.is_finished() {
        let snap = s
            .sample_now()
            .expect("sampling never fails while threads churn");
        let t = snap
            .thread_by_tid(survivor)
            .expect("survivor always present");
        assert_eq!(t.total_cpu_time_ns, schedstat("self", survivor).0);
        samples += 1;
    }
    churn.join().unwrap();
    assert!(samples > 3);
    let last = s.sample_now().unwrap();
    let fds_after = open_fds();
    println!(
        "{CHURNED} threads churned over {samples} samples: descriptors {fds_before} -> {fds_after}, \
         RSS {:.1} -> {:.1} MiB, history {} bytes",
        rss_before as f64 / (1 << 20) as f64,
        last.process.rss_bytes as f64 / (1 << 20) as f64,
        s.stats().history_bytes
    );
    assert!(
        fds_after <= fds_before,
        "descriptors leaked: {fds_before} -> {fds_after}"
    );
    drop(stop);
    h.join().unwrap();
}
