//! Log2 histograms of durations, shared by probes and kernel sources.

use serde::{Deserialize, Serialize};

/// Number of buckets: bucket `i` holds values `v` with `floor(log2(v)) == i - 1`,
/// bucket 0 holds `v == 0`; 65 buckets cover all of `u64`.
pub const LOG2_BUCKETS: usize = 65;

/// A histogram of durations in nanoseconds with power-of-two buckets.
///
/// Bucket `0` counts zero values; bucket `i >= 1` counts values in
/// `[2^(i-1), 2^i)` ns. `buckets` is trimmed after the last non-zero bucket,
/// so an empty histogram serializes as `[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Log2Histogram {
    /// Counts per bucket (see the type's docs for bucket bounds).
    pub buckets: Vec<u64>,
}

/// Index of the bucket a value falls in.
#[inline]
pub fn log2_bucket(value: u64) -> usize {
    (u64::BITS - value.leading_zeros()) as usize
}

/// Lower bound (inclusive) of bucket `index`, in the histogram's unit.
pub fn log2_bucket_lower(index: usize) -> u64 {
    match index {
        0 => 0,
        i if i >= LOG2_BUCKETS => u64::MAX,
        i => 1u64 << (i - 1),
    }
}

impl Log2Histogram {
    /// Builds a histogram from raw bucket counts (any length up to
    /// [`LOG2_BUCKETS`]; extra buckets are folded into the last one).
    pub fn from_buckets(raw: &[u64]) -> Self {
        let mut buckets: Vec<u64> = raw.iter().copied().take(LOG2_BUCKETS).collect();
        if raw.len() > LOG2_BUCKETS {
            let extra: u64 = raw[LOG2_BUCKETS..]
                .iter()
                .fold(0u64, |a, b| a.saturating_add(*b));
            if let Some(last) = buckets.last_mut() {
                *last = last.saturating_add(extra);
            }
        }
        while buckets.last() == Some(&0) {
            buckets.pop();
        }
        // The collect sized it for every bucket (520 bytes); most threads'
        // histograms are empty or short, and a process of 20,000 threads
        // holds three of them per thread in every sample kept.
        buckets.shrink_to_fit();
        Log2Histogram { buckets }
    }

    /// Adds one value (ns).
    pub fn record(&mut self, value: u64) {
        let i = log2_bucket(value);
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, 0);
        }
        self.buckets[i] = self.buckets[i].saturating_add(1);
    }

    /// Total number of values recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Bucket-wise difference `self - earlier` (saturating), for intervals.
    pub fn since(&self, earlier: &Log2Histogram) -> Log2Histogram {
        let raw: Vec<u64> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, v)| v.saturating_sub(earlier.buckets.get(i).copied().unwrap_or(0)))
            .collect();
        Log2Histogram::from_buckets(&raw)
    }

    /// Lower bound (ns) of the bucket holding the `q`-quantile (`q` in `0.0..=1.0`),
    /// or `None` when empty. Accurate to a factor of two, by construction.
    pub fn quantile_lower_bound(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, c) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(*c);
            if seen >= rank {
                return Some(log2_bucket_lower(i));
            }
        }
        self.buckets.len().checked_sub(1).map(log2_bucket_lower)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_have_power_of_two_bounds() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 1);
        assert_eq!(log2_bucket(2), 2);
        assert_eq!(log2_bucket(3), 2);
        assert_eq!(log2_bucket(1024), 11);
        assert_eq!(log2_bucket(u64::MAX), 64);
        for i in 1..LOG2_BUCKETS {
            assert_eq!(log2_bucket(log2_bucket_lower(i)), i);
        }
    }

    #[test]
    fn record_count_quantile_since() {
        let mut h = Log2Histogram::default();
        for v in [0, 1, 1000, 1000, 1000, 1_000_000] {
            h.record(v);
        }
        assert_eq!(h.count(), 6);
        assert_eq!(h.quantile_lower_bound(0.5), Some(512));
        assert_eq!(h.quantile_lower_bound(1.0), Some(1 << 19));
        let mut later = h.clone();
        later.record(1000);
        let d = later.since(&h);
        assert_eq!(d.count(), 1);
        assert_eq!(d.quantile_lower_bound(0.0), Some(512));
        assert_eq!(Log2Histogram::default().quantile_lower_bound(0.5), None);
        assert_eq!(Log2Histogram::from_buckets(&[0, 0]).buckets.len(), 0);
    }
}
