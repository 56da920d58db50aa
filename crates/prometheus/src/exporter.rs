//! The exporter: adds up every stored interval of a sampler into grouped
//! counters, and keeps the exposition text of the latest update ready for
//! scrapes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::registry::Registry;
use wakemeter::sync::lock;
use wakemeter::{SampleWait, Sampler};

use crate::encode::Exposed;
use crate::error::Error;
use crate::state::{ExporterConfig, HttpCounters, State};
use crate::text;

/// The processes followed, by PID (at most one without
/// [`ExporterConfig::per_process`]), and the running count of series left
/// out by the cap.
#[derive(Debug, Default)]
struct Followed {
    by_pid: BTreeMap<u32, State>,
    dropped_series: u64,
}

struct Inner {
    config: ExporterConfig,
    state: Mutex<Followed>,
    /// The OpenMetrics text of the latest update; a scrape clones the
    /// pointer under this lock and nothing else.
    exposition: Mutex<Arc<str>>,
    /// What the HTTP endpoints serving this exporter did.
    http: HttpCounters,
}

/// Turns a [`Sampler`]'s snapshots into an OpenMetrics / Prometheus
/// exposition with bounded cardinality. Cheap to clone (clones share it).
///
/// Scrapes never touch the sampler: the text is rebuilt by
/// [`Exporter::update`] (on each stored snapshot, by the thread of
/// [`Exporter::spawn_updater`]) or, per process, by
/// [`Exporter::update_set`] (the thread of [`Exporter::spawn_set_updater`]),
/// and a scrape only copies a pointer to it.
#[derive(Clone)]
pub struct Exporter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Exporter {
    /// An exporter with `config`; it exposes nothing but `# EOF` until its
    /// first [`Exporter::update`].
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the field out of range.
    pub fn new(config: ExporterConfig) -> Result<Exporter, Error> {
        config.validate()?;
        Ok(Exporter {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(Followed::default()),
                exposition: Mutex::new(Arc::from("# EOF\n")),
                http: HttpCounters::default(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ExporterConfig {
        &self.inner.config
    }

    /// Adds what `sampler` stored since the previous update and rebuilds
    /// the exposition; returns whether there was anything new. Its CPU
    /// time counts as the sampler's overhead ([`Sampler::account`]).
    ///
    /// Without [`ExporterConfig::per_process`], one exporter follows one
    /// sampler: the first sampler it is updated from is the one it
    /// follows, and others are ignored (returns false). With it, each
    /// sampler is its process's (keyed by PID; a PID now naming another
    /// process starts afresh), up to [`ExporterConfig::max_processes`].
    pub fn update(&self, sampler: &Sampler) -> bool {
        sampler.account(|| {
            let mut followed = lock(&self.inner.state);
            self.add_news(&mut followed, sampler) && self.rebuild(followed)
        })
    }

    /// Per-process exporting ([`ExporterConfig::per_process`]): follows
    /// exactly `samplers`, one per process. Each one's news are added (and
    /// counted as its overhead), processes not in the list leave the
    /// exposition (their series end, and Prometheus marks them stale), and
    /// the exposition is rebuilt once. Samplers beyond
    /// [`ExporterConfig::max_processes`] are ignored, highest PIDs first.
    /// Returns whether the exposition changed.
    ///
    /// Without per-process exporting this is [`Exporter::update`] of each.
    pub fn update_set(&self, samplers: &[Sampler]) -> bool {
        let mut followed = lock(&self.inner.state);
        let mut changed = false;
        if self.inner.config.per_process {
            let before = followed.by_pid.len();
            followed.by_pid.retain(|pid, state| {
                samplers.iter().any(|s| {
                    s.target_identity().pid == *pid && *s.target_identity() == state.target
                })
            });
            changed |= followed.by_pid.len() != before;
        }
        let mut ordered: Vec<&Sampler> = samplers.iter().collect();
        ordered.sort_by_key(|s| s.target_identity().pid);
        for s in ordered {
            changed |= s.account(|| self.add_news(&mut followed, s));
        }
        changed && self.rebuild(followed)
    }

    /// Removes process `pid` from the exposition (its series end);
    /// returns whether it was there.
    pub fn remove_process(&self, pid: u32) -> bool {
        let mut followed = lock(&self.inner.state);
        followed.by_pid.remove(&pid).is_some() && self.rebuild(followed)
    }

    /// Adds what `sampler` stored since its process's previous update.
    fn add_news(&self, followed: &mut Followed, sampler: &Sampler) -> bool {
        let config = &self.inner.config;
        let target = sampler.target_identity();
        let state = if config.per_process {
            let known = followed
                .by_pid
                .get(&target.pid)
                .map(|s| s.target == *target);
            match known {
                Some(true) => {}
                // A reused PID: another process, counters from zero.
                Some(false) => {
                    followed
                        .by_pid
                        .insert(target.pid, State::new(config, target.clone()));
                }
                None if followed.by_pid.len() >= config.max_processes => return false,
                None => {
                    followed
                        .by_pid
                        .insert(target.pid, State::new(config, target.clone()));
                }
            }
            followed.by_pid.get_mut(&target.pid)
        } else {
            match followed.by_pid.values().next() {
                Some(s) if s.target != *target => return false,
                Some(_) => {}
                None => {
                    followed
                        .by_pid
                        .insert(target.pid, State::new(config, target.clone()));
                }
            }
            followed.by_pid.values_mut().next()
        };
        let Some(state) = state else {
            return false;
        };
        let stats = sampler.stats();
        let Some(newest) = stats.total_samples.checked_sub(1) else {
            return false;
        };
        match state.last_seq {
            Some(last) if last >= newest => return false,
            // Shared with every other follower of the snapshots (a trace
            // writer, a listener) when it is the newest pair.
            Some(last) => match sampler
                .interval_between_shared(last, newest)
                .or_else(|| sampler.latest_interval_shared())
            {
                Some(i) => state.add(&i),
                None => return false,
            },
            None => match sampler.latest() {
                Some(s) => state.start_from(&s),
                None => return false,
            },
        }
        let mut findings: Vec<((String, String), u64)> = Vec::new();
        sampler.with_findings(|all| {
            for f in all {
                let key = (f.kind.as_str().to_string(), f.severity.as_str().to_string());
                match findings.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, n)) => *n += 1,
                    None => findings.push((key, 1)),
                }
            }
        });
        state.findings = findings;
        state.sampler_cpu_ns = stats.total_sampler_cpu_time_ns;
        state.samples = stats.total_samples;
        state.history_bytes = stats.history_bytes;
        true
    }

    /// Builds the exposition of every process followed, and publishes it
    /// after releasing the state: a scrape waits for neither.
    fn rebuild(&self, mut followed: MutexGuard<'_, Followed>) -> bool {
        let states: Vec<&State> = followed.by_pid.values().collect();
        let (exposed, dropped) = Exposed::plan(&states, &self.inner.config);
        let total = followed.dropped_series.saturating_add(dropped);
        followed.dropped_series = total;
        let mut registry = Registry::default();
        registry.register_collector(Box::new(
            exposed
                .with_dropped(total)
                .with_http(self.inner.http.stats()),
        ));
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            // Writing to a String cannot fail; the encoder fails only on
            // an invalid family, which `Exposed` never builds.
            return false;
        }
        // Published while the state is still held, so two updaters never
        // publish out of order; a scrape takes only the exposition's lock.
        *lock(&self.inner.exposition) = Arc::from(out);
        drop(followed);
        true
    }

    /// The counters of the HTTP endpoints serving this exporter.
    pub(crate) fn http(&self) -> &HttpCounters {
        &self.inner.http
    }

    /// The OpenMetrics 1.0 text of the latest update (ends in `# EOF`).
    pub fn openmetrics(&self) -> Arc<str> {
        lock(&self.inner.exposition).clone()
    }

    /// The latest update in the Prometheus text format 0.0.4 (for
    /// `promtool check metrics`, curl and scrapers that do not ask for
    /// OpenMetrics): the same series, without `# UNIT` and `# EOF`, with
    /// counter and info families named after their samples.
    pub fn prometheus_text(&self) -> String {
        text::openmetrics_to_prometheus(&self.openmetrics())
    }

    /// Starts a thread that calls [`Exporter::update`] each time `sampler`
    /// stores a snapshot ([`Sampler::wait_for_sample`]); it stops when the
    /// returned guard is dropped.
    ///
    /// # Errors
    /// [`Error::Spawn`] when the thread cannot be started.
    pub fn spawn_updater(&self, sampler: Sampler) -> Result<Updater, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let (exporter, flag) = (self.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("wakemeter-prom".to_string())
            .spawn(move || {
                let mut last = None;
                exporter.update(&sampler);
                while !flag.load(Ordering::Acquire) {
                    // The timeout only bounds how long a dropped guard
                    // waits for this thread; updates follow the sampler.
                    if let SampleWait::Stored { seq } =
                        sampler.wait_for_sample(last, STOP_CHECK_EVERY)
                    {
                        last = Some(seq);
                        exporter.update(&sampler);
                    }
                }
            })
            .map_err(Error::Spawn)?;
        Ok(Updater {
            stop,
            handle: Some(handle),
        })
    }
}

impl Exporter {
    /// Per-process exporting: starts a thread that every `every` asks
    /// `samplers` for the samplers to follow now (one per process) and
    /// calls [`Exporter::update_set`] with them, so processes that joined
    /// appear and those left out leave. It stops when the returned guard
    /// is dropped. Give `every` the samplers' interval: a slower one only
    /// makes the exposition lag, a faster one finds nothing new.
    ///
    /// # Errors
    /// [`Error::Spawn`] when the thread cannot be started.
    pub fn spawn_set_updater(
        &self,
        every: Duration,
        mut samplers: impl FnMut() -> Vec<Sampler> + Send + 'static,
    ) -> Result<Updater, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let (exporter, flag) = (self.clone(), stop.clone());
        let every = every.max(Duration::from_millis(1));
        let handle = std::thread::Builder::new()
            .name("wakemeter-prom".to_string())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    exporter.update_set(&samplers());
                    // Sleeps in steps, so that a dropped guard waits at
                    // most one step for this thread.
                    let mut left = every;
                    while !left.is_zero() && !flag.load(Ordering::Acquire) {
                        let step = left.min(STOP_CHECK_EVERY);
                        std::thread::sleep(step);
                        left -= step;
                    }
                }
            })
            .map_err(Error::Spawn)?;
        Ok(Updater {
            stop,
            handle: Some(handle),
        })
    }
}

/// How often the updater thread looks at its stop flag while no snapshot comes.
const STOP_CHECK_EVERY: Duration = Duration::from_millis(200);

/// Keeps an [`Exporter::spawn_updater`] or [`Exporter::spawn_set_updater`]
/// thread running; stops and joins it on drop, which returns within about
/// 200 ms (the thread's longest wait between looks at its stop flag) plus
/// the update in progress, if any.
#[derive(Debug)]
pub struct Updater {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Updater {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
