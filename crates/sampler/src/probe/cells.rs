//! Single-writer counters shared between a probe and the sampler.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::histogram::{LOG2_BUCKETS, Log2Histogram, log2_bucket};

/// A counter with one writer: `add` is a relaxed load and store (no
/// read-modify-write instruction), correct because only the probe's
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
