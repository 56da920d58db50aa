//! Findings, their thresholds and the report, mirroring `wakemeter::diagnose`.

use std::time::Duration;

use serde::Serialize;

use crate::records::{Interval, SamplerStats, SystemInfo};

/// What a finding is about (see [`wakemeter::FindingKind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, uniffi::Enum)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// An event loop (or a thread's poll syscalls) wakes far more often than it has work.
    BusyPoller,
    /// A sleep-and-check loop whose sleeping itself costs CPU and wakeups.
    SleepOverhead,
    /// A thread or loop waking at a fixed period with little work per wakeup.
    PeriodicWakeups,
    /// A thread using most of a core for a sustained time.
    CpuHog,
    /// A thread runnable but waiting for a CPU a large share of the time.
    RunQueueContention,
    /// The process's wakeup rate against iOS's limit (150/s over 300 s).
    WakeupsBudget,
    /// Resident memory growing across the history.
    MemoryGrowth,
    /// A kind added to the core after this version of the bindings.
    Other,
}

impl From<wakemeter::FindingKind> for FindingKind {
    fn from(k: wakemeter::FindingKind) -> Self {
        use wakemeter::FindingKind as K;
        match k {
            K::BusyPoller => FindingKind::BusyPoller,
            K::SleepOverhead => FindingKind::SleepOverhead,
            K::PeriodicWakeups => FindingKind::PeriodicWakeups,
            K::CpuHog => FindingKind::CpuHog,
            K::RunQueueContention => FindingKind::RunQueueContention,
            K::WakeupsBudget => FindingKind::WakeupsBudget,
            K::MemoryGrowth => FindingKind::MemoryGrowth,
            _ => FindingKind::Other,
        }
    }
}

/// How urgent a finding is (see [`wakemeter::Severity`]); ordered from least to most urgent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, uniffi::Enum)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; no action needed yet.
    Info,
    /// Costs battery or CPU noticeably; fix when you can.
    Warning,
    /// Costs a lot, or the OS would act on it (kill, throttle, crash report).
    Critical,
}

impl From<wakemeter::Severity> for Severity {
    fn from(s: wakemeter::Severity) -> Self {
        use wakemeter::Severity as S;
        match s {
            S::Info => Severity::Info,
            S::Critical => Severity::Critical,
            // Warning, and any level added to the core later: shown as a
            // warning until the bindings learn it.
            _ => Severity::Warning,
        }
    }
}

/// Who a finding is about (see [`wakemeter::Subject`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Enum)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Subject {
    /// The whole process.
    Process {
        /// Process id.
        pid: u32,
    },
    /// One thread.
    Thread {
        /// OS thread id.
        tid: u64,
        /// Thread name.
        name: String,
    },
    /// An instrumented loop (a LoopProbe).
    Loop {
        /// Probe name.
        name: String,
        /// Thread that runs it, if known.
        tid: Option<u64>,
    },
    /// An instrumented sleep site (a SleepProbe).
    SleepSite {
        /// Probe name.
        name: String,
        /// Thread that sleeps there, if known.
        tid: Option<u64>,
    },
    /// A subject added to the core after this version of the bindings.
    Other {
        /// The core's label for it.
        label: String,
    },
}

impl From<&wakemeter::Subject> for Subject {
    fn from(s: &wakemeter::Subject) -> Self {
        use wakemeter::Subject as S;
        match s {
            S::Process { pid } => Subject::Process { pid: *pid },
            S::Thread { tid, name } => Subject::Thread {
                tid: *tid,
                name: name.clone(),
            },
            S::Loop { name, tid } => Subject::Loop {
                name: name.clone(),
                tid: *tid,
            },
            S::SleepSite { name, tid } => Subject::SleepSite {
                name: name.clone(),
                tid: *tid,
            },
            other => Subject::Other {
                label: other.label(),
            },
        }
    }
}

/// One number behind a finding (see [`wakemeter::Evidence`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct Evidence {
    /// What was measured, e.g. "wakeups_per_sec".
    pub name: String,
    /// The value.
    pub value: f64,
    /// Its unit, e.g. "1/s", "%", "ns", "bytes", "ratio".
    pub unit: String,
}

impl From<&wakemeter::Evidence> for Evidence {
    fn from(e: &wakemeter::Evidence) -> Self {
        Evidence {
            name: e.name.clone(),
            value: e.value,
            unit: e.unit.clone(),
        }
    }
}

/// A diagnosis in plain words, with the numbers behind it (see [`wakemeter::Finding`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct Finding {
    /// What kind of waste.
    pub kind: FindingKind,
    /// How urgent.
    pub severity: Severity,
    /// Who.
    pub subject: Subject,
    /// One line a developer acts on.
    pub summary: String,
    /// The numbers the summary rests on.
    pub evidence: Vec<Evidence>,
    /// What to do about it.
    pub advice: String,
    /// Length of the window the finding looked at, in nanoseconds.
    pub window_ns: u64,
}

impl From<&wakemeter::Finding> for Finding {
    fn from(f: &wakemeter::Finding) -> Self {
        Finding {
            kind: f.kind.into(),
            severity: f.severity.into(),
            subject: (&f.subject).into(),
            summary: f.summary.clone(),
            evidence: f.evidence.iter().map(Into::into).collect(),
            advice: f.advice.clone(),
            window_ns: f.window_ns,
        }
    }
}

/// When a finding fires (see [`wakemeter::Thresholds`], which documents
/// where each default comes from). Durations are in milliseconds here;
/// every other field has the core's name. `Thresholds()` is the default set.
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct Thresholds {
    /// Window for rate-based findings, in milliseconds. Default 10 s.
    #[uniffi(default = 10000)]
    pub window_ms: u64,
    /// Least history a finding needs, in milliseconds. Default 2 s.
    #[uniffi(default = 2000)]
    pub min_window_ms: u64,
    /// Busy poller: wakeups per second of a loop. Default 1000/s.
    #[uniffi(default = 1000.0)]
    pub busy_poll_wakeups_per_sec: f64,
    /// Busy poller: share of wakeups that found nothing (0–1). Default 0.9.
    #[uniffi(default = 0.9)]
    pub busy_poll_idle_ratio: f64,
    /// Busy poller: share of zero-timeout waits (0–1). Default 0.5.
    #[uniffi(default = 0.5)]
    pub busy_poll_zero_timeout_ratio: f64,
    /// Sleep overhead: sleeps per second of one sleep site. Default 100/s.
    #[uniffi(default = 100.0)]
    pub sleep_calls_per_sec: f64,
    /// Sleep overhead: CPU inside sleeps, percent of one core. Default 1%.
    #[uniffi(default = 1.0)]
    pub sleep_cpu_percent: f64,
    /// Periodic wakeups: wakeups per second. Default 20/s.
    #[uniffi(default = 20.0)]
    pub periodic_wakeups_per_sec: f64,
    /// Periodic wakeups: most CPU (percent of one core). Default 5%.
    #[uniffi(default = 5.0)]
    pub periodic_max_cpu_percent: f64,
    /// Periodic wakeups: largest coefficient of variation. Default 0.25.
    #[uniffi(default = 0.25)]
    pub periodic_max_variation: f64,
    /// CPU hog: percent of one core over `cpu_window_ms`. Default 80%.
    #[uniffi(default = 80.0)]
    pub cpu_hog_percent: f64,
    /// Window of the CPU hog finding, in milliseconds. Default 60 s.
    #[uniffi(default = 60000)]
    pub cpu_window_ms: u64,
    /// Run-queue contention: percent of time waiting for a CPU. Default 20%.
    #[uniffi(default = 20.0)]
    pub run_queue_wait_percent: f64,
    /// Wakeups budget: wakeups per second over `wakeups_window_ms`. Default 150/s.
    #[uniffi(default = 150.0)]
    pub wakeups_budget_per_sec: f64,
    /// Share of the budget that raises a warning (0–1). Default 0.8.
    #[uniffi(default = 0.8)]
    pub wakeups_warn_fraction: f64,
    /// Window of the wakeups budget, in milliseconds. Default 300 s.
    #[uniffi(default = 300000)]
    pub wakeups_window_ms: u64,
    /// Memory growth: RSS growth across the history, in bytes. Default 32 MiB.
    #[uniffi(default = 33554432)]
    pub memory_growth_bytes: u64,
    /// Memory growth: growth relative to the start (0–10). Default 0.10.
    #[uniffi(default = 0.1)]
    pub memory_growth_ratio: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        (&wakemeter::Thresholds::default()).into()
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<&wakemeter::Thresholds> for Thresholds {
    fn from(t: &wakemeter::Thresholds) -> Self {
        Thresholds {
            window_ms: ms(t.window),
            min_window_ms: ms(t.min_window),
            busy_poll_wakeups_per_sec: t.busy_poll_wakeups_per_sec,
            busy_poll_idle_ratio: t.busy_poll_idle_ratio,
            busy_poll_zero_timeout_ratio: t.busy_poll_zero_timeout_ratio,
            sleep_calls_per_sec: t.sleep_calls_per_sec,
            sleep_cpu_percent: t.sleep_cpu_percent,
            periodic_wakeups_per_sec: t.periodic_wakeups_per_sec,
            periodic_max_cpu_percent: t.periodic_max_cpu_percent,
            periodic_max_variation: t.periodic_max_variation,
            cpu_hog_percent: t.cpu_hog_percent,
            cpu_window_ms: ms(t.cpu_window),
            run_queue_wait_percent: t.run_queue_wait_percent,
            wakeups_budget_per_sec: t.wakeups_budget_per_sec,
            wakeups_warn_fraction: t.wakeups_warn_fraction,
            wakeups_window_ms: ms(t.wakeups_window),
            memory_growth_bytes: t.memory_growth_bytes,
            memory_growth_ratio: t.memory_growth_ratio,
        }
    }
}

impl From<&Thresholds> for wakemeter::Thresholds {
    fn from(t: &Thresholds) -> Self {
        wakemeter::Thresholds::default()
            .with_window(Duration::from_millis(t.window_ms))
            .with_min_window(Duration::from_millis(t.min_window_ms))
            .with_busy_poll_wakeups_per_sec(t.busy_poll_wakeups_per_sec)
            .with_busy_poll_idle_ratio(t.busy_poll_idle_ratio)
            .with_busy_poll_zero_timeout_ratio(t.busy_poll_zero_timeout_ratio)
            .with_sleep_calls_per_sec(t.sleep_calls_per_sec)
            .with_sleep_cpu_percent(t.sleep_cpu_percent)
            .with_periodic_wakeups_per_sec(t.periodic_wakeups_per_sec)
            .with_periodic_max_cpu_percent(t.periodic_max_cpu_percent)
            .with_periodic_max_variation(t.periodic_max_variation)
            .with_cpu_hog_percent(t.cpu_hog_percent)
            .with_cpu_window(Duration::from_millis(t.cpu_window_ms))
            .with_run_queue_wait_percent(t.run_queue_wait_percent)
            .with_wakeups_budget_per_sec(t.wakeups_budget_per_sec)
            .with_wakeups_warn_fraction(t.wakeups_warn_fraction)
            .with_wakeups_window(Duration::from_millis(t.wakeups_window_ms))
            .with_memory_growth_bytes(t.memory_growth_bytes)
            .with_memory_growth_ratio(t.memory_growth_ratio)
    }
}

/// What the sampler measured and concluded (see [`wakemeter::Report`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct Report {
    /// When the report was made, in nanoseconds since the Unix epoch.
    pub unix_time_ns: u64,
    /// The machine.
    pub system: SystemInfo,
    /// The sampler's own counters and overhead.
    pub stats: SamplerStats,
    /// The interval over the findings window (`None` with fewer than two snapshots).
    pub interval: Option<Interval>,
    /// Findings, most severe first.
    pub findings: Vec<Finding>,
    /// What made the interval's snapshots less complete than configured,
    /// each kind once; lost kernel events summed.
    pub warnings: Vec<crate::records::SampleWarning>,
}

impl From<&wakemeter::Report> for Report {
    fn from(r: &wakemeter::Report) -> Self {
        Report {
            unix_time_ns: r.unix_time_ns,
            system: (&r.system).into(),
            stats: (&r.stats).into(),
            interval: r.interval.as_ref().map(Into::into),
            findings: r.findings.iter().map(Into::into).collect(),
            warnings: r.warnings.iter().map(Into::into).collect(),
        }
    }
}
