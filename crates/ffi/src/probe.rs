//! LoopProbe and SleepProbe objects.
//!
//! The core's probes are single-writer (`&mut self`); here each sits behind
//! an uncontended mutex so Kotlin and Swift can call it from any thread.
//! Hot-path arguments are plain integers (no `Option`, no records): an
//! `Option` would be serialized into a heap buffer on every call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::WakemeterError;
use crate::records::Log2Histogram;
use crate::sampler::lock;

/// Cumulative counters of one instrumented loop (see [`wakemeter::LoopStats`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, uniffi::Record)]
pub struct LoopStats {
    /// Probe id, unique within its sampler.
    pub id: u64,
    /// Name given when the probe was created.
    pub name: String,
    /// OS id of the thread that last waited; `None` before the first wait.
    pub tid: Option<u64>,
    /// Returns from the wait.
    pub total_wakeups: u64,
    /// Wakeups that reported 0 ready events.
    pub total_idle_wakeups: u64,
    /// Wakeups after a finite timeout fully elapsed.
    pub total_timed_out_wakeups: u64,
    /// Wakeups before a finite timeout elapsed.
    pub total_early_wakeups: u64,
    /// Waits with a zero timeout (busy polling).
    pub total_zero_timeout_waits: u64,
    /// Sum of ready-event counts.
    pub total_events: u64,
    /// Time inside waits, in nanoseconds.
    pub total_wait_ns: u64,
    /// Time between waits (the loop working), in nanoseconds.
    pub total_busy_ns: u64,
    /// Sum of how late timed-out waits returned, in nanoseconds.
    pub total_poll_delay_ns: u64,
    /// Poll delay of each timed-out wakeup, in nanoseconds.
    pub poll_delay_histogram: Log2Histogram,
    /// Calls out of order (ignored and counted).
    pub total_unmatched_calls: u64,
    /// Length of the wait in progress, in nanoseconds (0 when not waiting).
    pub current_wait_ns: u64,
}

impl From<&wakemeter::LoopStats> for LoopStats {
    fn from(s: &wakemeter::LoopStats) -> Self {
        LoopStats {
            id: s.id,
            name: s.name.clone(),
            tid: s.tid,
            total_wakeups: s.total_wakeups,
            total_idle_wakeups: s.total_idle_wakeups,
            total_timed_out_wakeups: s.total_timed_out_wakeups,
            total_early_wakeups: s.total_early_wakeups,
            total_zero_timeout_waits: s.total_zero_timeout_waits,
            total_events: s.total_events,
            total_wait_ns: s.total_wait_ns,
            total_busy_ns: s.total_busy_ns,
            total_poll_delay_ns: s.total_poll_delay_ns,
            poll_delay_histogram: (&s.poll_delay_histogram).into(),
            total_unmatched_calls: s.total_unmatched_calls,
            current_wait_ns: s.current_wait_ns,
        }
    }
}

/// Cumulative counters of one instrumented sleep site (see [`wakemeter::SleepStats`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, uniffi::Record)]
pub struct SleepStats {
    /// Probe id, unique within its sampler.
    pub id: u64,
    /// Name given when the probe was created.
    pub name: String,
    /// OS id of the thread that last slept; `None` before the first sleep.
    pub tid: Option<u64>,
    /// Completed sleeps.
    pub total_calls: u64,
    /// Sum of requested durations, in nanoseconds.
    pub total_requested_ns: u64,
    /// Sum of actual durations, in nanoseconds.
    pub total_actual_ns: u64,
    /// CPU time consumed inside the sleep calls, in nanoseconds.
    pub total_cpu_ns: u64,
    /// Sum of oversleep (actual − requested), in nanoseconds.
    pub total_oversleep_ns: u64,
    /// Oversleep of each call, in nanoseconds.
    pub oversleep_histogram: Log2Histogram,
    /// `end` without `begin` (ignored and counted).
    pub total_unmatched_calls: u64,
}

impl From<&wakemeter::SleepStats> for SleepStats {
    fn from(s: &wakemeter::SleepStats) -> Self {
        SleepStats {
            id: s.id,
            name: s.name.clone(),
            tid: s.tid,
            total_calls: s.total_calls,
            total_requested_ns: s.total_requested_ns,
            total_actual_ns: s.total_actual_ns,
            total_cpu_ns: s.total_cpu_ns,
            total_oversleep_ns: s.total_oversleep_ns,
            oversleep_histogram: (&s.oversleep_histogram).into(),
            total_unmatched_calls: s.total_unmatched_calls,
        }
    }
}

/// Whether the sampler that created a probe is still alive; shared by the
/// sampler and its probes, cleared by `shutdown()` and when the sampler is released.
pub(crate) type Alive = Arc<AtomicBool>;

/// Instruments one event loop: call `before_wait` right before the loop
/// blocks (poll, epoll_wait, kevent, a park) and `after_wait` right after.
///
/// Created by `Sampler.loop_probe(name)`; its counters appear in every
/// snapshot of that sampler. Release it (Kotlin `close()`/`use`, Swift
/// deinit) when the loop ends. Calls fail with `SamplerGone` once the
/// sampler is shut down or released.
#[derive(uniffi::Object)]
pub struct LoopProbe {
    probe: Mutex<wakemeter::LoopProbe>,
    alive: Alive,
    id: u64,
    name: String,
}

impl std::fmt::Debug for LoopProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopProbe")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LoopProbe {
    pub(crate) fn new(probe: wakemeter::LoopProbe, name: String, alive: Alive) -> Self {
        LoopProbe {
            id: probe.id(),
            probe: Mutex::new(probe),
            alive,
            name,
        }
    }

    #[inline]
    fn check(&self) -> Result<(), WakemeterError> {
        if self.alive.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(WakemeterError::SamplerGone)
        }
    }
}

/// `timeout_ns` as the core's timeout: negative means "no timeout", as in `poll(2)`.
fn timeout(timeout_ns: i64) -> Option<Duration> {
    u64::try_from(timeout_ns).ok().map(Duration::from_nanos)
}

#[uniffi::export]
impl LoopProbe {
    /// The loop is about to wait with this timeout, in nanoseconds:
    /// negative = no timeout (block until an event, like `poll(…, -1)`),
    /// 0 = a non-blocking poll.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn before_wait(&self, timeout_ns: i64) -> Result<(), WakemeterError> {
        self.check()?;
        lock(&self.probe).before_wait(timeout(timeout_ns));
        Ok(())
    }

    /// The wait returned with `events` ready events (0: timed out or woke for nothing).
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn after_wait(&self, events: u32) -> Result<(), WakemeterError> {
        self.check()?;
        lock(&self.probe).after_wait(events as usize);
        Ok(())
    }

    /// For the Kotlin layer's fast path only (Swift does not need it): a new
    /// strong reference to this probe as an opaque number, for the plain C
    /// functions `wakemeter_loop_probe_*`. It must be released exactly
    /// once with `wakemeter_loop_probe_release`.
    pub fn raw_handle(self: Arc<Self>) -> u64 {
        crate::fast::into_handle(self)
    }

    /// The probe's id (matches `LoopStats.id` in snapshots).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name the probe was created with.
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// The probe's current cumulative counters.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn stats(&self) -> Result<LoopStats, WakemeterError> {
        self.check()?;
        Ok((&lock(&self.probe).stats()).into())
    }
}

/// Instruments a sleep-and-check loop: `sleep(ns)` sleeps and records, or
/// wrap your own sleep in `begin(ns)` / `end()`.
///
/// Created by `Sampler.sleep_probe(name)`. Calls fail with `SamplerGone`
/// once the sampler is shut down or released.
#[derive(uniffi::Object)]
pub struct SleepProbe {
    probe: Mutex<wakemeter::SleepProbe>,
    alive: Alive,
    id: u64,
    name: String,
}

impl std::fmt::Debug for SleepProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SleepProbe")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SleepProbe {
    pub(crate) fn new(probe: wakemeter::SleepProbe, name: String, alive: Alive) -> Self {
        SleepProbe {
            id: probe.id(),
            probe: Mutex::new(probe),
            alive,
            name,
        }
    }

    #[inline]
    fn check(&self) -> Result<(), WakemeterError> {
        if self.alive.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(WakemeterError::SamplerGone)
        }
    }
}

#[uniffi::export]
impl SleepProbe {
    /// A sleep of `requested_ns` nanoseconds is about to start.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn begin(&self, requested_ns: u64) -> Result<(), WakemeterError> {
        self.check()?;
        lock(&self.probe).begin(Duration::from_nanos(requested_ns));
        Ok(())
    }

    /// The sleep started by `begin` returned.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn end(&self) -> Result<(), WakemeterError> {
        self.check()?;
        lock(&self.probe).end();
        Ok(())
    }

    /// Sleeps the calling thread for `requested_ns` nanoseconds (with the
    /// standard library's sleep) and records it.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn sleep(&self, requested_ns: u64) -> Result<(), WakemeterError> {
        let requested = Duration::from_nanos(requested_ns);
        self.check()?;
        lock(&self.probe).begin(requested);
        // The lock is not held while sleeping, so `stats()` never waits for a sleep.
        std::thread::sleep(requested);
        lock(&self.probe).end();
        Ok(())
    }

    /// For the Kotlin layer's fast path only (Swift does not need it): a new
    /// strong reference to this probe as an opaque number, for the plain C
    /// functions `wakemeter_sleep_probe_*`. It must be released exactly
    /// once with `wakemeter_sleep_probe_release`.
    pub fn raw_handle(self: Arc<Self>) -> u64 {
        crate::fast::into_handle(self)
    }

    /// The probe's id (matches `SleepStats.id` in snapshots).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name the probe was created with.
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// The probe's current cumulative counters.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn stats(&self) -> Result<SleepStats, WakemeterError> {
        self.check()?;
        Ok((&lock(&self.probe).stats()).into())
    }
}
