//! Descriptor limits (its own test binary: it lowers RLIMIT_NOFILE, which is
//! process-wide, so its tests also take turns).
#![cfg(target_os = "linux")]
// Test code: a failed setup is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::File;
use std::sync::{Arc, Barrier, Mutex, MutexGuard};

use wakemeter::{Error, SampleWarning, SamplerBuilder, Snapshot};

/// Serializes the tests of this binary: each lowers the process's limit.
static LIMIT: Mutex<()> = Mutex::new(());

fn limit_lock() -> MutexGuard<'static, ()> {
    LIMIT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the soft RLIMIT_NOFILE; returns the previous one.
fn set_nofile(soft: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer / in-pointer for the duration of each call.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        let old = r.rlim_cur;
        r.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        old
    }
}

/// Restores the limit even when an assertion fails while it is lowered.
struct RestoreLimit(u64);

impl Drop for RestoreLimit {
    fn drop(&mut self) {
        set_nofile(self.0);
    }
}

/// `n` threads parked until the returned barrier is passed by the caller;
/// returns their TIDs.
fn parked_threads(n: usize) -> (Arc<Barrier>, Vec<std::thread::JoinHandle<()>>, Vec<u64>) {
    let stop = Arc::new(Barrier::new(n + 1));
    let (tx, rx) = std::sync::mpsc::channel();
    let handles = (0..n)
        .map(|_| {
            let (stop, tx) = (stop.clone(), tx.clone());
            std::thread::spawn(move || {
                tx.send(common::gettid()).unwrap();
                stop.wait();
            })
        })
        .collect();
    let tids = (0..n).map(|_| rx.recv().unwrap()).collect();
    (stop, handles, tids)
}

fn exhausted(snap: &Snapshot) -> Option<u32> {
    snap.warnings.iter().find_map(|w| match w {
        SampleWarning::DescriptorsExhausted {
            threads_without_descriptors,
        } => Some(*threads_without_descriptors),
        _ => None,
    })
}

/// Opens /dev/null until the process is out of descriptors.
fn fill_table() -> Vec<File> {
    let mut held = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => return held,
            Err(e) => panic!("unexpected open error: {e}"),
        }
    }
}

#[test]
fn the_host_can_still_open_files_while_more_threads_live_than_the_limit_allows() {
    const LIMIT: u64 = 256;
    const THREADS: usize = 200; // two files each: 400 descriptors if all were kept
    const HOST_FILES: usize = 128; // half the table, opened between samples
    let _turn = limit_lock();
    let s = SamplerBuilder::new().build().unwrap();
    let (stop, workers, tids) = parked_threads(THREADS);
    let before = common::open_fds();
    assert!(before < 64, "the test needs a small table: {before} open");
    let restore = RestoreLimit(set_nofile(LIMIT));
    let mut most_used = 0;
    for round in 0..5 {
        let snap = s.sample_now().expect("sampling keeps working");
        assert_eq!(exhausted(&snap), None, "round {round}: {:?}", snap.warnings);
        for tid in &tids {
            let t = snap
                .thread_by_tid(*tid)
                .unwrap_or_else(|| panic!("thread {tid} missing"));
            assert!(t.total_cpu_time_ns > 0, "{t:?}");
            assert!(
                t.total_run_queue_wait_ns.is_some(),
                "full data by open-read-close: {t:?}"
            );
        }
        most_used = most_used.max(common::open_fds());
        let host: Vec<File> = (0..HOST_FILES)
            .map(|i| {
                File::open("/dev/null")
                    .unwrap_or_else(|e| panic!("round {round}: the host's open #{i} failed: {e}"))
            })
            .collect();
        drop(host);
    }
    // The host could open this many more at once after the last sample.
    let room = fill_table().len();
    drop(restore);
    println!(
        "limit {LIMIT}, {} threads: {before} descriptors open before sampling, \
         at most {most_used} while sampling; the host could still open {room}",
        THREADS + 1
    );
    assert!(most_used as u64 <= before as u64 + LIMIT / 4 + 3);
    stop.wait();
    for w in workers {
        w.join().unwrap();
    }
}

/// Samples until two samples in a row list the same threads (up to 2 s), so
/// that threads of the test harness that were finishing are gone.
fn stable_sample(s: &wakemeter::Sampler) -> Snapshot {
    let tids = |snap: &Snapshot| {
        let mut v: Vec<u64> = snap.threads.iter().map(|t| t.tid).collect();
        v.sort_unstable();
        v
    };
    let mut last = s.sample_now().unwrap();
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let snap = s.sample_now().unwrap();
        if tids(&snap) == tids(&last) {
            return snap;
        }
        last = snap;
    }
    last
}

#[test]
fn emfile_degrades_with_a_typed_warning_and_recovers() {
    let _turn = limit_lock();
    let s = SamplerBuilder::new().build().unwrap();
    let before = stable_sample(&s);
    let (stop, workers, tids) = parked_threads(16);
    let restore = RestoreLimit(set_nofile(common::open_fds() as u64 + 64));
    // The host uses every descriptor: not even open-read-close works.
    let held = fill_table();
    let snap = s.sample_now().expect("sampling keeps working");
    let w = exhausted(&snap);
    // A thread tracked before that has exited since (say, the test harness's
    // thread of the other test, finishing) gives back its kept descriptors
    // during the pass: at most two, so at most two new threads get theirs.
    let exited = before
        .threads
        .iter()
        .filter(|t| snap.thread_by_tid(t.tid).is_none())
        .count();
    assert!(
        w.unwrap_or(0) as usize + 2 * exited >= 16,
        "warning expected: {:?} ({exited} tracked threads exited)",
        snap.warnings
    );
    for tid in &tids {
        assert!(
            snap.thread_by_tid(*tid)
                .is_some_and(|t| t.total_cpu_time_ns > 0),
            "every thread still sampled (CPU from its clock)"
        );
    }
    // The sampler gave back its kept descriptors; once the host takes them
    // too, a new sampler fails with a typed error.
    let more = fill_table();
    assert!(!more.is_empty(), "the kept descriptors were given back");
    let err = SamplerBuilder::new().build().unwrap_err();
    assert!(matches!(err, Error::DescriptorsExhausted { .. }), "{err}");
    // The host frees its descriptors: complete samples again.
    drop((held, more));
    let snap = s.sample_now().unwrap();
    drop(restore);
    assert!(
        snap.warnings.is_empty(),
        "recovers once descriptors are available: {:?}",
        snap.warnings
    );
    for tid in &tids {
        let t = snap.thread_by_tid(*tid).unwrap();
        assert!(t.total_run_queue_wait_ns.is_some(), "{t:?}");
    }
    stop.wait();
    for w in workers {
        w.join().unwrap();
    }
}
