//! The loop probes' fast clock: a counter the CPU (or the OS, in user
//! space) ticks at a constant rate, read in a few ns and converted to
//! nanoseconds with a factor the sampler calibrates against the OS clock
//! the probes otherwise read ([`super::clock::now_ns`]) at each sample.
//!
//! | platform | counter | used when |
//! |---|---|---|
//! | x86_64 Linux | time-stamp counter, one `rdtsc` | the kernel's clocksource is `tsc` and the CPU reports it invariant |
//! | aarch64 Linux and Android | virtual counter `CNTVCT_EL0`, `isb` + `mrs` | `CNTFRQ_EL0` is set and the calibration agrees with it |
//! | Apple (iOS, macOS) | `mach_absolute_time()`, the OS's public read of the same counter | its timebase is known and the calibration agrees with it |
//!
//! Why by hand: `clock_gettime(CLOCK_MONOTONIC)` through the vDSO reads
//! the same counter and scales it, behind a sequence lock and an ordering
//! fence: a read costs about twice a bare `rdtsc`, and more than `rdtscp`
//! (`benches/c/clock_reads.c`; BENCHMARKS.md, "Probes and findings"). A wait pair
//! takes two reads, so this is most of what a probe costs. quanta does the
//! same, but calibrates for up to 200 ms on the thread that first reads it;
//! here the calibration rides on the samples the sampler takes anyway.
//!
//! Whether the counter may be used is decided once, when the first
//! sampler is built:
//! - x86_64: the kernel's clocksource is `tsc` (the kernel itself trusts
//!   the counter: synchronized across CPUs, checked by its watchdog) and
//!   the CPU reports an invariant counter (`constant_tsc`, `nonstop_tsc`).
//! - aarch64: the architecture defines one system counter for all CPUs,
//!   at a constant rate given in `CNTFRQ_EL0`; Linux traps and corrects
//!   user reads on CPUs with counter errata. The kernel's clocksource file
//!   is not asked: Android apps may not read sysfs, and under qemu-user it
//!   is the host's. Instead the calibrated rate must agree with
//!   `CNTFRQ_EL0` to 1% (a firmware that sets a wrong frequency, or a
//!   counter that does not tick at it, keeps the OS clock).
//! - Apple: the counter is read with `mach_absolute_time()`, not `mrs`:
//!   whether user code may read `CNTVCT_EL0` directly is recorded only in
//!   the private commpage, and a read where it may not kills the process;
//!   `mach_absolute_time` is that read (or the kernel's) behind a public
//!   call, in the clock domain `Instant` uses (`CLOCK_UPTIME_RAW`). Its
//!   calibrated rate must agree with `mach_timebase_info` to 1%.
//!
//! Everywhere, only once the calibration spans at least [`MIN_SPAN_NS`].
//! Until then, elsewhere, when nothing samples, and with
//! `WAKEMETER_PROBE_CLOCK=os` in the environment, probes read
//! [`super::clock::now_ns`]. A probe switches clocks once, at a
//! `before_wait` (see `LoopProbe`).
//!
//! Suspend: counters that keep ticking while the system sleeps (most
//! phones' and laptops') and the OS clocks the probes otherwise read (that
//! do not) part at every suspend. A calibration span that contains one
//! would be wrong, so the sampler restarts the span when the time slept
//! (`CLOCK_BOOTTIME` − `CLOCK_MONOTONIC`; on Apple `CLOCK_MONOTONIC` −
//! `CLOCK_UPTIME_RAW`) has changed since its start, keeping the factor
//! already published. A single wait that spans a suspend counts the time
//! asleep on such a counter, where the OS clock would not.
//!
//! Accuracy: each calibration point is the closest of three
//! (counter, clock, counter) triples, within one OS clock read on x86_64
//! (more on a slow counter: one tick of a 24 MHz counter is 42 ns); over a span
//! of at least 1 s the factor is off by less than 1e-7 (0.1 µs on a 1 s
//! wait), and it is refined at every sample as the span grows.

/// The platform's counter: how to read it, whether it may be used, its
/// nominal rate, and the OS clocks it is calibrated on.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod counter {
    /// The clock the probes read otherwise (`now_ns`), which does not
    /// count time suspended: the calibration's reference.
    pub const AWAKE_CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    /// The same clock, counting time suspended.
    pub const WITH_SLEEP_CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;

    #[inline]
    pub fn read() -> u64 {
        // SAFETY: `rdtsc` is available on every x86_64 CPU and has no
        // memory effects; it is not serializing, which only blurs a
        // reading by a few instructions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// The TSC's rate is not given anywhere user code can read it: the
    /// calibration alone sets the factor.
    pub fn nominal_mult() -> Option<u64> {
        None
    }

    pub fn usable() -> bool {
        let source = wakemeter_procfs::system::clocksource();
        if source.map(|s| s != "tsc").unwrap_or(true) {
            return false;
        }
        invariant_counter()
    }

    /// Whether the CPU reports an invariant counter (CPUID leaf 0x80000007,
    /// EDX bit 8): what the kernel shows as `constant_tsc` and
    /// `nonstop_tsc`, which it sets from this bit. Asked of the CPU rather
    /// than read from `/proc/cpuinfo`, whose text (and the kernel's time
    /// to write it) grows with the number of CPUs: even on a 2-CPU VM,
    /// where `cpuid` is a VM exit, reading the file costs several times it.
    fn invariant_counter() -> bool {
        use core::arch::x86_64::__cpuid;
        const POWER_LEAF: u32 = 0x8000_0007;
        // Leaf 0x80000000 gives the highest extended leaf: the power leaf
        // is asked only where it exists.
        __cpuid(0x8000_0000).eax >= POWER_LEAF && __cpuid(POWER_LEAF).edx & (1 << 8) != 0
    }
}

#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    target_arch = "aarch64"
))]
mod counter {
    /// See the x86_64 counter.
    pub const AWAKE_CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    /// See the x86_64 counter.
    pub const WITH_SLEEP_CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;

    /// The virtual counter, `CNTVCT_EL0`. The `isb` before it keeps the
    /// read from being taken ahead of the code before it (the CPU may
    /// otherwise read the counter early, out of order), as the kernel's
    /// own `arch_timer` reads do; it costs a pipeline refill, a few ns.
    #[inline]
    pub fn read() -> u64 {
        let ticks: u64;
        // SAFETY: Linux (and so Android) lets user code read CNTVCT_EL0
        // on every arm64 system: its vDSO clocks read it too, and on CPUs
        // with counter errata the kernel traps the read and answers it
        // correctly. `isb` and `mrs` touch no memory and no flags.
        unsafe {
            core::arch::asm!(
                "isb",
                "mrs {ticks}, cntvct_el0",
                ticks = out(reg) ticks,
                options(nomem, nostack, preserves_flags),
            );
        }
        ticks
    }

    /// The rate firmware recorded in `CNTFRQ_EL0`, as ns per tick in
    /// 32.32 fixed point; `None` when it is 0 (not set).
    pub fn nominal_mult() -> Option<u64> {
        let hz: u64;
        // SAFETY: CNTFRQ_EL0 is readable at EL0 wherever CNTVCT_EL0 is
        // (see `read`); `mrs` touches no memory and no flags.
        unsafe {
            core::arch::asm!(
                "mrs {hz}, cntfrq_el0",
                hz = out(reg) hz,
                options(nomem, nostack, preserves_flags),
            );
        }
        // Only the low 32 bits hold the frequency.
        let hz = hz & u64::from(u32::MAX);
        (hz != 0).then(|| ((1_000_000_000u128 << 32) / u128::from(hz)) as u64)
    }

    /// The architecture's guarantees (module docs) stand in for the
    /// kernel's clocksource file; the calibration must agree with
    /// [`nominal_mult`].
    pub fn usable() -> bool {
        nominal_mult().is_some()
    }
}

#[cfg(target_vendor = "apple")]
mod counter {
    /// What `Instant` (and so `now_ns`) reads on Apple platforms:
    /// `mach_absolute_time`, which stops while the system sleeps.
    pub const AWAKE_CLOCK: libc::clockid_t = libc::CLOCK_UPTIME_RAW;
    /// `mach_continuous_time`: the same, counting sleep.
    pub const WITH_SLEEP_CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC_RAW;

    #[inline]
    pub fn read() -> u64 {
        // SAFETY: a plain libSystem call, no arguments; it cannot fail.
        unsafe { mach2::mach_time::mach_absolute_time() }
    }

    /// The timebase (ns per tick as a fraction), as ns per tick in 32.32
    /// fixed point; `None` if the call fails.
    pub fn nominal_mult() -> Option<u64> {
        let mut base = mach2::mach_time::mach_timebase_info::default();
        // SAFETY: `base` is a valid, writable timebase struct for the
        // duration of the call.
        let rc = unsafe { mach2::mach_time::mach_timebase_info(&mut base) };
        if rc != mach2::kern_return::KERN_SUCCESS || base.numer == 0 || base.denom == 0 {
            return None;
        }
        u64::try_from((u128::from(base.numer) << 32) / u128::from(base.denom)).ok()
    }

    pub fn usable() -> bool {
        nominal_mult().is_some()
    }
}

#[cfg(not(any(
    all(target_os = "linux", target_arch = "x86_64"),
    all(
        any(target_os = "linux", target_os = "android"),
        target_arch = "aarch64"
    ),
    target_vendor = "apple",
)))]
mod counter {
    /// Unused: no counter here, the probes keep `now_ns`.
    pub const AWAKE_CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    /// Unused, as [`AWAKE_CLOCK`].
    pub const WITH_SLEEP_CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;

    #[inline]
    pub fn read() -> u64 {
        0
    }

    pub fn nominal_mult() -> Option<u64> {
        None
    }

    /// No counter known to be safe on this platform.
    pub fn usable() -> bool {
        false
    }
}

/// The calibration and the published factor, over the platform's counter.
mod imp {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, OnceLock, TryLockError};

    use super::calibration::{OS_CLOCK_ENV, Point, Step, step};
    use super::counter;
    use crate::platform::clock::read_ns;

    /// ns per tick in 32.32 fixed point; 0 until calibrated.
    static MULT: AtomicU64 = AtomicU64::new(0);
    /// Whether the counter may be used, with its nominal factor.
    static DECISION: OnceLock<Option<Option<u64>>> = OnceLock::new();
    /// Where the calibration span starts (restarted after a suspend).
    static ORIGIN: Mutex<Option<Point>> = Mutex::new(None);

    pub use counter::read;

    #[inline]
    pub fn mult() -> u64 {
        MULT.load(Ordering::Relaxed)
    }

    /// The closest of three (counter, clock) pairs: the counter read on
    /// each side of the clock, the pair taken at their midpoint; and the
    /// time slept so far.
    fn point() -> Point {
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..3 {
            let before = read();
            let ns = read_ns(counter::AWAKE_CLOCK).unwrap_or(0);
            let after = read();
            let skew = after.wrapping_sub(before);
            if skew < best.0 {
                best = (skew, before.wrapping_add(skew / 2), ns);
            }
        }
        Point {
            ticks: best.1,
            ns: best.2,
            slept_ns: slept_ns(),
        }
    }

    /// The time the system has slept, from two clocks that differ only
    /// by it. The awake clock is read first, so a preemption between the
    /// reads can only add to the result: the least of three is kept.
    fn slept_ns() -> u64 {
        (0..3)
            .map(|_| {
                let awake = read_ns(counter::AWAKE_CLOCK).unwrap_or(0);
                read_ns(counter::WITH_SLEEP_CLOCK)
                    .unwrap_or(0)
                    .saturating_sub(awake)
            })
            .min()
            .unwrap_or(0)
    }

    pub fn init() {
        let usable = DECISION.get_or_init(|| {
            let forced_os = std::env::var_os(OS_CLOCK_ENV).is_some_and(|v| v == "os");
            (!forced_os && counter::usable()).then(counter::nominal_mult)
        });
        if usable.is_none() {
            return;
        }
        // Building a sampler may wait on another build's calibration point
        // (a few clock reads); sampling never waits (`calibrate`).
        let mut origin = match ORIGIN.lock() {
            Ok(o) => o,
            Err(poisoned) => poisoned.into_inner(),
        };
        if origin.is_none() {
            *origin = Some(point());
        }
    }

    pub fn calibrate(min_span_ns: u64) {
        let Some(&Some(nominal)) = DECISION.get() else {
            return;
        };
        // Another sampler is calibrating: its point serves.
        let mut origin = match ORIGIN.try_lock() {
            Ok(o) => o,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let Some(start) = *origin else {
            return;
        };
        let now = point();
        match step(&start, &now, min_span_ns, nominal) {
            Step::Restart => *origin = Some(now),
            Step::Publish(mult) => MULT.store(mult, Ordering::Relaxed),
            Step::Wait | Step::Reject => {}
        }
    }
}

/// The shortest span a published calibration rests on, in ns.
pub(crate) const MIN_SPAN_NS: u64 = 1_000_000_000;

/// The calibration's rules, the same for every counter (pure, so tested
/// on any host).
mod calibration {
    /// Set to `os` in the environment, the probes keep the OS clock even
    /// where the counter is safe (read once, when the first sampler is built).
    pub(super) const OS_CLOCK_ENV: &str = "WAKEMETER_PROBE_CLOCK";

    /// How far a calibrated factor may be from the counter's nominal one
    /// (`CNTFRQ_EL0`, the Mach timebase): 1/100. NTP slews the OS clocks by at
    /// most 500 ppm; a larger gap is a wrong nominal rate or a counter that
    /// does not keep it.
    const NOMINAL_TOLERANCE: u64 = 100;

    /// A change in the time slept above this, in ns, between two calibration
    /// points means the system suspended between them (the clocks' difference
    /// otherwise moves only by the few ns between their reads).
    const SLEPT_TOLERANCE_NS: u64 = 1_000_000;

    /// One calibration point: the counter, the OS clock the probes read
    /// otherwise (ns), and the time the system has slept so far (ns).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) struct Point {
        pub(super) ticks: u64,
        pub(super) ns: u64,
        pub(super) slept_ns: u64,
    }

    /// What a new calibration point does to the calibration.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Step {
        /// The system slept since the origin: the new point is the origin.
        Restart,
        /// The span is too short yet.
        Wait,
        /// Publish this factor (ns per tick, 32.32 fixed point).
        Publish(u64),
        /// The factor is implausible: keep the OS clock (or the factor
        /// already published).
        Reject,
    }

    /// The step from calibration point `start` to `now`: the factor of the
    /// span, when it is long enough (`min_span_ns`), no suspend falls inside
    /// it, its rate lies between 1 MHz and 20 GHz and, when the counter has
    /// a `nominal` factor, it agrees with it to [`NOMINAL_TOLERANCE`].
    pub(super) fn step(start: &Point, now: &Point, min_span_ns: u64, nominal: Option<u64>) -> Step {
        if now.slept_ns.abs_diff(start.slept_ns) > SLEPT_TOLERANCE_NS {
            return Step::Restart;
        }
        let span_ns = now.ns.saturating_sub(start.ns);
        let ticks = now.ticks.saturating_sub(start.ticks);
        if span_ns < min_span_ns.max(1) || ticks == 0 {
            return Step::Wait;
        }
        let Ok(mult) = u64::try_from((u128::from(span_ns) << 32) / u128::from(ticks)) else {
            return Step::Reject;
        };
        // 20 GHz (0.05 ns a tick) to 1 MHz (1000 ns a tick).
        if !((1 << 32) / 20..=1000 << 32).contains(&mult) {
            return Step::Reject;
        }
        if nominal.is_some_and(|n| mult.abs_diff(n) > n / NOMINAL_TOLERANCE) {
            return Step::Reject;
        }
        Step::Publish(mult)
    }
}

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
/// the first calibration point (a few clock reads, and on x86_64 one
/// small file and a question to the CPU; at a sampler's build).
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
    use super::calibration::{Point, Step, step};
    use super::*;

    #[test]
    fn ticks_convert_with_the_fixed_point_factor() {
        // 2.5 GHz: 0.4 ns a tick.
        let mult = (4u64 << 32) / 10;
        assert!(to_ns(2_500_000_000, mult).abs_diff(1_000_000_000) <= 1);
        assert_eq!(to_ns(0, mult), 0);
        assert_eq!(to_ns(u64::MAX, u64::MAX), u64::MAX, "saturates");
    }

    /// A 24 MHz counter (Apple's, many arm64 boards'), 1 s apart.
    fn points(slept_between: u64) -> (Point, Point) {
        let start = Point {
            ticks: 5_000_000,
            ns: 7_000_000_000,
            slept_ns: 30_000_000,
        };
        let now = Point {
            ticks: start.ticks + 24_000_000,
            ns: start.ns + 1_000_000_000,
            slept_ns: start.slept_ns + slept_between,
        };
        (start, now)
    }

    const MULT_24MHZ: u64 = ((1_000_000_000u128 << 32) / 24_000_000) as u64;

    #[test]
    fn a_span_long_enough_publishes_its_factor() {
        let (start, now) = points(0);
        let Step::Publish(mult) = step(&start, &now, 1_000_000_000, None) else {
            panic!("a 1 s span publishes");
        };
        assert!(
            mult.abs_diff(MULT_24MHZ) <= 1,
            "{mult} against {MULT_24MHZ}"
        );
        assert!(to_ns(24_000_000, mult).abs_diff(1_000_000_000) <= 1);
        assert_eq!(step(&start, &now, 2_000_000_000, None), Step::Wait);
        assert_eq!(step(&start, &start, 0, None), Step::Wait, "no ticks yet");
    }

    #[test]
    fn a_suspend_inside_the_span_restarts_it() {
        // 40 s asleep: a counter that ticks on through suspend ran 41 s
        // while the awake clock moved 1 s.
        let (start, mut now) = points(40_000_000_000);
        now.ticks += 40 * 24_000_000;
        assert_eq!(step(&start, &now, 1, None), Step::Restart);
        // The noise of reading two clocks is not a suspend.
        let (start, now) = points(20_000);
        assert!(matches!(step(&start, &now, 1, None), Step::Publish(_)));
    }

    #[test]
    fn a_factor_off_the_nominal_rate_or_implausible_is_not_published() {
        let (start, now) = points(0);
        let nominal = Some(MULT_24MHZ);
        assert!(matches!(step(&start, &now, 1, nominal), Step::Publish(_)));
        // NTP's largest slew (500 ppm) still agrees.
        let slewed = Point {
            ns: now.ns + 500_000,
            ..now
        };
        assert!(matches!(
            step(&start, &slewed, 1, nominal),
            Step::Publish(_)
        ));
        // Firmware says 19.2 MHz, the counter runs at 24 MHz.
        let wrong = Some(((1_000_000_000u128 << 32) / 19_200_000) as u64);
        assert_eq!(step(&start, &now, 1, wrong), Step::Reject);
        // 24 ticks in a second: not a counter.
        let slow = Point {
            ticks: start.ticks + 24,
            ..now
        };
        assert_eq!(step(&start, &slow, 1, None), Step::Reject);
    }

    /// Where the counter is used, its calibration agrees with the probes'
    /// OS clock over a later span to 1e-4.
    #[test]
    fn a_calibrated_counter_keeps_time_with_the_os_clock() {
        use std::time::Duration;
        init();
        std::thread::sleep(Duration::from_millis(60));
        calibrate_after(50_000_000);
        if mult() == 0 {
            // No counter used here: probes keep `now_ns`.
            return;
        }
        // (counter, clock) at the closest of five triples: under qemu a
        // clock read is an emulated syscall of a few µs.
        let pair = || {
            (0..5)
                .map(|_| {
                    let (a, ns, b) = (read(), crate::platform::clock::now_ns(), read());
                    (b.wrapping_sub(a), a.wrapping_add(b.wrapping_sub(a) / 2), ns)
                })
                .min()
                .map(|(_, ticks, ns)| (ticks, ns))
                .unwrap_or_default()
        };
        let (t0, n0) = pair();
        std::thread::sleep(Duration::from_millis(300));
        // Refined over the longer span, as every sample does.
        calibrate_after(50_000_000);
        let (t1, n1) = pair();
        let by_ticks = to_ns(t1 - t0, mult()) as f64;
        let by_clock = (n1 - n0) as f64;
        assert!(
            (by_ticks - by_clock).abs() / by_clock < 1e-4,
            "{by_ticks} ns by the counter against {by_clock} ns"
        );
    }
}
