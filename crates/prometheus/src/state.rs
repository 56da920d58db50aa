//! What an exporter is configured with and what it has added up so far:
//! the plain records that the updater writes and the encoder reads.

use std::sync::atomic::{AtomicU64, Ordering};

use wakemeter::{Interval, Snapshot, TargetIdentity};

use crate::error::Error;
use crate::groups::Groups;
use crate::names::collapse;
use crate::totals::{LoopTotals, SleepTotals, ThreadTotals};

/// Default number of labelled thread groups.
pub const DEFAULT_TOP_THREADS: usize = 20;
/// Default number of labelled loop groups and of labelled sleep-site groups.
pub const DEFAULT_TOP_PROBES: usize = 20;
/// Default hard cap on the series of one exposition.
pub const DEFAULT_MAX_SERIES: usize = 2_000;
/// Smallest accepted series cap: the process, sampler, findings and
/// exporter series always fit.
pub const MIN_MAX_SERIES: usize = 64;
/// Largest accepted top N (for threads, loops and sleep sites each).
pub const MAX_TOP_N: usize = 1_000;
/// Default of [`ExporterConfig::max_processes`].
pub const DEFAULT_MAX_PROCESSES: usize = 64;
/// Largest accepted [`ExporterConfig::max_processes`].
pub const MAX_PROCESSES: usize = 1_024;

/// How an [`Exporter`](crate::Exporter) bounds what it exposes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExporterConfig {
    /// Thread groups (threads by name, numbers collapsed) with a label of
    /// their own; the others are added to the `thread="other"` series.
    /// Default [`DEFAULT_TOP_THREADS`].
    pub top_threads: usize,
    /// Loop groups and sleep-site groups with a label of their own (each).
    /// Default [`DEFAULT_TOP_PROBES`].
    pub top_probes: usize,
    /// Hard cap on the series of one exposition (every sample line
    /// counts, histogram buckets included). Groups that do not fit are
    /// left out, lightest first, and counted in
    /// `wakemeter_exporter_dropped_series_total`. Default [`DEFAULT_MAX_SERIES`].
    /// With [`ExporterConfig::per_process`] the cap is for all processes
    /// together: each process's fixed series and then, in turns, each
    /// one's next heaviest group, until it is reached.
    pub max_series: usize,
    /// Whether the exporter follows one sampler per process (several
    /// processes, e.g. the processes of a pod), every series carrying the
    /// labels `pid` and `process` (the process name). Off by default: one
    /// sampler, series without those labels (the host's own process).
    pub per_process: bool,
    /// With [`ExporterConfig::per_process`], the most processes exposed at
    /// once; samplers of further processes are ignored until one leaves
    /// ([`Exporter::update_set`](crate::Exporter::update_set), [`Exporter::remove_process`](crate::Exporter::remove_process)). 1 to
    /// [`MAX_PROCESSES`], default [`DEFAULT_MAX_PROCESSES`].
    pub max_processes: usize,
}

impl Default for ExporterConfig {
    fn default() -> Self {
        ExporterConfig {
            top_threads: DEFAULT_TOP_THREADS,
            top_probes: DEFAULT_TOP_PROBES,
            max_series: DEFAULT_MAX_SERIES,
            per_process: false,
            max_processes: DEFAULT_MAX_PROCESSES,
        }
    }
}

impl ExporterConfig {
    /// Sets [`ExporterConfig::top_threads`].
    #[must_use]
    pub fn with_top_threads(mut self, n: usize) -> Self {
        self.top_threads = n;
        self
    }

    /// Sets [`ExporterConfig::top_probes`].
    #[must_use]
    pub fn with_top_probes(mut self, n: usize) -> Self {
        self.top_probes = n;
        self
    }

    /// Sets [`ExporterConfig::max_series`].
    #[must_use]
    pub fn with_max_series(mut self, n: usize) -> Self {
        self.max_series = n;
        self
    }

    /// Sets [`ExporterConfig::per_process`].
    #[must_use]
    pub fn with_per_process(mut self, on: bool) -> Self {
        self.per_process = on;
        self
    }

    /// Sets [`ExporterConfig::max_processes`].
    #[must_use]
    pub fn with_max_processes(mut self, n: usize) -> Self {
        self.max_processes = n;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |field, reason: String| Err(Error::InvalidConfig { field, reason });
        if !(1..=MAX_TOP_N).contains(&self.top_threads) {
            return bad("top_threads", format!("must be 1 to {MAX_TOP_N}"));
        }
        if !(1..=MAX_TOP_N).contains(&self.top_probes) {
            return bad("top_probes", format!("must be 1 to {MAX_TOP_N}"));
        }
        if self.max_series < MIN_MAX_SERIES {
            return bad("max_series", format!("must be at least {MIN_MAX_SERIES}"));
        }
        if !(1..=MAX_PROCESSES).contains(&self.max_processes) {
            return bad("max_processes", format!("must be 1 to {MAX_PROCESSES}"));
        }
        Ok(())
    }
}

/// Everything added up so far (only the updater writes it).
#[derive(Debug)]
pub(crate) struct State {
    pub last_seq: Option<u64>,
    pub target: TargetIdentity,
    pub process_cpu_ns: u64,
    pub rss_bytes: u64,
    pub peak_rss_bytes: Option<u64>,
    pub thread_count: u32,
    pub threads: Groups<ThreadTotals>,
    pub loops: Groups<LoopTotals>,
    pub sleeps: Groups<SleepTotals>,
    /// Whether any thread had switch counts / a kernel (eBPF) view.
    pub switches_seen: bool,
    pub kernel_seen: bool,
    /// (kind, severity) → current findings.
    pub findings: Vec<((String, String), u64)>,
    pub sampler_cpu_ns: u64,
    pub samples: u64,
    pub history_bytes: u64,
}

impl State {
    pub(crate) fn new(config: &ExporterConfig, target: TargetIdentity) -> Self {
        State {
            last_seq: None,
            target,
            process_cpu_ns: 0,
            rss_bytes: 0,
            peak_rss_bytes: None,
            thread_count: 0,
            threads: Groups::new(config.top_threads),
            loops: Groups::new(config.top_probes),
            sleeps: Groups::new(config.top_probes),
            switches_seen: false,
            kernel_seen: false,
            findings: Vec::new(),
            sampler_cpu_ns: 0,
            samples: 0,
            history_bytes: 0,
        }
    }

    /// The first update: counters since each thread or probe started.
    pub(crate) fn start_from(&mut self, s: &Snapshot) {
        self.process_cpu_ns = s.process.total_cpu_time_ns;
        self.rss_bytes = s.process.rss_bytes;
        self.peak_rss_bytes = s.process.peak_rss_bytes;
        self.thread_count = s.process.thread_count;
        self.switches_seen |= s.threads.iter().any(|t| t.total_switches.is_some());
        self.threads.add(s.threads.iter().map(|t| {
            let d = ThreadTotals::from_sample(t);
            let w = d.cpu_ns as f64;
            (collapse(&t.name), d, w)
        }));
        self.loops.add(s.loops.iter().map(|l| {
            let d = LoopTotals::from_stats(l);
            let w = d.wakeups as f64;
            (collapse(&l.name), d, w)
        }));
        self.sleeps.add(s.sleeps.iter().map(|l| {
            let d = SleepTotals::from_stats(l);
            let w = d.calls as f64;
            (collapse(&l.name), d, w)
        }));
        self.last_seq = Some(s.seq);
    }

    /// Every later update: the interval since the previous one.
    pub(crate) fn add(&mut self, i: &Interval) {
        self.process_cpu_ns = self.process_cpu_ns.saturating_add(i.process.cpu_time_ns);
        self.rss_bytes = i.process.rss_bytes;
        self.peak_rss_bytes = i.process.peak_rss_bytes;
        self.thread_count = i.process.thread_count;
        self.switches_seen |= i.threads.iter().any(|t| t.switches.is_some());
        self.kernel_seen |= i.threads.iter().any(|t| t.kernel.is_some());
        let d = i.duration_ns;
        // Ranked by CPU in this interval: the top N are today's busiest.
        self.threads.add(i.threads.iter().map(|t| {
            (
                collapse(&t.name),
                ThreadTotals::from_interval(t, d),
                t.cpu_percent,
            )
        }));
        self.loops.add(i.loops.iter().map(|l| {
            (
                collapse(&l.name),
                LoopTotals::from_interval(l),
                l.wakeups as f64,
            )
        }));
        self.sleeps.add(i.sleeps.iter().map(|s| {
            (
                collapse(&s.name),
                SleepTotals::from_interval(s),
                s.calls as f64,
            )
        }));
        self.last_seq = Some(i.to_seq);
    }
}

/// What the endpoint did since it started (every [`MetricsServer`](crate::MetricsServer) of one
/// [`Exporter`](crate::Exporter) together); also exposed as `wakemeter_exporter_http_*`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: u64,
    /// Connections closed to stay within [`ServerOptions::max_connections`](crate::ServerOptions::max_connections).
    pub shed: u64,
    /// Connections closed at [`ServerOptions::request_deadline`](crate::ServerOptions::request_deadline).
    pub timeouts: u64,
    /// Accepts that failed for lack of descriptors or memory, each
    /// followed by a pause of accepting.
    pub accept_errors: u64,
}

/// The counters behind [`ServerStats`], kept by the exporter so that its
/// exposition can show them.
#[derive(Debug, Default)]
pub(crate) struct HttpCounters {
    pub(crate) connections: AtomicU64,
    pub(crate) shed: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) accept_errors: AtomicU64,
}

impl HttpCounters {
    pub(crate) fn stats(&self) -> ServerStats {
        ServerStats {
            connections: self.connections.load(Ordering::Relaxed),
            shed: self.shed.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            accept_errors: self.accept_errors.load(Ordering::Relaxed),
        }
    }
}
