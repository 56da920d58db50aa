//! Event-loop instrumentation.

use std::sync::Arc;
use std::time::Duration;

use super::cells::{Counter, Histogram};
use crate::model::{LoopKind, LoopStats};
use crate::platform::clock::{current_tid, duration_ns, now_ns};
use crate::platform::ticks;

/// Counters of one loop, shared with the sampler.
#[derive(Debug, Default)]
pub(crate) struct LoopCells {
    pub id: u64,
    pub name: String,
    pub kind: LoopKind,
    pub tid: Counter,
    pub wakeups: Counter,
    pub idle_wakeups: Counter,
    pub timed_out_wakeups: Counter,
    pub early_wakeups: Counter,
    pub zero_timeout_waits: Counter,
    pub events: Counter,
    pub wait_ns: Counter,
    pub busy_ns: Counter,
    pub poll_delay_ns: Counter,
    pub poll_delay: Histogram,
    pub unmatched_calls: Counter,
    /// Probe-clock time the current wait started: ns plus one, or counter
    /// ticks with [`TICKS_MARK`] set; 0 when not waiting.
    pub wait_started: Counter,
}

impl LoopCells {
    pub(crate) fn read(&self) -> LoopStats {
        let started = self.wait_started.get();
        let tid = self.tid.get();
        LoopStats {
            id: self.id,
            name: self.name.clone(),
            kind: self.kind,
            tid: (tid != 0).then_some(tid),
            total_wakeups: self.wakeups.get(),
            total_idle_wakeups: self.idle_wakeups.get(),
            total_timed_out_wakeups: self.timed_out_wakeups.get(),
            total_early_wakeups: self.early_wakeups.get(),
            total_zero_timeout_waits: self.zero_timeout_waits.get(),
            total_events: self.events.get(),
            total_wait_ns: self.wait_ns.get(),
            total_busy_ns: self.busy_ns.get(),
            total_poll_delay_ns: self.poll_delay_ns.get(),
            poll_delay_histogram: self.poll_delay.read(),
            total_unmatched_calls: self.unmatched_calls.get(),
            current_wait_ns: match started {
                0 => 0,
                s if s & TICKS_MARK != 0 => {
                    ticks::to_ns(ticks::read().saturating_sub(s & !TICKS_MARK), ticks::mult())
                }
                s => now_ns().saturating_sub(s - 1),
            },
        }
    }
}

/// Instruments one event loop. Call [`LoopProbe::before_wait`] right before
/// the loop blocks (poll/epoll_wait/kevent, with the timeout it passes) and
/// [`LoopProbe::after_wait`] right after (with the number of ready events).
///
/// ```
/// # use std::time::Duration;
/// let sampler = wakemeter::Sampler::new()?;
/// let mut probe = sampler.loop_probe("io-loop")?;
/// for _ in 0..3 {
///     probe.before_wait(Some(Duration::from_millis(1)));
///     std::thread::sleep(Duration::from_millis(1)); // stands in for poll()
///     probe.after_wait(0);
/// }
/// assert_eq!(sampler.sample_now()?.loops[0].total_wakeups, 3);
/// # Ok::<(), wakemeter::Error>(())
/// ```
///
/// One probe per loop: the `&mut self` methods make it single-writer. A
/// probe may move between threads (its `tid` follows the last waiter). It
/// keeps working after its sampler is dropped; nobody reads it then.
#[derive(Debug)]
pub struct LoopProbe {
    cells: Arc<LoopCells>,
    waiting: bool,
    /// Whether `wait_start` and `last_wake` are counter ticks
    /// ([`ticks`], once calibrated) rather than ns of `now_ns`.
    ticks: bool,
    wait_start: u64,
    timeout_ns: Option<u64>,
    last_wake: Option<u64>,
}

/// Marks a `wait_started` cell holding counter ticks rather than ns + 1
/// (the counter stays below 2^63 for a century at 3 GHz).
const TICKS_MARK: u64 = 1 << 63;

impl LoopProbe {
    pub(crate) fn new(cells: Arc<LoopCells>) -> Self {
        LoopProbe {
            cells,
            waiting: false,
            ticks: false,
            wait_start: 0,
            timeout_ns: None,
            last_wake: None,
        }
    }

    /// The loop is about to wait. `timeout`: what it passes to the wait
    /// (`None` = block until an event; `Duration::ZERO` = non-blocking poll;
    /// `Duration::MAX` behaves as "no timeout" in practice, it never elapses).
    #[inline]
    pub fn before_wait(&mut self, timeout: Option<Duration>) {
        let mult = ticks::mult();
        if mult != 0 && !self.ticks && !self.waiting {
            self.switch_to_ticks();
        }
        let now = self.now();
        let c = &*self.cells;
        if self.waiting {
            // The previous wait never reported back: drop it.
            c.unmatched_calls.add(1);
        } else if let Some(w) = self.last_wake {
            c.busy_ns.add(self.span_ns(w, now, mult));
        }
        let timeout_ns = timeout.map(duration_ns);
        if timeout_ns == Some(0) {
            c.zero_timeout_waits.add(1);
        }
        // A load, and a store only when the loop moved to another thread.
        let tid = current_tid();
        if c.tid.get() != tid {
            c.tid.set(tid);
        }
        c.wait_started.set(if self.ticks {
            now | TICKS_MARK
        } else {
            now.saturating_add(1)
        });
        self.timeout_ns = timeout_ns;
        self.wait_start = now;
        self.waiting = true;
    }

    /// The wait returned with `events` ready events (0: timed out or woke
    /// for nothing). Counts saturate; an absurd count cannot overflow.
    #[inline]
    pub fn after_wait(&mut self, events: usize) {
        let now = self.now();
        let c = &*self.cells;
        if !self.waiting {
            c.unmatched_calls.add(1);
            return;
        }
        self.waiting = false;
        let waited = self.span_ns(self.wait_start, now, ticks::mult());
        c.wakeups.add(1);
        c.wait_ns.add(waited);
        if events == 0 {
            c.idle_wakeups.add(1);
        } else {
            c.events.add(events as u64);
        }
        if let Some(t) = self.timeout_ns {
            if waited >= t {
                let delay = waited - t;
                c.timed_out_wakeups.add(1);
                c.poll_delay_ns.add(delay);
                c.poll_delay.record(delay);
            } else {
                c.early_wakeups.add(1);
            }
        }
        c.wait_started.set(0);
        self.last_wake = Some(now);
    }

    /// The probe's clock: counter ticks once switched, else ns.
    #[inline]
    fn now(&self) -> u64 {
        if self.ticks { ticks::read() } else { now_ns() }
    }

    /// The ns from `from` to `to`, two readings of [`Self::now`]; `mult`
    /// is the counter's factor (not 0 when the probe reads ticks).
    #[inline]
    fn span_ns(&self, from: u64, to: u64, mult: u64) -> u64 {
        let d = to.saturating_sub(from);
        if self.ticks { ticks::to_ns(d, mult) } else { d }
    }

    /// Moves the probe to the calibrated counter, between a wake and the
    /// next wait, once per probe: the busy time so far is counted on the
    /// old clock, every later reading is in ticks.
    #[cold]
    #[inline(never)]
    fn switch_to_ticks(&mut self) {
        if let Some(w) = self.last_wake.take() {
            self.cells.busy_ns.add(now_ns().saturating_sub(w));
        }
        self.ticks = true;
    }

    /// Guard form: `let g = probe.wait(timeout); let n = poll(..); g.done(n);`.
    /// A guard dropped without [`WaitGuard::done`] counts as a wakeup with 0 events.
    pub fn wait(&mut self, timeout: Option<Duration>) -> WaitGuard<'_> {
        self.before_wait(timeout);
        WaitGuard {
            probe: self,
            finished: false,
        }
    }

    /// The probe's id (matches [`LoopStats::id`]).
    pub fn id(&self) -> u64 {
        self.cells.id
    }

    /// The current cumulative counters of this probe.
    pub fn stats(&self) -> LoopStats {
        self.cells.read()
    }
}

/// A wait in progress; see [`LoopProbe::wait`].
#[derive(Debug)]
#[must_use = "call done(events) when the wait returns"]
pub struct WaitGuard<'a> {
    probe: &'a mut LoopProbe,
    finished: bool,
}

impl WaitGuard<'_> {
    /// The wait returned with `events` ready events.
    pub fn done(mut self, events: usize) {
        self.finished = true;
        self.probe.after_wait(events);
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.probe.after_wait(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// A calibrated counter clock, or None where it is not used (then
    /// probes read `now_ns`, which the integration tests cover). On
    /// x86_64 Linux whose kernel clocksource is an invariant TSC, and on
    /// aarch64 Linux, it must be used (unless `WAKEMETER_PROBE_CLOCK=os`).
    fn counter() -> Option<u64> {
        ticks::init();
        std::thread::sleep(Duration::from_millis(60));
        ticks::calibrate_after(50_000_000);
        let mult = Some(ticks::mult()).filter(|&m| m != 0);
        let tsc = wakemeter_procfs::system::clocksource().is_ok_and(|s| s == "tsc")
            && wakemeter_procfs::system::cpuinfo()
                .is_ok_and(|c| c.contains(" constant_tsc") && c.contains(" nonstop_tsc"));
        let forced_os = std::env::var_os("WAKEMETER_PROBE_CLOCK").is_some_and(|v| v == "os");
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) && tsc && !forced_os {
            assert!(
                mult.is_some(),
                "the kernel trusts the TSC: so do the probes"
            );
        }
        // The architecture's system counter, always readable on Linux:
        // used there (under qemu-user too, which emulates it).
        if cfg!(all(
            any(target_os = "linux", target_os = "android"),
            target_arch = "aarch64"
        )) && !forced_os
        {
            assert!(mult.is_some(), "CNTVCT_EL0 is the probes' clock on arm64");
        }
        mult
    }

    /// On the counter clock, waits nest inside an independent clock (to
    /// the calibration's error), poll delay is still wait minus timeout
    /// exactly, and a wait in progress shows in `current_wait_ns`.
    #[test]
    fn on_the_counter_clock_waits_match_an_independent_clock() {
        if counter().is_none() {
            return;
        }
        let mut p = LoopProbe::new(Arc::new(LoopCells::default()));
        let mut outer = Duration::ZERO;
        for _ in 0..40 {
            let t0 = Instant::now();
            p.before_wait(Some(Duration::from_millis(1)));
            std::thread::sleep(Duration::from_millis(1));
            p.after_wait(0);
            outer += t0.elapsed();
        }
        assert!(p.ticks, "a calibrated counter is used");
        let s = p.stats();
        assert_eq!(s.total_wakeups, 40);
        assert_eq!(s.total_timed_out_wakeups, 40, "a sleep never ends early");
        assert!(s.total_wait_ns >= 40_000_000);
        let outer = outer.as_nanos() as u64;
        // 1e-5 of the span: ten times the worst calibration error over
        // the 50 ms this test calibrates on.
        assert!(
            s.total_wait_ns <= outer + outer / 100_000,
            "{} ns waited by the probe, {outer} ns around it",
            s.total_wait_ns
        );
        assert_eq!(s.total_poll_delay_ns, s.total_wait_ns - 40 * 1_000_000);

        p.before_wait(None);
        std::thread::sleep(Duration::from_millis(5));
        let current = p.stats().current_wait_ns;
        p.after_wait(1);
        assert!(
            (5_000_000..1_000_000_000).contains(&current),
            "{current} ns into a 5 ms wait"
        );
        assert_eq!(p.stats().current_wait_ns, 0);
    }

    /// A probe that started on `now_ns` moves to the counter between a
    /// wake and the next wait, counting the busy time on the old clock.
    #[test]
    fn a_probe_moves_to_the_counter_without_losing_busy_time() {
        if counter().is_none() {
            return;
        }
        let mut p = LoopProbe::new(Arc::new(LoopCells::default()));
        // As if its last wait ended 3 ms ago on the old clock.
        p.last_wake = Some(now_ns() - 3_000_000);
        p.before_wait(Some(Duration::ZERO));
        p.after_wait(0);
        assert!(p.ticks);
        let busy = p.stats().total_busy_ns;
        assert!((3_000_000..1_000_000_000).contains(&busy), "{busy} ns busy");
        std::thread::sleep(Duration::from_millis(2));
        p.before_wait(Some(Duration::ZERO));
        p.after_wait(0);
        let more = p.stats().total_busy_ns - busy;
        assert!((2_000_000..1_000_000_000).contains(&more), "{more} ns busy");
    }
}
