//! Building a [`Sampler`] from a [`SamplerConfig`] and a kernel source.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};

use super::{Inner, Readings, Sampler, State};
use crate::config::{SamplerConfig, config_setters};
use crate::error::Result;
use crate::history::{Encoders, History};
use crate::kernel::KernelSource;
use crate::model::SystemInfo;
use crate::platform;
use crate::probe::ProbeRegistry;

/// Configures and builds a [`Sampler`]: a [`SamplerConfig`] plus what is not
/// plain data (a kernel source).
///
/// ```
/// # use std::time::Duration;
/// let sampler = wakemeter::SamplerBuilder::new()
///     .with_interval(Duration::from_millis(500))
///     .with_history(120)
///     .build()?;
/// let snapshot = sampler.sample_now()?;
/// assert!(!snapshot.threads.is_empty());
/// # Ok::<(), wakemeter::Error>(())
/// ```
#[must_use]
#[derive(Default)]
pub struct SamplerBuilder {
    config: SamplerConfig,
    kernel_source: Option<Box<dyn KernelSource>>,
    process_files_per_sample: bool,
}

impl std::fmt::Debug for SamplerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplerBuilder")
            .field("config", &self.config)
            .field("kernel_source", &self.kernel_source.is_some())
            .field("process_files_per_sample", &self.process_files_per_sample)
            .finish()
    }
}

impl SamplerBuilder {
    /// The defaults of [`SamplerConfig::default`]: 1 s interval, 300
    /// snapshots, this process, switch split every 10th sample.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts from a whole configuration.
    pub fn from_config(config: SamplerConfig) -> Self {
        SamplerBuilder {
            config,
            kernel_source: None,
            process_files_per_sample: false,
        }
    }

    config_setters!(; .config);

    /// Attaches a kernel-side source (e.g. `wakemeter-ebpf`) read with every snapshot.
    pub fn with_kernel_source(mut self, source: Box<dyn KernelSource>) -> Self {
        self.kernel_source = Some(source);
        self
    }

    /// Linux and Android, a sampler of another process: open the
    /// process's task directory, `statm` and `status` for each sample and
    /// close them after it, holding no process-level descriptor between
    /// samples (about four opens a sample more). By default (`false`) they
    /// stay open while every sampler's together fit in an eighth of the
    /// soft `RLIMIT_NOFILE`, and are opened per sample beyond it. Ignored
    /// for [`Target::SelfProcess`](crate::Target::SelfProcess) and on
    /// Apple platforms.
    pub fn with_process_files_per_sample(mut self, per_sample: bool) -> Self {
        self.process_files_per_sample = per_sample;
        self
    }

    /// Validates the configuration and opens the platform backend.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a zero or too-short interval, a zero or
    /// too-large history, a zero split period or a bad thread name;
    /// [`Error::NoSuchProcess`](crate::Error::NoSuchProcess) for a target PID that does not exist;
    /// [`Error::Unreadable`](crate::Error::Unreadable) when `/proc` is missing or unreadable;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a platform without a backend.
    pub fn build(self) -> Result<Sampler> {
        let config = self.config;
        config.validate()?;
        let backend = platform::backend_for(config.target, self.process_files_per_sample)?;
        let identity = platform::identity(config.target);
        // Once per process: may the loop probes use the CPU's counter?
        platform::ticks::init();
        Ok(Sampler {
            inner: Arc::new(Inner {
                system: system_info(),
                identity,
                state: Mutex::new(State {
                    backend,
                    kernel: self.kernel_source,
                    scratch: Vec::new(),
                    encoders: Encoders::default(),
                    dropped_events: 0,
                    kernel_then_backend: false,
                    held_over_budget: None,
                }),
                history: Mutex::new(History::new(
                    config.history as usize,
                    config.history_budget_bytes,
                )),
                config,
                samples_taken: AtomicU64::new(0),
                sampler_cpu_time_ns: AtomicU64::new(0),
                first_monotonic_ns: AtomicU64::new(0),
                run: AtomicU64::new(0),
                next_run: AtomicU64::new(1),
                last_error: Mutex::new(None),
                probes: ProbeRegistry::default(),
                sampler_tid: AtomicU64::new(0),
                stored_lock: Mutex::new(()),
                stored: Condvar::new(),
                readings: Readings::default(),
                severities: Mutex::default(),
                spare_records: Mutex::default(),
                competition: Mutex::default(),
            }),
        })
    }
}

fn system_info() -> SystemInfo {
    SystemInfo {
        total_memory_bytes: platform::total_memory_bytes(),
        cpu_count: platform::cpu_count(),
        os: platform::os_name().to_string(),
    }
}
