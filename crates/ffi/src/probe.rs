//! LoopProbe and SleepProbe objects.
//!
//! The core's probes are single-writer (`&mut self`); here each sits behind
//! an uncontended mutex so Kotlin and Swift can call it from any thread.
//! Hot-path arguments are plain integers (no `Option`, no records): an
//! `Option` would be serialized into a heap buffer on every call.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use wakemeter::{LoopStats, SleepStats};

use crate::error::WakemeterError;
use crate::handle::{Kind, into_handle};
use wakemeter::sync::lock;

/// Whether the sampler that created a probe is still alive; shared by the
/// sampler and its probes, cleared by `shutdown()` and when the sampler is released.
pub(crate) type Alive = Arc<AtomicBool>;

/// What either exported probe holds: the core's probe behind its mutex,
/// the sampler's liveness, and the id and name the probe was created with.
struct Shared<P> {
    probe: Mutex<P>,
    alive: Alive,
    id: u64,
    name: String,
}

impl<P> Shared<P> {
    fn new(probe: P, id: u64, name: String, alive: Alive) -> Self {
        Shared {
            probe: Mutex::new(probe),
            alive,
            id,
            name,
        }
    }

    /// The core's probe, once the sampler is known to be alive.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    #[inline]
    fn checked(&self) -> Result<MutexGuard<'_, P>, WakemeterError> {
        if self.alive.load(Ordering::Acquire) {
            Ok(lock(&self.probe))
        } else {
            Err(WakemeterError::SamplerGone)
        }
    }

    fn debug(&self, f: &mut fmt::Formatter<'_>, type_name: &str) -> fmt::Result {
        f.debug_struct(type_name)
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Instruments one event loop: call `before_wait` right before the loop
/// blocks (poll, epoll_wait, kevent, a park) and `after_wait` right after.
///
/// Created by `Sampler.loop_probe(name)`; its counters appear in every
/// snapshot of that sampler. Release it (Kotlin `close()`/`use`, Swift
/// deinit) when the loop ends. Calls fail with `SamplerGone` once the
/// sampler is shut down or released.
#[derive(uniffi::Object)]
pub struct LoopProbe {
    shared: Shared<wakemeter::LoopProbe>,
}

impl fmt::Debug for LoopProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.debug(f, "LoopProbe")
    }
}

impl LoopProbe {
    pub(crate) fn new(probe: wakemeter::LoopProbe, name: String, alive: Alive) -> Self {
        let id = probe.id();
        LoopProbe {
            shared: Shared::new(probe, id, name, alive),
        }
    }
}

impl Kind for LoopProbe {
    const TAG: u32 = u32::from_be_bytes(*b"jLoo");
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
        self.shared.checked()?.before_wait(timeout(timeout_ns));
        Ok(())
    }

    /// The wait returned with `events` ready events (0: timed out or woke for nothing).
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn after_wait(&self, events: u32) -> Result<(), WakemeterError> {
        self.shared.checked()?.after_wait(events as usize);
        Ok(())
    }

    /// For the Kotlin layer's fast path only (Swift does not need it): a new
    /// strong reference to this probe as an opaque number, for the plain C
    /// functions `wakemeter_loop_probe_*`. It must be released exactly
    /// once with `wakemeter_loop_probe_release`.
    pub fn raw_handle(self: Arc<Self>) -> u64 {
        into_handle(self)
    }

    /// The probe's id (matches `LoopStats.id` in snapshots).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The name the probe was created with.
    pub fn name(&self) -> String {
        self.shared.name.clone()
    }

    /// The probe's current cumulative counters.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn stats(&self) -> Result<LoopStats, WakemeterError> {
        Ok(self.shared.checked()?.stats())
    }
}

/// Instruments a sleep-and-check loop: `sleep(ns)` sleeps and records, or
/// wrap your own sleep in `begin(ns)` / `end()`.
///
/// Created by `Sampler.sleep_probe(name)`. Calls fail with `SamplerGone`
/// once the sampler is shut down or released.
#[derive(uniffi::Object)]
pub struct SleepProbe {
    shared: Shared<wakemeter::SleepProbe>,
}

impl fmt::Debug for SleepProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.debug(f, "SleepProbe")
    }
}

impl SleepProbe {
    pub(crate) fn new(probe: wakemeter::SleepProbe, name: String, alive: Alive) -> Self {
        let id = probe.id();
        SleepProbe {
            shared: Shared::new(probe, id, name, alive),
        }
    }
}

impl Kind for SleepProbe {
    const TAG: u32 = u32::from_be_bytes(*b"jSlp");
}

#[uniffi::export]
impl SleepProbe {
    /// A sleep of `requested_ns` nanoseconds is about to start.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn begin(&self, requested_ns: u64) -> Result<(), WakemeterError> {
        self.shared
            .checked()?
            .begin(Duration::from_nanos(requested_ns));
        Ok(())
    }

    /// The sleep started by `begin` returned.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn end(&self) -> Result<(), WakemeterError> {
        self.shared.checked()?.end();
        Ok(())
    }

    /// Sleeps the calling thread for `requested_ns` nanoseconds (with the
    /// standard library's sleep) and records it.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn sleep(&self, requested_ns: u64) -> Result<(), WakemeterError> {
        let requested = Duration::from_nanos(requested_ns);
        self.shared.checked()?.begin(requested);
        // The lock is not held while sleeping, so `stats()` never waits for a sleep.
        std::thread::sleep(requested);
        lock(&self.shared.probe).end();
        Ok(())
    }

    /// For the Kotlin layer's fast path only (Swift does not need it): a new
    /// strong reference to this probe as an opaque number, for the plain C
    /// functions `wakemeter_sleep_probe_*`. It must be released exactly
    /// once with `wakemeter_sleep_probe_release`.
    pub fn raw_handle(self: Arc<Self>) -> u64 {
        into_handle(self)
    }

    /// The probe's id (matches `SleepStats.id` in snapshots).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The name the probe was created with.
    pub fn name(&self) -> String {
        self.shared.name.clone()
    }

    /// The probe's current cumulative counters.
    ///
    /// # Errors
    /// `SamplerGone` once the sampler is shut down or released.
    pub fn stats(&self) -> Result<SleepStats, WakemeterError> {
        Ok(self.shared.checked()?.stats())
    }
}
