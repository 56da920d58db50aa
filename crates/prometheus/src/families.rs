//! Every family of the exposition, declared once: name, type, help,
//! unit, labels, and where its rows come from. The encoder writes the
//! families in this order from this table, and the series budgets of the
//! series cap ([`EXPORTER_SERIES`], [`LOOP_SERIES`], …) are summed from
//! it, so adding a family is one entry here.

use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::{Exposed, HISTOGRAM_SERIES, Part};
use crate::totals::{KERNEL_COUNTS, LoopTotals, OFF_CPU_CAUSES, SleepTotals, ThreadTotals};

/// A family's OpenMetrics type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Type {
    /// A monotonic counter (`_total` samples).
    Counter,
    /// A gauge.
    Gauge,
    /// A histogram of log2 buckets ([`HISTOGRAM_SERIES`] series a row).
    Histogram,
    /// An info (labels only, value 1).
    Info,
}

impl Type {
    pub(super) fn metric_type(self) -> MetricType {
        match self {
            Type::Counter => MetricType::Counter,
            Type::Gauge => MetricType::Gauge,
            Type::Histogram => MetricType::Histogram,
            Type::Info => MetricType::Info,
        }
    }
}

/// A family's unit: values in nanoseconds are written in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Base {
    /// A plain count.
    Count,
    /// Seconds (the row's value is in nanoseconds).
    Seconds,
    /// Bytes.
    Bytes,
}

impl Base {
    pub(super) fn unit(self) -> Option<&'static Unit> {
        const SECONDS: &Unit = &Unit::Seconds;
        const BYTES: &Unit = &Unit::Bytes;
        match self {
            Base::Count => None,
            Base::Seconds => Some(SECONDS),
            Base::Bytes => Some(BYTES),
        }
    }
}

/// Which thread groups' parts a thread family is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum When {
    /// Every process.
    Always,
    /// Processes whose threads had switch counts.
    Switches,
    /// Processes with the eBPF (kernel) view.
    Kernel,
}

/// A log2 histogram of a group: its buckets and their sum in ns.
pub(super) type Hist<T> = fn(&T) -> (&[u64], u64);

/// Where a family's rows come from; this also says how many series it costs.
#[derive(Clone, Copy)]
pub(super) enum Rows {
    /// The info family: one row per process.
    Target,
    /// One row per process (none where `None`).
    Process(fn(&Part) -> Option<u64>),
    /// One row per thread group (its totals and live members).
    Thread(fn(&ThreadTotals, u32) -> u64, When),
    /// One row per thread group and [`OFF_CPU_CAUSES`] cause (eBPF).
    ThreadOffCpu,
    /// One family per [`KERNEL_COUNTS`] entry (named after it), one row
    /// per thread group (eBPF).
    ThreadKernel,
    /// One row per loop group.
    Loop(fn(&LoopTotals) -> u64),
    /// One histogram per loop group.
    LoopHistogram(Hist<LoopTotals>),
    /// One row per sleep-site group.
    Site(fn(&SleepTotals) -> u64),
    /// One histogram per sleep-site group.
    SiteHistogram(Hist<SleepTotals>),
    /// One row per (kind, severity) of a process's findings.
    Findings,
    /// One row for the whole exporter.
    Exporter(fn(&Exposed) -> u64),
}

/// One declared family.
#[derive(Clone, Copy)]
pub(super) struct Family {
    /// The name before the unit suffix (`wakemeter_thread_cpu`, written
    /// `wakemeter_thread_cpu_seconds`); for [`Rows::ThreadKernel`], the
    /// prefix of the [`KERNEL_COUNTS`] names.
    pub name: &'static str,
    pub ty: Type,
    /// The `# HELP` text (for [`Rows::ThreadKernel`], each count's own).
    pub help: &'static str,
    pub base: Base,
    /// The family's own labels, after `pid` and `process` in per-process
    /// exporting; the encoder labels rows with these names.
    pub labels: &'static [&'static str],
    pub rows: Rows,
}

const fn f(
    name: &'static str,
    ty: Type,
    base: Base,
    labels: &'static [&'static str],
    rows: Rows,
    help: &'static str,
) -> Family {
    Family {
        name,
        ty,
        help,
        base,
        labels,
        rows,
    }
}

use Base::{Bytes, Count, Seconds};
use Type::{Counter, Gauge, Histogram, Info};

const THREAD: &[&str] = &["thread"];
const LOOP: &[&str] = &["loop"];
const SITE: &[&str] = &["sleep_site"];
const NONE: &[&str] = &[];

/// Every family, in the order of the exposition.
#[rustfmt::skip]
pub(super) const FAMILIES: &[Family] = &[
    f("wakemeter_target", Info, Count, &["version"], Rows::Target,
      "The process observed, and the wakemeter version observing it."),
    f("wakemeter_process_cpu", Counter, Seconds, NONE, Rows::Process(|p| Some(p.process_cpu_ns)),
      "CPU time of the whole process (exited threads included)."),
    f("wakemeter_process_resident_memory", Gauge, Bytes, NONE, Rows::Process(|p| Some(p.rss_bytes)),
      "Resident set size."),
    f("wakemeter_process_peak_resident_memory", Gauge, Bytes, NONE, Rows::Process(|p| p.peak_rss_bytes),
      "Peak resident set size (VmHWM)."),
    f("wakemeter_process_threads", Gauge, Count, NONE, Rows::Process(|p| Some(u64::from(p.thread_count))),
      "Threads of the process."),
    f("wakemeter_thread_cpu", Counter, Seconds, THREAD, Rows::Thread(|t, _| t.cpu_ns, When::Always),
      "CPU time of the threads of this name (numbers collapsed to {n}; \"other\": threads outside the top N)."),
    f("wakemeter_thread_switches", Counter, Count, THREAD, Rows::Thread(|t, _| t.switches, When::Switches),
      "Context switches (times scheduled onto a CPU) of the threads of this name."),
    f("wakemeter_thread_run_queue_wait", Counter, Seconds, THREAD, Rows::Thread(|t, _| t.run_queue_wait_ns, When::Always),
      "Time the threads of this name were runnable but waiting for a CPU."),
    f("wakemeter_thread_group_threads", Gauge, Count, THREAD, Rows::Thread(|_, m| u64::from(m), When::Always),
      "Live threads of this name in the latest sample."),
    f("wakemeter_thread_wakes", Counter, Count, THREAD, Rows::Thread(|t, _| t.wakes, When::Kernel),
      "Times the threads of this name were made runnable (eBPF sched_waking)."),
    f("wakemeter_thread_off_cpu", Counter, Seconds, &["thread", "cause"], Rows::ThreadOffCpu,
      "Time the threads of this name spent off CPU, by cause (eBPF)."),
    f("wakemeter_thread_", Counter, Count, THREAD, Rows::ThreadKernel,
      "(each of KERNEL_COUNTS has its own)"),
    f("wakemeter_loop_wakeups", Counter, Count, LOOP, Rows::Loop(|t| t.wakeups),
      "Returns from the loop's wait."),
    f("wakemeter_loop_idle_wakeups", Counter, Count, LOOP, Rows::Loop(|t| t.idle_wakeups),
      "Wakeups that found no event."),
    f("wakemeter_loop_zero_timeout_waits", Counter, Count, LOOP, Rows::Loop(|t| t.zero_timeout_waits),
      "Waits with a zero timeout (non-blocking polls)."),
    f("wakemeter_loop_events", Counter, Count, LOOP, Rows::Loop(|t| t.events),
      "Ready events the waits reported."),
    f("wakemeter_loop_wait", Counter, Seconds, LOOP, Rows::Loop(|t| t.wait_ns),
      "Time inside the loop's waits."),
    f("wakemeter_loop_busy", Counter, Seconds, LOOP, Rows::Loop(|t| t.busy_ns),
      "Time between the loop's waits (doing work)."),
    f("wakemeter_loop_poll_delay", Histogram, Seconds, LOOP, Rows::LoopHistogram(|t| (&t.poll_delay_buckets, t.poll_delay_ns)),
      "How late timed-out waits returned after their timeout (Envoy's poll_delay)."),
    f("wakemeter_sleep_calls", Counter, Count, SITE, Rows::Site(|t| t.calls),
      "Completed sleeps."),
    f("wakemeter_sleep_requested", Counter, Seconds, SITE, Rows::Site(|t| t.requested_ns),
      "Sleep time asked for."),
    f("wakemeter_sleep_actual", Counter, Seconds, SITE, Rows::Site(|t| t.actual_ns),
      "Sleep time got (monotonic clock)."),
    f("wakemeter_sleep_cpu", Counter, Seconds, SITE, Rows::Site(|t| t.cpu_ns),
      "CPU time spent inside the sleep calls."),
    f("wakemeter_sleep_oversleep", Histogram, Seconds, SITE, Rows::SiteHistogram(|t| (&t.oversleep_buckets, t.oversleep_ns)),
      "Actual minus requested sleep time."),
    f("wakemeter_findings", Gauge, Count, &["kind", "severity"], Rows::Findings,
      "Current findings by kind and severity (over each rule's window)."),
    f("wakemeter_sampler_cpu", Counter, Seconds, NONE, Rows::Process(|p| Some(p.sampler_cpu_ns)),
      "CPU time wakemeter spent sampling, diagnosing and exporting: the overhead paid."),
    f("wakemeter_sampler_samples", Counter, Count, NONE, Rows::Process(|p| Some(p.samples)),
      "Snapshots taken."),
    f("wakemeter_sampler_history", Gauge, Bytes, NONE, Rows::Process(|p| Some(p.history_bytes)),
      "Memory the sampler's history holds."),
    f("wakemeter_exporter_series", Gauge, Count, NONE, Rows::Exporter(|e| e.series as u64),
      "Series in this exposition (at most the configured cap)."),
    f("wakemeter_exporter_dropped_series", Counter, Count, NONE, Rows::Exporter(|e| e.dropped_total),
      "Series left out of expositions because of the series cap, summed over every exposition built."),
    f("wakemeter_exporter_http_connections", Counter, Count, NONE, Rows::Exporter(|e| e.http.connections),
      "Connections the metrics endpoint accepted."),
    f("wakemeter_exporter_http_shed_connections", Counter, Count, NONE, Rows::Exporter(|e| e.http.shed),
      "Connections closed to keep the endpoint within its cap on open connections (the oldest one still waiting for its request goes first)."),
    f("wakemeter_exporter_http_timeouts", Counter, Count, NONE, Rows::Exporter(|e| e.http.timeouts),
      "Connections closed because their request and answer took longer than the endpoint's deadline."),
    f("wakemeter_exporter_http_accept_errors", Counter, Count, NONE, Rows::Exporter(|e| e.http.accept_errors),
      "Accepts that failed for lack of file descriptors or memory, each followed by a pause of accepting (up to 1 s)."),
];

/// What a budget counts: the rows of one kind of group.
#[derive(Clone, Copy)]
enum Scope {
    /// Once per exposition.
    Exporter,
    /// Once per thread group, always / with switch counts / with eBPF.
    Thread(When),
    /// Once per loop group.
    Loop,
    /// Once per sleep-site group.
    Site,
    /// Once per process (counted per process from its values).
    Process,
}

impl Family {
    /// The group a row of this family belongs to.
    const fn scope(&self) -> Scope {
        match self.rows {
            Rows::Exporter(_) => Scope::Exporter,
            Rows::Thread(_, w) => Scope::Thread(w),
            Rows::ThreadOffCpu | Rows::ThreadKernel => Scope::Thread(When::Kernel),
            Rows::Loop(_) | Rows::LoopHistogram(_) => Scope::Loop,
            Rows::Site(_) | Rows::SiteHistogram(_) => Scope::Site,
            Rows::Target | Rows::Process(_) | Rows::Findings => Scope::Process,
        }
    }

    /// Series one group (thread, loop, site, exporter) costs in this family.
    const fn series_per_group(&self) -> usize {
        let per_row = match self.ty {
            Type::Histogram => HISTOGRAM_SERIES,
            Type::Counter | Type::Gauge | Type::Info => 1,
        };
        let rows = match self.rows {
            Rows::ThreadOffCpu => OFF_CPU_CAUSES.len(),
            Rows::ThreadKernel => KERNEL_COUNTS.len(),
            _ => 1,
        };
        per_row * rows
    }
}

/// Series of one group of `scope` summed over [`FAMILIES`].
const fn budget(scope: Scope) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < FAMILIES.len() {
        let f = &FAMILIES[i];
        let same = match (f.scope(), scope) {
            (Scope::Exporter, Scope::Exporter)
            | (Scope::Loop, Scope::Loop)
            | (Scope::Site, Scope::Site)
            | (Scope::Process, Scope::Process) => true,
            (Scope::Thread(a), Scope::Thread(b)) => a as u8 == b as u8,
            _ => false,
        };
        if same {
            n += f.series_per_group();
        }
        i += 1;
    }
    n
}

/// The exporter's own series (one exposition).
pub(super) const EXPORTER_SERIES: usize = budget(Scope::Exporter);
/// Series of one loop group.
pub(super) const LOOP_SERIES: usize = budget(Scope::Loop);
/// Series of one sleep-site group.
pub(super) const SLEEP_SERIES: usize = budget(Scope::Site);
/// Series of one thread group in every process.
const THREAD_SERIES: usize = budget(Scope::Thread(When::Always));
/// Further series of one thread group where switches are counted.
const THREAD_SWITCH_SERIES: usize = budget(Scope::Thread(When::Switches));
/// Further series of one thread group with the eBPF view.
const THREAD_KERNEL_SERIES: usize = budget(Scope::Thread(When::Kernel));

/// Series of one thread group of a process with switch counts (`switches`)
/// and the eBPF view (`kernel`).
pub(super) fn thread_series(switches: bool, kernel: bool) -> usize {
    THREAD_SERIES
        + if switches { THREAD_SWITCH_SERIES } else { 0 }
        + if kernel { THREAD_KERNEL_SERIES } else { 0 }
}

/// The fixed series of one process: its info, each per-process family it
/// has a value for, and its findings.
pub(super) fn process_series(p: &Part) -> usize {
    FAMILIES
        .iter()
        .map(|f| match f.rows {
            Rows::Target => 1,
            Rows::Process(v) => usize::from(v(p).is_some()),
            Rows::Findings => p.findings.len(),
            _ => 0,
        })
        .sum()
}

/// Whether `when` holds for the thread groups of `p`.
pub(super) fn applies(when: When, p: &Part) -> bool {
    match when {
        When::Always => true,
        When::Switches => p.switches,
        When::Kernel => p.kernel,
    }
}
