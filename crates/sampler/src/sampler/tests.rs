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
