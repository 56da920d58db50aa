//! tokio integration: workers as loops, checked against tokio's own metrics.
#![cfg(all(feature = "tokio", target_os = "linux"))]

use std::time::Duration;

use wakemeter::runtime::{instrument, runtime_stats, watch};
use wakemeter::{FindingKind, SamplerBuilder};

#[test]
fn workers_are_loops_and_agree_with_tokio_park_counts() {
    let sampler = SamplerBuilder::new().build().unwrap();
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2).enable_time();
    let rt = instrument(&mut b, &sampler, "tokio-worker")
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..50 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    // Let the workers park, then compare with tokio's own counters.
    std::thread::sleep(Duration::from_millis(50));
    let stats = runtime_stats(rt.handle());
    let snap = sampler.sample_now().unwrap();
    let workers: Vec<_> = snap
        .loops
        .iter()
        .filter(|l| l.name == "tokio-worker")
        .collect();
    assert_eq!(stats.workers, 2);
    assert!(
        !workers.is_empty() && workers.len() <= 2,
        "{:?}",
        snap.loops
    );
    // tokio's park/unpark counter rises at each park and each unpark (odd:
    // parked), so half of it is the number of unparks. tokio may wake a
    // worker and park it again without running the unpark hook (nothing to
    // do), so hook-counted wakeups are at most tokio's unparks.
    let unparks: u64 = stats.worker_park_unparks.iter().map(|c| c / 2).sum();
    let wakeups: u64 = workers.iter().map(|l| l.total_wakeups).sum();
    assert!(
        wakeups <= unparks,
        "probe wakeups {wakeups} vs tokio unparks {unparks}"
    );
    assert!(wakeups > 10);
    assert!(
        workers
            .iter()
            .all(|l| l.total_wait_ns > 0 && l.tid.is_some())
    );
    drop(rt);
}

#[test]
fn watch_streams_reports() {
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut reports = watch(&sampler);
        let first = reports.next().await.unwrap();
        let second = reports.next().await.unwrap();
        assert!(second.stats.total_samples > first.stats.total_samples);
        assert!(second.interval.is_some());
        assert!(
            !second
                .findings
                .iter()
                .any(|f| f.kind == FindingKind::BusyPoller)
        );
        // watch started background sampling; dropping the stream stops it.
        assert!(sampler.is_running());
        drop(reports);
    });
    drop(rt);
    assert!(
        !sampler.is_running(),
        "the stream's sampling stopped with it"
    );
}
