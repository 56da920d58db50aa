//! Single-writer counters shared between a probe and the sampler, and the
//! probe clock.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::histogram::{LOG2_BUCKETS, Log2Histogram, log2_bucket};

/// A counter with one writer: `add` is a relaxed load and store (no
/// read-modify-write instruction, ~1 ns), correct because only the probe's
/// owner writes it.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub(crate) fn add(&self, v: u64) {
        let c = &self.0;
        c.store(
            c.load(Ordering::Relaxed).saturating_add(v),
            Ordering::Relaxed,
        );
    }
    #[inline]
    pub(crate) fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A log2 histogram with one writer.
#[derive(Debug)]
pub(crate) struct Histogram([Counter; LOG2_BUCKETS]);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(std::array::from_fn(|_| Counter::default()))
    }
}

impl Histogram {
    #[inline]
    pub(crate) fn record(&self, v: u64) {
        self.0[log2_bucket(v)].add(1);
    }
    pub(crate) fn read(&self) -> Log2Histogram {
        let raw: [u64; LOG2_BUCKETS] = std::array::from_fn(|i| self.0[i].get());
        Log2Histogram::from_buckets(&raw)
    }
}

/// Nanoseconds since a process-wide origin, from `Instant` (the vDSO
/// monotonic clock: ~25-70 ns). A TSC clock (quanta) was measured as well;
/// see BENCHMARKS.md for why `Instant` stays.
#[inline]
pub(crate) fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = ORIGIN.get_or_init(Instant::now);
    duration_ns(origin.elapsed())
}

/// A duration in ns, saturating at `u64::MAX` (~584 years).
#[inline]
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The calling thread's OS id, cached per thread.
#[inline]
pub(crate) fn current_tid() -> u64 {
    thread_local! {
        static TID: u64 = os_tid();
    }
    TID.with(|t| *t)
}

fn os_tid() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: gettid has no preconditions and cannot fail.
        return (unsafe { libc::gettid() }) as u64;
    }
    #[cfg(target_vendor = "apple")]
    {
        let mut id: u64 = 0;
        // SAFETY: a null thread means the calling thread; `id` is a valid out-pointer.
        unsafe { libc::pthread_threadid_np(0, &mut id) };
        return id;
    }
    #[allow(unreachable_code)]
    0
}
