//! The exported sampler object and its configuration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wakemeter::{
    Finding, Interval, Report, SamplerConfig, SamplerStats, Snapshot, SystemInfo, Thresholds,
};

use crate::error::WakemeterError;
use crate::handle::{Kind, into_handle};
use crate::listener::{Dispatcher, ListenerStats, Listeners, SamplerListener};
use crate::perfetto::PerfettoTrace;
use crate::probe::{Alive, LoopProbe, SleepProbe};
use wakemeter::sync::lock;

/// Background sampling in progress: the core's guard and the listener dispatcher.
struct Running {
    guard: wakemeter::SamplingGuard,
    dispatcher: Dispatcher,
}

/// Samples this process's (or another process's) threads.
///
/// Safe to use from any thread. `start()` samples in the background until
/// `stop()`; `shutdown()` (or releasing the object: Kotlin `close()`/`use`,
/// Swift deinit) stops everything and frees the history. After `shutdown()`
/// every call fails with `Closed`.
#[derive(uniffi::Object)]
pub struct Sampler {
    config: SamplerConfig,
    system: SystemInfo,
    core: Mutex<Option<wakemeter::Sampler>>,
    running: Mutex<Option<Running>>,
    listeners: Arc<Listeners>,
    /// Cleared on shutdown and release; the probes check it.
    alive: Alive,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Kind for Sampler {
    const TAG: u32 = u32::from_be_bytes(*b"jSmp");
}

impl Sampler {
    /// The core sampler, or `Closed` after shutdown (a cheap `Arc` clone).
    fn core(&self) -> Result<wakemeter::Sampler, WakemeterError> {
        lock(&self.core).clone().ok_or(WakemeterError::Closed)
    }

    /// Stops background sampling and the dispatcher, if running.
    fn stop_running(&self) {
        let running = lock(&self.running).take();
        if let Some(Running { guard, dispatcher }) = running {
            // Ending the run wakes the dispatcher from its wait for a sample.
            dispatcher.signal_stop();
            guard.stop();
            dispatcher.join();
        }
    }
}

#[uniffi::export]
impl Sampler {
    /// Builds a sampler; nothing is sampled until `start()` or `sample_now()`.
    ///
    /// # Errors
    /// `InvalidConfig` for a zero interval, a zero or huge history, a zero
    /// split period or a bad thread name; `NoSuchProcess` for an unknown
    /// `pid`; `Unreadable`/`Unsupported` when the platform cannot be sampled.
    #[uniffi::constructor]
    pub fn new(config: SamplerConfig) -> Result<Arc<Self>, WakemeterError> {
        let core = wakemeter::SamplerBuilder::from_config(config.clone()).build()?;
        Ok(Arc::new(Sampler {
            system: core.system().clone(),
            config,
            core: Mutex::new(Some(core)),
            running: Mutex::new(None),
            listeners: Arc::new(Listeners::default()),
            alive: Arc::new(AtomicBool::new(true)),
        }))
    }

    /// The configuration the sampler was built with.
    pub fn config(&self) -> SamplerConfig {
        self.config.clone()
    }

    /// Facts about the machine, read once when the sampler was built.
    pub fn system(&self) -> SystemInfo {
        self.system.clone()
    }

    /// Starts sampling in the background, one sample every
    /// `SamplerConfig.interval` (the sampling period the sampler was built
    /// with); listeners are called after each sample, on a wakemeter thread.
    ///
    /// # Errors
    /// `AlreadyRunning` if started twice; `Closed` after `shutdown()`;
    /// `Spawn` if a thread cannot be created.
    pub fn start(&self) -> Result<(), WakemeterError> {
        let core = self.core()?;
        let mut running = lock(&self.running);
        if running.is_some() {
            return Err(WakemeterError::AlreadyRunning);
        }
        let guard = core.start()?;
        let dispatcher = Dispatcher::spawn(core, self.listeners.clone())?;
        *running = Some(Running { guard, dispatcher });
        Ok(())
    }

    /// Starts writing a Perfetto trace of this sampler's process to `path`
    /// (created or truncated now; at most `max_bytes`, at least 64 KiB):
    /// per-thread CPU, switches and run-queue wait, loop and sleep probes,
    /// RSS, and findings as slices, one interval per sample from the next
    /// one on. Open it at ui.perfetto.dev or in Android Studio.
    ///
    /// # Errors
    /// `Unwritable` when the file cannot be created (nothing is sampled
    /// for it); `InvalidConfig` for a `max_bytes` under the minimum;
    /// `Closed` after `shutdown()`; `Spawn`.
    pub fn start_perfetto_trace(
        &self,
        path: String,
        max_bytes: u64,
    ) -> Result<Arc<PerfettoTrace>, WakemeterError> {
        PerfettoTrace::start(&self.core()?, path, max_bytes)
    }

    /// Stops background sampling (history is kept; `start()` resumes).
    /// Does nothing when not running.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn stop(&self) -> Result<(), WakemeterError> {
        self.core()?;
        self.stop_running();
        Ok(())
    }

    /// For the Kotlin layer's fast path only (Swift does not need it): a new
    /// strong reference to this sampler as an opaque number, for the plain C
    /// functions `wakemeter_sampler_*`. It must be released exactly once
    /// with `wakemeter_sampler_release`.
    pub fn raw_handle(self: Arc<Self>) -> u64 {
        into_handle(self)
    }

    /// Whether background sampling is running.
    pub fn is_running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Stops sampling, drops every listener and frees the history. Every
    /// later call fails with `Closed`. Calling it again does nothing.
    pub fn shutdown(&self) {
        self.alive.store(false, Ordering::Release);
        self.stop_running();
        self.listeners.clear();
        lock(&self.core).take();
    }

    /// Whether `shutdown()` was called.
    pub fn is_shut_down(&self) -> bool {
        lock(&self.core).is_none()
    }

    /// Takes a snapshot now, stores it in history and returns it.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`; `NoSuchProcess` once the target exited;
    /// `Unreadable` when the process-level sources cannot be read.
    pub fn sample_now(&self) -> Result<Snapshot, WakemeterError> {
        Ok(self.core()?.sample_now()?)
    }

    /// The newest snapshot, if any.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn latest(&self) -> Result<Option<Snapshot>, WakemeterError> {
        Ok(self.core()?.latest())
    }

    /// Every snapshot in history, oldest first.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn snapshots(&self) -> Result<Vec<Snapshot>, WakemeterError> {
        Ok(self.core()?.snapshots())
    }

    /// The interval between the two newest snapshots; `None` with fewer than two.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn latest_interval(&self) -> Result<Option<Interval>, WakemeterError> {
        Ok(self.core()?.latest_interval())
    }

    /// The interval from the snapshot taken nearest to `window` before the
    /// newest one to the newest one (at least the last two snapshots); `None` with
    /// fewer than two snapshots.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn interval_over(&self, window: Duration) -> Result<Option<Interval>, WakemeterError> {
        Ok(self.core()?.interval_over(window))
    }

    /// Counters about the sampler itself, including its own CPU overhead.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn stats(&self) -> Result<SamplerStats, WakemeterError> {
        Ok(self.core()?.stats())
    }

    /// A new loop probe whose counters appear in this sampler's snapshots,
    /// intervals and findings. One probe per loop.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`; `InvalidConfig` when too many probes are alive.
    pub fn loop_probe(&self, name: String) -> Result<Arc<LoopProbe>, WakemeterError> {
        let probe = self.core()?.loop_probe(&name)?;
        Ok(Arc::new(LoopProbe::new(probe, name, self.alive.clone())))
    }

    /// A new sleep probe whose counters appear in this sampler's snapshots,
    /// intervals and findings. One probe per sleep site.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`; `InvalidConfig` when too many probes are alive.
    pub fn sleep_probe(&self, name: String) -> Result<Arc<SleepProbe>, WakemeterError> {
        let probe = self.core()?.sleep_probe(&name)?;
        Ok(Arc::new(SleepProbe::new(probe, name, self.alive.clone())))
    }

    /// Findings over the history with the configured thresholds, most severe first.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn findings(&self) -> Result<Vec<Finding>, WakemeterError> {
        Ok(self.core()?.findings())
    }

    /// Findings over the history with other thresholds.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`; `InvalidConfig` when a threshold is out of range.
    pub fn findings_with(&self, thresholds: Thresholds) -> Result<Vec<Finding>, WakemeterError> {
        Ok(self.core()?.findings_with(&thresholds)?)
    }

    /// The thresholds the sampler was built with.
    pub fn thresholds(&self) -> Thresholds {
        self.config.thresholds.clone()
    }

    /// What the sampler measured and concluded: system, sampler stats, the
    /// interval over the findings window, and the findings.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn report(&self) -> Result<Report, WakemeterError> {
        Ok(self.core()?.report())
    }

    /// [`Sampler::report`] as JSON, exactly as the core serializes it (field
    /// names are the Rust snake_case names, as in every wakemeter JSON).
    ///
    /// # Errors
    /// `Closed` after `shutdown()`; `Serialization` if encoding fails.
    pub fn report_json(&self) -> Result<String, WakemeterError> {
        Ok(serde_json::to_string(&self.core()?.report())?)
    }

    /// Registers a listener called after every background sample (on a
    /// wakemeter thread, never on the caller's); returns an id for
    /// `remove_listener`. An exception thrown by the listener is counted in
    /// `listener_stats()` and does not stop sampling or delivery.
    ///
    /// # Errors
    /// `Closed` after `shutdown()`.
    pub fn add_listener(&self, listener: Arc<dyn SamplerListener>) -> Result<u64, WakemeterError> {
        self.core()?;
        Ok(self.listeners.add(listener))
    }

    /// Unregisters a listener; `false` if the id was not registered. The
    /// listener may still receive a call already in progress.
    pub fn remove_listener(&self, id: u64) -> bool {
        self.listeners.remove(id)
    }

    /// Counters of listener delivery: calls made and listener failures.
    pub fn listener_stats(&self) -> ListenerStats {
        self.listeners.stats()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Release);
        self.stop_running();
    }
}
