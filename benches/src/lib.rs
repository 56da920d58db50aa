//! Shared helpers for the wakemeter benches: parked worker threads and a
//! ratio report against a baseline measured in the same run.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `n` threads blocked on a condition variable until dropped (they add
/// threads to sample without adding CPU noise).
pub struct ParkedThreads {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl ParkedThreads {
    /// Spawns `n` parked threads named `parked-<i>`.
    pub fn spawn(n: usize) -> ParkedThreads {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let handles = (0..n)
            .map(|i| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("parked-{i}"))
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let (m, c) = &*stop;
                        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                        while !*g {
                            g = c.wait(g).unwrap_or_else(|e| e.into_inner());
                        }
                    })
                    .expect("spawn parked thread")
            })
            .collect();
        ParkedThreads { stop, handles }
    }
}

impl Drop for ParkedThreads {
    fn drop(&mut self) {
        let (m, c) = &*self.stop;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        c.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Collects per-iteration times from `iter_custom` runs so the bench can
/// print medians and ratios against a baseline measured in the same run.
#[derive(Default)]
pub struct Ratios {
    samples: Mutex<BTreeMap<String, Vec<f64>>>,
}

impl Ratios {
    /// Times `iters` calls of `f`, records ns/call under `name`, returns the total.
    pub fn time<R>(&self, name: &str, iters: u64, mut f: impl FnMut() -> R) -> Duration {
        let start = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(f());
        }
        let d = start.elapsed();
        let per = d.as_nanos() as f64 / iters.max(1) as f64;
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_default()
            .push(per);
        d
    }

    /// Records `ns_per_call` under `name`, measured by the caller (a
    /// bench that times only part of each iteration).
    pub fn record(&self, name: &str, ns_per_call: f64) {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_default()
            .push(ns_per_call);
    }

    /// Median ns per call recorded under `name`.
    pub fn median(&self, name: &str) -> Option<f64> {
        let map = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let mut v = map.get(name)?.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        Some(v[v.len() / 2])
    }
}

/// `n` threads that each wake every [`ACTIVE_PERIOD`], do ~2 µs of work and
/// sleep again, until dropped: every counter of every thread moves between
/// two samples taken at least one period apart, so no read can be skipped.
pub struct ActiveThreads {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

/// How often each of [`ActiveThreads`] wakes.
pub const ACTIVE_PERIOD: Duration = Duration::from_millis(10);

impl ActiveThreads {
    /// Spawns `n` active threads named `active-<i>`.
    pub fn spawn(n: usize) -> ActiveThreads {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..n)
            .map(|i| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("active-{i}"))
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let mut x = i as u64;
                        while !stop.load(Ordering::Relaxed) {
                            for _ in 0..1000 {
                                x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                            }
                            std::thread::sleep(ACTIVE_PERIOD);
                        }
                    })
                    .expect("spawn active thread")
            })
            .collect();
        ActiveThreads { stop, handles }
    }
}

impl Drop for ActiveThreads {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Nanoseconds of CPU the calling thread has used (its CPU clock).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Median of `v` (sorted in place); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
