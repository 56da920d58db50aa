//! Tests of the loader's logic that need no kernel.

use super::*;

#[test]
fn record_conversion_adds_span_in_progress() {
    let mut raw = WmThread::ZERO;
    raw.comm[..4].copy_from_slice(b"loop");
    raw.on_cpu_ns = 100;
    raw.voluntary = 3;
    raw.involuntary = 1;
    raw.off_ns[abi::OFF_SLEEP] = 1000;
    raw.off_ns[abi::OFF_POLL] = 7;
    raw.off_cause = abi::OFF_SLEEP as u64;
    raw.off_since_ns = 5_000;
    raw.off_hist[11] = 2;
    raw.poll_timeout_hist[20] = 4;
    raw.poll_calls = 4;
    let t = thread_stats(42, &raw, 5_500, 8);
    assert_eq!(t.tid, 42);
    assert_eq!(t.name, "loop");
    assert_eq!(t.total_on_cpu_ns, 100);
    assert_eq!(t.total_off_cpu.sleep_ns, 1500);
    assert_eq!(t.total_off_cpu.poll_ns, 7);
    assert_eq!(t.total_off_cpu.total_ns(), 1507);
    assert_eq!(t.off_cpu_histogram.buckets.len(), 12);
    assert_eq!(t.off_cpu_histogram.count(), 2);
    assert_eq!(t.poll.timeout_histogram.buckets[20], 4);
    assert_eq!(
        (t.total_voluntary_switches, t.total_involuntary_switches),
        (3, 1)
    );

    raw.off_since_ns = 0;
    raw.on_since_ns = 5_000;
    let t = thread_stats(42, &raw, 6_000, 8);
    assert_eq!(t.total_on_cpu_ns, 1100);
    assert_eq!(t.total_off_cpu.sleep_ns, 1000);
}

#[test]
fn an_unchanged_entry_advanced_is_the_entry_converted_again() {
    let mut raw = WmThread::ZERO;
    raw.comm[..6].copy_from_slice(b"parked");
    raw.on_cpu_ns = 900;
    raw.off_ns[abi::OFF_LOCK] = 4_000;
    raw.off_ns[abi::OFF_IO] = 30;
    raw.off_hist[3] = 1;
    raw.wakes_by[abi::WAKE_TARGET] = 2;
    raw.waker_tid[0] = 8;
    raw.waker_count[0] = 2;
    // Off CPU for each cause in turn, on CPU, and no span at all (with a
    // cause the conversion does not know); a span begun after the first
    // read's clock, as one begun during its walk.
    let spans = [
        (0, 2_000, abi::OFF_LOCK as u64),
        (0, 2_000, abi::OFF_PREEMPTED as u64),
        (0, 2_000, abi::OFF_OTHER as u64),
        (1_500, 0, 0),
        (0, 0, 99),
        (0, 12_000, abi::OFF_SLEEP as u64),
    ];
    for (on, off, cause) in spans {
        raw.on_since_ns = on;
        raw.off_since_ns = off;
        raw.off_cause = cause;
        let span = Kept::new(&raw, &[], 1).span;
        for (then, now) in [(10_000, 10_000), (10_000, 25_000), (11_000, 1_000_000)] {
            let mut advanced = thread_stats(5, &raw, then, 8);
            convert::advance(&mut advanced, span, then, now);
            assert_eq!(
                advanced,
                thread_stats(5, &raw, now, 8),
                "{on} {off} {cause} {then} {now}"
            );
        }
    }
}

#[test]
fn wakers_most_first_from_occupied_slots() {
    let mut raw = WmThread::ZERO;
    for (slot, tid, count, comm) in [
        (0, 7, 5, &b"seven"[..]),
        (3, 0, 9, &b"[interrupt]"[..]),
        (5, 9, 5, &b"nine"[..]),
        (6, 11, 0, &b"free"[..]),
    ] {
        raw.waker_tid[slot] = tid;
        raw.waker_count[slot] = count;
        raw.waker_comm[slot][..comm.len()].copy_from_slice(comm);
    }
    assert_eq!(raw.waker_slots_used(), 3);
    let all: Vec<_> = wakers_of(&raw, 16)
        .into_iter()
        .map(|w| (w.tid, w.name, w.total_wakes))
        .collect();
    assert_eq!(
        all,
        [
            (0, "[interrupt]".to_owned(), 9),
            (7, "seven".to_owned(), 5),
            (9, "nine".to_owned(), 5),
        ]
    );
    assert_eq!(wakers_of(&raw, 1).len(), 1);
    assert!(thread_stats(1, &raw, 0, 0).top_wakers.is_empty());
}

#[test]
fn map_sized_from_thread_count() {
    assert_eq!(auto_max_threads(None), DEFAULT_MAX_THREADS);
    assert_eq!(auto_max_threads(Some(3)), DEFAULT_MAX_THREADS);
    assert_eq!(auto_max_threads(Some(3000)), 6000);
    assert_eq!(auto_max_threads(Some(u32::MAX)), MAX_THREADS_LIMIT);
}

#[test]
fn comm_stops_at_nul() {
    let mut c = [0u8; abi::COMM_LEN];
    c[..3].copy_from_slice(b"abc");
    assert_eq!(abi::comm_str(&c), "abc");
    assert_eq!(abi::comm_str(&[b'x'; abi::COMM_LEN]), "x".repeat(16));
}

/// What a read keeps of an unchanged entry gives back the entry itself,
/// so converting it again agrees with converting the whole entry: every
/// field, the last word, the comm bytes and a waker slot included.
#[test]
fn kept_entries_convert_as_the_whole_entry() {
    let mut raw = WmThread::ZERO;
    raw.comm[..6].copy_from_slice(b"worker");
    raw.on_since_ns = 0;
    raw.off_since_ns = 9_000;
    raw.off_cause = abi::OFF_LOCK as u64;
    raw.off_ns[abi::OFF_LOCK] = 123;
    raw.voluntary = 7;
    raw.off_hist[abi::BUCKETS - 1] = 1;
    raw.waker_tid[3] = 77;
    raw.waker_count[3] = 5;
    raw.waker_comm[3][..4].copy_from_slice(b"main");
    raw.ready_fd[0] = 9;
    raw.ready_fds = 1;
    raw.read_mark = u64::MAX;
    let fds = [ReadyFd::new(9, FdKind::Pipe)];
    let kept = Kept::new(&raw, &fds, 3);
    assert_eq!(kept.seen, 3);
    let again = kept.raw();
    assert_eq!(format!("{again:?}"), format!("{raw:?}"));
    let mut whole = thread_stats(5, &raw, 10_000, 8);
    whole.ready_fds = fds.to_vec();
    let mut from_kept = thread_stats(5, &again, 10_000, 8);
    from_kept.ready_fds = kept.ready_fds();
    assert_eq!(from_kept, whole);
    assert_eq!(whole.top_wakers.len(), 1);
    // An all-zero entry keeps nothing but comes back whole too.
    let empty = Kept::new(&WmThread::ZERO, &[], 1);
    assert_eq!(
        format!("{:?}", empty.raw()),
        format!("{:?}", WmThread::ZERO)
    );
}
