//! The loop probes' fast clock: the CPU's time-stamp counter on x86_64
//! Linux, read with one `rdtsc`, converted to nanoseconds with a factor
//! the sampler calibrates against `CLOCK_MONOTONIC` at each sample.
//!
//! Why by hand: `clock_gettime(CLOCK_MONOTONIC)` through the vDSO reads
//! the same counter and scales it, behind a sequence lock and an ordering
//! fence: 20 ns a read here, against 8.8 ns for a bare `rdtsc`
//! (`rdtscp`: 16.9 ns; BENCHMARKS.md, "Probes and findings"). A wait pair
//! takes two reads, so this is most of what a probe costs. quanta does the
//! same, but calibrates for up to 200 ms on the thread that first reads it;
//! here the calibration rides on the samples the sampler takes anyway.
//!
//! Used only where it is safe, decided once when the first sampler is
//! built:
//! - the kernel's clocksource is `tsc`: the kernel itself trusts the
//!   counter (synchronized across CPUs, checked by its watchdog);
//! - the CPU reports an invariant counter (`constant_tsc`, `nonstop_tsc`);
//!
//! and only once the calibration spans at least [`MIN_SPAN_NS`]. Until
//! then, elsewhere (Android, Apple, arm64), when nothing samples, and with
//! `WAKEMETER_PROBE_CLOCK=os` in the environment, probes read
//! [`super::clock::now_ns`]. A probe switches clocks once, at a
//! `before_wait` (see `LoopProbe`).
//!
//! Accuracy: each calibration point is the closest of three
//! (`rdtsc`, clock, `rdtsc`) triples, within about 20 ns; over a span of
//! at least 1 s the factor is off by less than 1e-7 (0.1 µs on a 1 s
//! wait), and it is refined at every sample as the span grows.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod imp {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::MIN_SPAN_NS;
    use crate::platform::clock::monotonic_ns;

    /// Set to `os` in the environment, the probes keep the OS clock even
    /// where the counter is safe (read once, when the first sampler is built).
    const OS_CLOCK_ENV: &str = "WAKEMETER_PROBE_CLOCK";

    /// ns per tick in 32.32 fixed point; 0 until calibrated.
    static MULT: AtomicU64 = AtomicU64::new(0);
    /// The first calibration point, when the counter is usable.
    static ORIGIN: OnceLock<Option<(u64, u64)>> = OnceLock::new();

    #[inline]
    pub fn read() -> u64 {
        // SAFETY: `rdtsc` is available on every x86_64 CPU and has no
        // memory effects; it is not serializing, which only blurs a
        // reading by a few instructions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[inline]
    pub fn mult() -> u64 {
        MULT.load(Ordering::Relaxed)
    }

    /// The closest of three (counter, clock) pairs: the counter read on
    /// each side of the clock, the pair taken at their midpoint.
    fn pair() -> (u64, u64) {
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..3 {
            let before = read();
            let ns = monotonic_ns();
            let after = read();
            let skew = after.wrapping_sub(before);
            if skew < best.0 {
                best = (skew, before.wrapping_add(skew / 2), ns);
            }
        }
        (best.1, best.2)
    }

    fn usable() -> bool {
        if std::env::var_os(OS_CLOCK_ENV).is_some_and(|v| v == "os") {
            return false;
        }
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        );
        if source.map(|s| s.trim() != "tsc").unwrap_or(true) {
            return false;
        }
        invariant_counter()
    }

    /// Whether the CPU reports an invariant counter (CPUID leaf 0x80000007,
    /// EDX bit 8): what the kernel shows as `constant_tsc` and
    /// `nonstop_tsc`, which it sets from this bit. Asked of the CPU rather
    /// than read from `/proc/cpuinfo`, whose text (and the kernel's time
    /// to write it) grows with the number of CPUs: on the 2-CPU test VM
    /// the file took 29 µs a read, `cpuid` 4.3 µs (a VM exit).
    fn invariant_counter() -> bool {
        use core::arch::x86_64::__cpuid;
        const POWER_LEAF: u32 = 0x8000_0007;
        // Leaf 0x80000000 gives the highest extended leaf: the power leaf
        // is asked only where it exists.
        __cpuid(0x8000_0000).eax >= POWER_LEAF && __cpuid(POWER_LEAF).edx & (1 << 8) != 0
    }

    pub fn init() {
        ORIGIN.get_or_init(|| usable().then(pair));
    }

    pub fn calibrate(min_span_ns: u64) {
        let Some(Some((tsc0, ns0))) = ORIGIN.get().copied() else {
            return;
        };
        let (tsc, ns) = pair();
        let span_ns = ns.saturating_sub(ns0);
        let ticks = tsc.saturating_sub(tsc0);
        if span_ns < min_span_ns.max(1) || ticks == 0 {
            return;
        }
        let mult = (u128::from(span_ns) << 32) / u128::from(ticks);
        // A counter between 100 MHz and 20 GHz, or none at all.
        if ((1 << 32) / 20..=10 << 32).contains(&mult) {
            MULT.store(mult as u64, Ordering::Relaxed);
        }
    }

    const _: () = assert!(MIN_SPAN_NS > 0);
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod imp {
    #[inline]
    pub fn read() -> u64 {
        0
    }

    #[inline]
    pub fn mult() -> u64 {
        0
    }

    pub fn init() {}

    pub fn calibrate(_min_span_ns: u64) {}
}

/// The shortest span a published calibration rests on, in ns.
pub(crate) const MIN_SPAN_NS: u64 = 1_000_000_000;

/// The counter, in ticks. Meaningful only when [`mult`] is not 0.
#[inline]
pub(crate) fn read() -> u64 {
    imp::read()
}

/// ns per tick in 32.32 fixed point; 0 while the counter is not to be
/// used (not calibrated yet, or not safe here). Never 0 again once set.
#[inline]
pub(crate) fn mult() -> u64 {
    imp::mult()
}

/// `ticks` in ns with factor `mult` (from [`mult`]).
#[inline]
pub(crate) fn to_ns(ticks: u64, mult: u64) -> u64 {
    ((u128::from(ticks) * u128::from(mult)) >> 32).min(u128::from(u64::MAX)) as u64
}

/// Decides, once per process, whether the counter may be used, and takes
/// the first calibration point (reads one small file and asks the CPU;
/// at a sampler's build).
pub(crate) fn init() {
    imp::init();
}

/// Takes a calibration point and publishes the factor once the span since
/// the first reaches [`MIN_SPAN_NS`] (a few clock reads; at each sample).
pub(crate) fn calibrate() {
    imp::calibrate(MIN_SPAN_NS);
}

/// [`calibrate`] with a shorter minimum span, for tests.
#[cfg(test)]
pub(crate) fn calibrate_after(min_span_ns: u64) {
    imp::calibrate(min_span_ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_with_the_fixed_point_factor() {
        // 2.5 GHz: 0.4 ns a tick.
        let mult = (4u64 << 32) / 10;
        assert!(to_ns(2_500_000_000, mult).abs_diff(1_000_000_000) <= 1);
        assert_eq!(to_ns(0, mult), 0);
        assert_eq!(to_ns(u64::MAX, u64::MAX), u64::MAX, "saturates");
    }

    /// Where the counter is used, its calibration agrees with
    /// `CLOCK_MONOTONIC` over a later span to 1e-4.
    #[test]
    fn a_calibrated_counter_keeps_time_with_the_monotonic_clock() {
        init();
        std::thread::sleep(std::time::Duration::from_millis(60));
        calibrate_after(50_000_000);
        let m = mult();
        if m == 0 {
            // Not x86_64 Linux with a trusted TSC: probes keep `now_ns`.
            return;
        }
        let (t0, n0) = (read(), crate::platform::clock::monotonic_ns());
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (t1, n1) = (read(), crate::platform::clock::monotonic_ns());
        let by_ticks = to_ns(t1 - t0, mult()) as f64;
        let by_clock = (n1 - n0) as f64;
        assert!(
            (by_ticks - by_clock).abs() / by_clock < 1e-4,
            "{by_ticks} ns by the counter against {by_clock} ns"
        );
    }
}
