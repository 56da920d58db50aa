//! tokio integration: workers as loops, checked against tokio's own metrics.
#![cfg(all(feature = "tokio", target_os = "linux"))]

use std::time::Duration;

use wakemeter::runtime::{RuntimeStats, instrument, runtime_stats, watch};
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

/// A 1 ms `tokio::time::interval` in a task wakes an instrumented worker
/// about 1000 times/s: the worker thread gets a periodic-wakeups finding
/// whose rate is its wakes (the loop probe cannot tell timer wakes from
/// others, the thread's switches can). The worker's probe is a tokio
/// worker's (`LoopKind::TokioWorker`), so the finding names the runtime's
/// timer and its advice is tokio's (not "woken by a timer, another thread
/// or I/O" with the OS's timer-slack advice), and its parks, as tokio's
/// hooks counted them, agree with the thread's wakes.
#[test]
fn timer_driven_worker_wakeups_are_periodic() {
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(100))
        .with_switch_split_every(1)
        .with_thresholds(
            wakemeter::Thresholds::default()
                .with_window(Duration::from_secs(2))
                .with_min_window(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2).enable_time();
    let rt = instrument(&mut b, &sampler, "tokio-worker")
        .build()
        .unwrap();
    let _sampling = sampler.start().unwrap();
    let found = rt.block_on(async {
        let s = sampler.clone();
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_millis(1));
            let start = tokio::time::Instant::now();
            // Until the finding appears, at most 30 s (a noisy machine).
            loop {
                for _ in 0..200 {
                    iv.tick().await;
                }
                // Other tests in this binary run their own runtimes in the
                // same process: only a finding on this runtime's workers
                // (the loops this sampler's probes know) ends the wait.
                let workers = worker_tids(&s);
                let f: Vec<_> = s
                    .findings()
                    .into_iter()
                    .filter(|f| f.kind == FindingKind::PeriodicWakeups)
                    .collect();
                let ours = f
                    .iter()
                    .any(|f| f.subject.tids().iter().any(|t| workers.contains(t)));
                if ours || start.elapsed() > Duration::from_secs(30) {
                    break f;
                }
            }
        })
        .await
        .unwrap()
    });
    let workers = worker_tids(&sampler);
    let f = found
        .iter()
        .find(|f| f.subject.tids().iter().any(|t| workers.contains(t)))
        .unwrap_or_else(|| panic!("no periodic finding on a worker {workers:?}: {found:#?}"));
    let rate = f.evidence("wakeups_per_sec").unwrap();
    assert!(
        (200.0..=3000.0).contains(&rate),
        "{rate} wakes/s: {}",
        f.summary
    );
    assert!(
        f.summary.contains("tokio worker")
            && f.summary
                .contains("the tokio runtime's timer (a tokio::time::interval or sleep"),
        "{}",
        f.summary
    );
    assert!(f.advice.contains("MissedTickBehavior"), "{}", f.advice);
    eprintln!("{}\n{}\n{:?}", f.summary, f.advice, f.evidence);
    // Every wake of the worker ends one of its parks: tokio's unparks
    // (the probe's count) are its wakes (voluntary switches), within what
    // other blocking (a lock) adds to the wakes, or a park that found its
    // token set and returned without blocking adds to the parks.
    let parks = f.evidence("parks_ended_per_sec").unwrap();
    assert!(
        parks >= 0.5 * rate && parks <= 1.5 * rate,
        "{parks} parks ended/s against {rate} wakes/s: {}",
        f.summary
    );
    let snap = sampler.latest().unwrap();
    assert!(
        snap.loops
            .iter()
            .all(|l| l.kind == wakemeter::LoopKind::TokioWorker),
        "{:?}",
        snap.loops
    );
    drop(rt);
}

/// The thread ids of the loops `sampler`'s probes know (its runtime's
/// workers), from its latest snapshot.
fn worker_tids(sampler: &wakemeter::Sampler) -> Vec<u64> {
    sampler
        .latest()
        .map(|s| s.loops.iter().filter_map(|l| l.tid).collect())
        .unwrap_or_default()
}

/// `instrument_with` runs the application's hooks and wakemeter's: both
/// count the same parks.
#[test]
fn the_applications_hooks_are_chained_not_replaced() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use wakemeter::runtime::{WorkerHooks, instrument_with};

    let sampler = SamplerBuilder::new().build().unwrap();
    let parks = Arc::new(AtomicU64::new(0));
    let unparks = Arc::new(AtomicU64::new(0));
    let stops = Arc::new(AtomicU64::new(0));
    let hooks = {
        let (p, u, s) = (parks.clone(), unparks.clone(), stops.clone());
        WorkerHooks::new()
            .with_on_park(move || {
                p.fetch_add(1, Ordering::Relaxed);
            })
            .with_on_unpark(move || {
                u.fetch_add(1, Ordering::Relaxed);
            })
            .with_on_stop(move || {
                s.fetch_add(1, Ordering::Relaxed);
            })
    };
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2).enable_time();
    let rt = instrument_with(&mut b, &sampler, "tokio-worker", hooks)
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::spawn(async {
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .unwrap();
    });
    std::thread::sleep(Duration::from_millis(50));
    let snap = sampler.sample_now().unwrap();
    let probe_wakeups: u64 = snap
        .loops
        .iter()
        .filter(|l| l.name == "tokio-worker")
        .map(|l| l.total_wakeups)
        .sum();
    let app_unparks = unparks.load(Ordering::Relaxed);
    assert!(parks.load(Ordering::Relaxed) > 10);
    assert!(app_unparks > 10);
    // Each unpark ran both hooks.
    assert_eq!(probe_wakeups, app_unparks);
    drop(rt);
    assert!(
        stops.load(Ordering::Relaxed) >= 2,
        "every worker's stop hook ran"
    );
}

/// A runtime of two workers running `task` (and an `interval(1 ms)` task
/// beside it) until `done` says so at a new snapshot, at most 3 minutes:
/// the findings then, and tokio's own counters over the same time.
fn run_tokio(
    spin: bool,
    mut done: impl FnMut(&[wakemeter::Finding]) -> bool,
) -> (Vec<wakemeter::Finding>, RuntimeStats, RuntimeStats, f64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    // One at a time: each samples the whole test process, and the other's
    // spinning worker would be in it.
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(100))
        .with_switch_split_every(1)
        .with_thresholds(
            wakemeter::Thresholds::default()
                .with_window(Duration::from_secs(2))
                .with_min_window(Duration::from_secs(1)),
        )
        .build()
        .expect("sampler");
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2).enable_time();
    let rt = instrument(&mut b, &sampler, "tokio-worker")
        .build()
        .expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    if spin {
        let s = stop.clone();
        rt.spawn(async move {
            while !s.load(Ordering::Relaxed) {
                tokio::task::yield_now().await;
            }
        });
    }
    let s = stop.clone();
    rt.spawn(async move {
        let mut iv = tokio::time::interval(Duration::from_millis(1));
        while !s.load(Ordering::Relaxed) {
            iv.tick().await;
        }
    });
    let before = runtime_stats(rt.handle());
    let start = std::time::Instant::now();
    let guard = sampler.start().expect("start");
    let mut seq = None;
    let mut samples = 0;
    let found = loop {
        match sampler.wait_for_sample(seq, Duration::from_secs(60)) {
            wakemeter::SampleWait::Stored { seq: n } => seq = Some(n),
            other => panic!("no snapshot: {other:?}"),
        }
        samples += 1;
        let f = sampler.findings();
        if (samples >= 30 && done(&f)) || start.elapsed() > Duration::from_secs(180) {
            break f;
        }
    };
    let after = runtime_stats(rt.handle());
    let secs = start.elapsed().as_secs_f64();
    drop(guard);
    stop.store(true, Ordering::Relaxed);
    drop(rt);
    (found, before, after, secs)
}

/// A task looping on `yield_now` beside an `interval(1 ms)`: one worker
/// never parks and the other is unparked thousands of times a second (the
/// issue measured 9k-23k futex wakes/s, named only as run-queue
/// contention). The finding names the worker that never waits and the
/// pattern; tokio's own counters agree: a worker whose park count did not
/// move, and the other's unparks at least the probe's wakeups.
#[test]
fn a_worker_spinning_on_yield_now_is_named() {
    let spinner = |f: &[wakemeter::Finding]| {
        f.iter()
            .find(|x| x.kind == FindingKind::BusyPoller && x.summary.contains("never waits"))
            .cloned()
    };
    let (f, before, after, secs) = run_tokio(true, |f| spinner(f).is_some());
    let s = spinner(&f).unwrap_or_else(|| panic!("no spinning worker: {f:#?}"));
    assert!(s.summary.contains("yield_now"), "{}", s.summary);
    assert!(s.advice.contains("yield_now"), "{}", s.advice);
    let parks: Vec<u64> = (0..2)
        .map(|w| after.worker_parks[w] - before.worker_parks[w])
        .collect();
    assert!(parks.iter().any(|&p| p <= 1), "tokio parks {parks:?}");
    let woken = s.evidence("sibling_wakeups_per_sec").unwrap();
    let unparks_per_sec = (0..2)
        .map(|w| (after.worker_park_unparks[w] - before.worker_park_unparks[w]) as f64 / 2.0 / secs)
        .fold(0.0, f64::max);
    assert!(woken >= 1000.0, "{s:#?}");
    // The probe counts unparks that ran the hook: at most tokio's (its
    // window is the last 2 s, tokio's the whole run: a little slack).
    assert!(
        woken <= unparks_per_sec * 1.25,
        "probe {woken}/s vs tokio {unparks_per_sec}/s"
    );
}

/// The timer alone: no spinning worker, no busy poller.
#[test]
fn a_timer_alone_is_not_a_spinning_worker() {
    let (f, ..) = run_tokio(false, |_| true);
    assert!(
        f.iter().all(|x| x.kind != FindingKind::BusyPoller),
        "{f:#?}"
    );
}
