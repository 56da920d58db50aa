//! The test behind every verdict of a [`super::Comparison`].
//!
//! - **Replicates** (two or more runs on each side): a bootstrap over runs.
//!   Each side's runs are resampled with replacement
//!   [`BOOTSTRAP_RESAMPLES`] times; the verdict is "changed" when the 95%
//!   percentile interval of the difference of the sides' means excludes 0.
//! - **One run on a side**: a moving-block bootstrap over intervals. Each
//!   series (one metric of one process) is kept as at most
//!   [`MAX_BATCHES`] batches of consecutive intervals (their
//!   duration-weighted means; batches double in length as a recording
//!   grows, so memory is bounded whatever its length), and resampled in
//!   blocks of `⌈n^(1/3)⌉` consecutive batches, so that the correlation of
//!   neighbouring intervals is kept inside a block instead of being taken
//!   for independent evidence. Processes are resampled independently and
//!   summed. Fewer than [`MIN_INTERVALS`] intervals on a side is "not
//!   enough data", as is a figure measured once per run (requests per
//!   second) with one run.
//!
//! The generator is seeded ([`BOOTSTRAP_SEED`] mixed with the row's name),
//! so the same recordings always give the same output.

/// Resamples per bootstrap.
pub const BOOTSTRAP_RESAMPLES: usize = 1000;

/// The seed of every bootstrap (mixed with the row's name).
pub const BOOTSTRAP_SEED: u64 = 0x7761_6b65_6d65_7465;

/// Fewest intervals on each side for a verdict from one run.
pub const MIN_INTERVALS: u64 = 8;

/// Most batches a series keeps before merging neighbours.
pub const MAX_BATCHES: usize = 32;

/// The test, in words, for the output.
pub const TEST_DESCRIPTION: &str = "with 2+ runs per side: bootstrap over runs \
    (1000 resamples, 95% interval of the difference of means); with one run: \
    moving-block bootstrap over intervals (at most 32 batches of consecutive \
    intervals, blocks of n^(1/3) batches, 1000 resamples, fewer than 8 \
    intervals is not enough data); changed when the interval excludes 0; seeded";

/// SplitMix64, written here rather than taken from `rand`: ten lines,
/// and its sequence for a seed is fixed forever, which the reproducible
/// output depends on (`rand`'s generators may change between versions).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64, name: &str) -> Self {
        // FNV-1a of the name, so that every row has its own stream
        // whatever the order rows are computed in.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Rng(seed ^ h)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; the bias of the modulo is below 2^-40
    /// for the sizes used here).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % (n.max(1) as u64)) as usize
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Batch {
    /// Sum of value × weight.
    vw: f64,
    /// Sum of weights (seconds).
    w: f64,
    /// Intervals in it.
    n: u32,
}

/// One metric of one process over one run, in bounded memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Batches {
    items: Vec<Batch>,
    /// Intervals per full batch.
    per: u32,
    intervals: u64,
}

impl Batches {
    /// Adds one interval's value `v`, weighted by its length `w` (s).
    pub(crate) fn push(&mut self, v: f64, w: f64) {
        if !(v.is_finite() && w.is_finite() && w > 0.0) {
            return;
        }
        self.per = self.per.max(1);
        self.intervals += 1;
        match self.items.last_mut() {
            Some(b) if b.n < self.per => {
                b.vw += v * w;
                b.w += w;
                b.n += 1;
            }
            _ => self.items.push(Batch { vw: v * w, w, n: 1 }),
        }
        if self.items.len() > MAX_BATCHES {
            // Merge neighbours: half as many batches, twice as long.
            let merged: Vec<Batch> = self
                .items
                .chunks(2)
                .map(|c| {
                    c.iter().fold(Batch::default(), |a, b| Batch {
                        vw: a.vw + b.vw,
                        w: a.w + b.w,
                        n: a.n + b.n,
                    })
                })
                .collect();
            self.items = merged;
            self.per = self.per.saturating_mul(2);
        }
    }

    pub(crate) fn intervals(&self) -> u64 {
        self.intervals
    }

    /// Total weight: the seconds measured.
    pub(crate) fn seconds(&self) -> f64 {
        self.items.iter().map(|b| b.w).sum()
    }

    /// The duration-weighted mean.
    pub(crate) fn mean(&self) -> Option<f64> {
        let (vw, w) = self
            .items
            .iter()
            .fold((0.0, 0.0), |(a, b), x| (a + x.vw, b + x.w));
        (w > 0.0).then(|| vw / w)
    }

    /// The mean of one moving-block resample.
    pub(crate) fn resampled_mean(&self, rng: &mut Rng) -> Option<f64> {
        let n = self.items.len();
        if n == 0 {
            return None;
        }
        let l = ((n as f64).cbrt().ceil() as usize).clamp(1, n);
        let (mut vw, mut w, mut taken) = (0.0, 0.0, 0);
        while taken < n {
            let start = rng.below(n - l + 1);
            for b in self.items.iter().skip(start).take(l.min(n - taken)) {
                vw += b.vw;
                w += b.w;
                taken += 1;
            }
        }
        (w > 0.0).then(|| vw / w)
    }
}

/// How the series of one run make one figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combine {
    /// Sum of the means (CPU %, RSS, rates: processes add up).
    Sum,
    /// Mean of the means (ratios, delays: they do not add up).
    Mean,
    /// Sum of mean × seconds / 100: CPU seconds from CPU %.
    CpuSeconds,
}

/// One side's figure, as the test sees it.
pub(crate) enum Quantity<'a> {
    /// Per run: its series and a factor applied to the combined value.
    Series(Vec<(Vec<&'a Batches>, f64)>, Combine),
    /// Per run: one value (what a load tool printed).
    PerRun(Vec<f64>),
}

fn combine(values: impl Iterator<Item = (f64, f64)>, how: Combine) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for (v, secs) in values {
        sum += match how {
            Combine::CpuSeconds => v * secs / 100.0,
            _ => v,
        };
        n += 1;
    }
    match (n, how) {
        (0, _) => None,
        (_, Combine::Mean) => Some(sum / n as f64),
        _ => Some(sum),
    }
}

impl Quantity<'_> {
    /// Values per run.
    fn run_values(&self) -> Vec<f64> {
        match self {
            Quantity::PerRun(v) => v.clone(),
            Quantity::Series(runs, how) => runs
                .iter()
                .filter_map(|(s, f)| {
                    combine(
                        s.iter().filter_map(|b| Some((b.mean()?, b.seconds()))),
                        *how,
                    )
                    .map(|v| v * f)
                })
                .collect(),
        }
    }

    /// Intervals of its longest series.
    fn intervals(&self) -> u64 {
        match self {
            Quantity::PerRun(v) => v.len() as u64,
            Quantity::Series(runs, _) => runs
                .iter()
                .flat_map(|(s, _)| s.iter().map(|b| b.intervals()))
                .max()
                .unwrap_or(0),
        }
    }

    /// One block-bootstrap resample of the side's value.
    fn resample_blocks(&self, rng: &mut Rng) -> Option<f64> {
        match self {
            Quantity::PerRun(_) => None,
            Quantity::Series(runs, how) => {
                let per_run: Vec<f64> = runs
                    .iter()
                    .filter_map(|(s, f)| {
                        let vals: Vec<(f64, f64)> = s
                            .iter()
                            .filter_map(|b| Some((b.resampled_mean(rng)?, b.seconds())))
                            .collect();
                        combine(vals.into_iter(), *how).map(|v| v * f)
                    })
                    .collect();
                mean(&per_run)
            }
        }
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// What the test found for one figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Tested {
    /// Each side: value, 95% interval (low, high), runs, intervals.
    pub(crate) control: Option<(f64, f64, f64, u32, u64)>,
    pub(crate) variant: Option<(f64, f64, f64, u32, u64)>,
    /// 95% interval of variant − control, when tested.
    pub(crate) delta_interval: Option<(f64, f64)>,
    /// Whether a test could be made.
    pub(crate) enough: bool,
}

/// Tests one figure: replicates when `replicates`, else blocks.
pub(crate) fn test(control: &Quantity, variant: &Quantity, replicates: bool, name: &str) -> Tested {
    let (cv, vv) = (control.run_values(), variant.run_values());
    let plain = |q: &Quantity, v: &[f64]| mean(v).map(|m| (m, m, m, v.len() as u32, q.intervals()));
    let mut out = Tested {
        control: plain(control, &cv),
        variant: plain(variant, &vv),
        delta_interval: None,
        enough: false,
    };
    if out.control.is_none() || out.variant.is_none() {
        return out;
    }
    let mut rng = Rng::new(BOOTSTRAP_SEED, name);
    let mut cs = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let mut vs = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let mut ds = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    if replicates {
        if cv.len() < 2 || vv.len() < 2 {
            return out;
        }
        let draw = |v: &[f64], rng: &mut Rng| {
            (0..v.len()).map(|_| v[rng.below(v.len())]).sum::<f64>() / v.len() as f64
        };
        for _ in 0..BOOTSTRAP_RESAMPLES {
            let (c, v) = (draw(&cv, &mut rng), draw(&vv, &mut rng));
            cs.push(c);
            vs.push(v);
            ds.push(v - c);
        }
    } else {
        if control.intervals() < MIN_INTERVALS || variant.intervals() < MIN_INTERVALS {
            return out;
        }
        for _ in 0..BOOTSTRAP_RESAMPLES {
            let (Some(c), Some(v)) = (
                control.resample_blocks(&mut rng),
                variant.resample_blocks(&mut rng),
            ) else {
                return out;
            };
            cs.push(c);
            vs.push(v);
            ds.push(v - c);
        }
    }
    for x in [&mut cs, &mut vs, &mut ds] {
        x.sort_by(f64::total_cmp);
    }
    let widen = |s: Option<(f64, f64, f64, u32, u64)>, b: &[f64]| {
        s.map(|(m, _, _, r, i)| (m, percentile(b, 0.025), percentile(b, 0.975), r, i))
    };
    out.control = widen(out.control, &cs);
    out.variant = widen(out.variant, &vs);
    out.delta_interval = Some((percentile(&ds, 0.025), percentile(&ds, 0.975)));
    out.enough = true;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(values: &[f64]) -> Batches {
        let mut b = Batches::default();
        for v in values {
            b.push(*v, 1.0);
        }
        b
    }

    #[test]
    fn batches_keep_the_mean_and_a_bounded_size() {
        let mut b = Batches::default();
        for i in 0..10_000 {
            b.push(f64::from(i % 10), 0.5);
        }
        assert!(b.items.len() <= MAX_BATCHES);
        assert_eq!(b.intervals(), 10_000);
        assert!((b.mean().unwrap() - 4.5).abs() < 1e-9);
        assert!((b.seconds() - 5000.0).abs() < 1e-6);
        b.push(f64::NAN, 1.0);
        b.push(1.0, 0.0);
        assert_eq!(b.intervals(), 10_000);
    }

    #[test]
    fn a_steady_series_against_itself_is_not_a_change_and_a_shift_is() {
        // A noisy, autocorrelated series (a slow wave plus jitter).
        let wave = |shift: f64, phase: f64| -> Vec<f64> {
            (0..60)
                .map(|i| {
                    let t = f64::from(i);
                    30.0 + shift + 3.0 * ((t + phase) / 6.0).sin() + ((t * 7.3).sin() * 0.5)
                })
                .collect()
        };
        let (a, b) = (series(&wave(0.0, 0.0)), series(&wave(0.0, 17.0)));
        let c = Quantity::Series(vec![(vec![&a], 1.0)], Combine::Sum);
        let v = Quantity::Series(vec![(vec![&b], 1.0)], Combine::Sum);
        let t = test(&c, &v, false, "x");
        assert!(t.enough);
        let (lo, hi) = t.delta_interval.unwrap();
        assert!(lo <= 0.0 && 0.0 <= hi, "{lo}..{hi}");
        let shifted = series(&wave(5.0, 17.0));
        let v = Quantity::Series(vec![(vec![&shifted], 1.0)], Combine::Sum);
        let t = test(&c, &v, false, "x");
        let (lo, _) = t.delta_interval.unwrap();
        assert!(lo > 0.0, "{t:?}");
        // The same input gives the same interval.
        assert_eq!(test(&c, &v, false, "x"), t);
    }

    #[test]
    fn too_few_intervals_or_runs_is_not_enough_data() {
        let a = series(&[1.0, 2.0, 3.0]);
        let q = || Quantity::Series(vec![(vec![&a], 1.0)], Combine::Sum);
        assert!(!test(&q(), &q(), false, "x").enough);
        let one = Quantity::PerRun(vec![100.0]);
        assert!(!test(&one, &Quantity::PerRun(vec![120.0]), true, "x").enough);
        let t = test(
            &Quantity::PerRun(vec![100.0, 101.0, 99.0]),
            &Quantity::PerRun(vec![150.0, 149.0, 152.0]),
            true,
            "x",
        );
        assert!(t.enough && t.delta_interval.unwrap().0 > 0.0);
    }
}
