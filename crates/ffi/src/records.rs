//! Records mirroring the core's records, field for field and name for name.
//!
//! The core's records are `#[non_exhaustive]`, so they cannot be exported
//! with `#[uniffi::remote]`; each one here has a `From<&core>` conversion, and
//! a test checks that every record serializes to exactly the same JSON keys
//! as its core twin, so a field added to the core cannot be forgotten here.

use serde::Serialize;

use crate::probe::{LoopStats, SleepStats};

/// Where a thread's CPU time came from (see [`wakemeter::CpuTimeSource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, uniffi::Enum)]
#[serde(rename_all = "snake_case")]
pub enum CpuTimeSource {
    /// The thread's own CPU clock: exact nanoseconds.
    ThreadClock,
    /// `schedstat`'s run time: exact nanoseconds (other processes).
    Schedstat,
    /// `stat`'s utime + stime: resolution of one clock tick (usually 10 ms).
    StatTicks,
    /// Mach `thread_info` user + system time: microsecond resolution.
    MachThreadInfo,
    /// A source added to the core after this version of the bindings.
    Other,
}

impl From<wakemeter::CpuTimeSource> for CpuTimeSource {
    fn from(s: wakemeter::CpuTimeSource) -> Self {
        use wakemeter::CpuTimeSource as C;
        match s {
            C::ThreadClock => CpuTimeSource::ThreadClock,
            C::Schedstat => CpuTimeSource::Schedstat,
            C::StatTicks => CpuTimeSource::StatTicks,
            C::MachThreadInfo => CpuTimeSource::MachThreadInfo,
            _ => CpuTimeSource::Other,
        }
    }
}

/// Cumulative counters of one thread at one instant (see [`wakemeter::ThreadSample`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct ThreadSample {
    /// OS thread id (Linux TID, Mach `thread_id`); reused by the OS.
    pub tid: u64,
    /// Sampler-assigned identity, never reused while the sampler lives.
    pub serial: u64,
    /// Thread name.
    pub name: String,
    /// CPU time since the thread started, in nanoseconds.
    pub cpu_time_ns: u64,
    /// Where `cpu_time_ns` came from.
    pub cpu_time_source: CpuTimeSource,
    /// Runnable-but-waiting time since the thread started, in nanoseconds.
    pub run_queue_wait_ns: Option<u64>,
    /// Times scheduled onto a CPU (≈ context switches).
    pub timeslices: Option<u64>,
    /// Voluntary context switches (read every Nth sample only).
    pub voluntary_switches: Option<u64>,
    /// Involuntary context switches (read with `voluntary_switches`).
    pub involuntary_switches: Option<u64>,
}

impl From<&wakemeter::ThreadSample> for ThreadSample {
    fn from(t: &wakemeter::ThreadSample) -> Self {
        ThreadSample {
            tid: t.tid,
            serial: t.serial,
            name: t.name.clone(),
            cpu_time_ns: t.total_cpu_time_ns,
            cpu_time_source: t.cpu_time_source.into(),
            run_queue_wait_ns: t.total_run_queue_wait_ns,
            timeslices: t.total_switches,
            voluntary_switches: t.total_voluntary_switches,
            involuntary_switches: t.total_involuntary_switches,
        }
    }
}

/// Process-wide counters at one instant (see [`wakemeter::ProcessSample`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct ProcessSample {
    /// Process id.
    pub pid: u32,
    /// Resident set size, in bytes.
    pub rss_bytes: u64,
    /// Peak resident set size, in bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Apple `phys_footprint`, in bytes.
    pub phys_footprint_bytes: Option<u64>,
    /// CPU time of the whole process, in nanoseconds.
    pub cpu_time_ns: u64,
    /// Threads seen in this sample.
    pub thread_count: u32,
    /// Apple interrupt wakeups, cumulative.
    pub interrupt_wakeups: Option<u64>,
    /// Apple platform-idle wakeups ("Idle Wake Ups"), cumulative.
    pub platform_idle_wakeups: Option<u64>,
}

impl From<&wakemeter::ProcessSample> for ProcessSample {
    fn from(p: &wakemeter::ProcessSample) -> Self {
        ProcessSample {
            pid: p.pid,
            rss_bytes: p.rss_bytes,
            peak_rss_bytes: p.peak_rss_bytes,
            phys_footprint_bytes: p.phys_footprint_bytes,
            cpu_time_ns: p.total_cpu_time_ns,
            thread_count: p.thread_count,
            interrupt_wakeups: p.total_interrupt_wakeups,
            platform_idle_wakeups: p.total_platform_idle_wakeups,
        }
    }
}

/// Something that made a snapshot less complete than configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Enum)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SampleWarning {
    /// Out of file descriptors: this many threads are sampled with CPU time only.
    DescriptorsExhausted {
        /// Threads sampled with fewer sources.
        threads_without_descriptors: u32,
    },
    /// An attached kernel source failed to read.
    KernelSourceFailed {
        /// The error, as text.
        message: String,
    },
    /// The kernel source lost events since the previous snapshot (a bounded map was full).
    KernelEventsDropped {
        /// Events lost since the previous snapshot.
        dropped_events: u64,
    },
    /// A warning added to the core after this version of the bindings.
    Other {
        /// The warning, as text.
        message: String,
    },
}

impl From<&wakemeter::SampleWarning> for SampleWarning {
    fn from(w: &wakemeter::SampleWarning) -> Self {
        use wakemeter::SampleWarning as W;
        match w {
            W::DescriptorsExhausted {
                threads_without_descriptors,
            } => SampleWarning::DescriptorsExhausted {
                threads_without_descriptors: *threads_without_descriptors,
            },
            W::KernelSourceFailed { message } => SampleWarning::KernelSourceFailed {
                message: message.clone(),
            },
            W::KernelEventsDropped { dropped_events } => SampleWarning::KernelEventsDropped {
                dropped_events: *dropped_events,
            },
            other => SampleWarning::Other {
                message: format!("{other:?}"),
            },
        }
    }
}

/// Facts about the machine (see [`wakemeter::SystemInfo`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct SystemInfo {
    /// Total physical memory, in bytes.
    pub total_memory_bytes: u64,
    /// Logical CPUs.
    pub cpu_count: u32,
    /// "linux", "android", "macos" or "ios".
    pub os: String,
}

impl From<&wakemeter::SystemInfo> for SystemInfo {
    fn from(s: &wakemeter::SystemInfo) -> Self {
        SystemInfo {
            total_memory_bytes: s.total_memory_bytes,
            cpu_count: s.cpu_count,
            os: s.os.clone(),
        }
    }
}

/// Log2 histogram of durations in nanoseconds (see [`wakemeter::Log2Histogram`]):
/// bucket 0 counts zeros, bucket `i ≥ 1` counts values in `[2^(i-1), 2^i)` ns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct Log2Histogram {
    /// Counts per bucket, trimmed after the last non-zero one.
    pub buckets: Vec<u64>,
}

impl From<&wakemeter::Log2Histogram> for Log2Histogram {
    fn from(h: &wakemeter::Log2Histogram) -> Self {
        Log2Histogram {
            buckets: h.buckets.clone(),
        }
    }
}

/// Off-CPU time of one thread by cause, in nanoseconds (see [`wakemeter::kernel::OffCpuTime`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct OffCpuTime {
    /// In `nanosleep`/`clock_nanosleep`.
    pub sleep_ns: u64,
    /// In `futex`.
    pub lock_ns: u64,
    /// In poll-family syscalls.
    pub poll_ns: u64,
    /// Uninterruptible (I/O).
    pub io_ns: u64,
    /// Preempted (runnable, waiting for a CPU).
    pub preempted_ns: u64,
    /// Any other reason.
    pub other_ns: u64,
}

impl From<&wakemeter::kernel::OffCpuTime> for OffCpuTime {
    fn from(o: &wakemeter::kernel::OffCpuTime) -> Self {
        OffCpuTime {
            sleep_ns: o.sleep_ns,
            lock_ns: o.lock_ns,
            poll_ns: o.poll_ns,
            io_ns: o.io_ns,
            preempted_ns: o.preempted_ns,
            other_ns: o.other_ns,
        }
    }
}

/// A thread that woke another one (see [`wakemeter::kernel::Waker`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct Waker {
    /// Waker's TID (0 for interrupts/idle).
    pub tid: u64,
    /// Waker's `comm`.
    pub comm: String,
    /// Wakeups of the target thread by this waker.
    pub wakeups: u64,
}

impl From<&wakemeter::kernel::Waker> for Waker {
    fn from(w: &wakemeter::kernel::Waker) -> Self {
        Waker {
            tid: w.tid,
            comm: w.name.clone(),
            wakeups: w.total_wakes,
        }
    }
}

/// Poll-family syscalls of one thread (see [`wakemeter::kernel::PollSyscallStats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct PollSyscallStats {
    /// Calls that returned.
    pub calls: u64,
    /// Calls that returned 0 (nothing ready).
    pub zero_returns: u64,
    /// Calls with a zero timeout (busy polling).
    pub zero_timeouts: u64,
    /// Calls with no timeout.
    pub infinite_timeouts: u64,
    /// Requested finite timeouts, in nanoseconds.
    pub timeout_histogram: Log2Histogram,
    /// Time blocked in the calls, from each call's first block to its
    /// return, in nanoseconds (calls that never block add 0).
    pub time_in_calls_ns: u64,
}

impl From<&wakemeter::kernel::PollSyscallStats> for PollSyscallStats {
    fn from(p: &wakemeter::kernel::PollSyscallStats) -> Self {
        PollSyscallStats {
            calls: p.total_calls,
            zero_returns: p.total_idle_calls,
            zero_timeouts: p.total_zero_timeout_calls,
            infinite_timeouts: p.total_infinite_timeout_calls,
            timeout_histogram: (&p.timeout_histogram).into(),
            time_in_calls_ns: p.total_blocked_ns,
        }
    }
}

/// Sleep syscalls of one thread (see [`wakemeter::kernel::SleepSyscallStats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct SleepSyscallStats {
    /// Calls that returned.
    pub calls: u64,
    /// Sum of requested durations, in nanoseconds.
    pub requested_ns: u64,
    /// Sum of actual durations, from each call's first block to its return,
    /// in nanoseconds.
    pub actual_ns: u64,
}

impl From<&wakemeter::kernel::SleepSyscallStats> for SleepSyscallStats {
    fn from(s: &wakemeter::kernel::SleepSyscallStats) -> Self {
        SleepSyscallStats {
            calls: s.total_calls,
            requested_ns: s.total_requested_ns,
            actual_ns: s.total_actual_ns,
        }
    }
}

/// What the kernel saw of one thread (see [`wakemeter::KernelThreadStats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct KernelThreadStats {
    /// TID.
    pub tid: u64,
    /// `comm` as the kernel last saw it.
    pub comm: String,
    /// Time on CPU, in nanoseconds.
    pub on_cpu_ns: u64,
    /// Voluntary switches.
    pub voluntary_switches: u64,
    /// Involuntary switches.
    pub involuntary_switches: u64,
    /// Off-CPU time by cause.
    pub off_cpu: OffCpuTime,
    /// Durations of off-CPU spans, in nanoseconds.
    pub off_cpu_histogram: Log2Histogram,
    /// Wakeup-to-run latencies, in nanoseconds.
    pub run_queue_latency_histogram: Log2Histogram,
    /// Times this thread was woken.
    pub wakeups_received: u64,
    /// The threads that woke it most, most frequent first.
    pub top_wakers: Vec<Waker>,
    /// Poll-family syscalls.
    pub poll: PollSyscallStats,
    /// Sleep syscalls.
    pub sleep: SleepSyscallStats,
}

impl From<&wakemeter::KernelThreadStats> for KernelThreadStats {
    fn from(k: &wakemeter::KernelThreadStats) -> Self {
        KernelThreadStats {
            tid: k.tid,
            comm: k.name.clone(),
            on_cpu_ns: k.total_on_cpu_ns,
            voluntary_switches: k.total_voluntary_switches,
            involuntary_switches: k.total_involuntary_switches,
            off_cpu: (&k.total_off_cpu).into(),
            off_cpu_histogram: (&k.off_cpu_histogram).into(),
            run_queue_latency_histogram: (&k.run_queue_latency_histogram).into(),
            wakeups_received: k.total_wakes,
            top_wakers: k.top_wakers.iter().map(Into::into).collect(),
            poll: (&k.poll).into(),
            sleep: (&k.sleep).into(),
        }
    }
}

/// One read of a kernel source (see [`wakemeter::KernelSample`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, uniffi::Record)]
pub struct KernelSample {
    /// Name of the source, e.g. "ebpf".
    pub source: String,
    /// Process id the source observes.
    pub pid: u32,
    /// Live threads of the target with their counters.
    pub threads: Vec<KernelThreadStats>,
    /// Events lost because a bounded kernel map was full.
    pub dropped_events: u64,
}

impl From<&wakemeter::KernelSample> for KernelSample {
    fn from(k: &wakemeter::KernelSample) -> Self {
        KernelSample {
            source: k.source.clone(),
            pid: k.pid,
            threads: k.threads.iter().map(Into::into).collect(),
            dropped_events: k.total_dropped_events,
        }
    }
}

/// Everything measured at one instant (see [`wakemeter::Snapshot`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct Snapshot {
    /// Sequence number, from 0.
    pub seq: u64,
    /// Monotonic timestamp, in nanoseconds (only differences are meaningful).
    pub monotonic_ns: u64,
    /// Wall-clock time, in nanoseconds since the Unix epoch.
    pub unix_time_ns: u64,
    /// Process-wide counters.
    pub process: ProcessSample,
    /// One record per live thread.
    pub threads: Vec<ThreadSample>,
    /// Whether voluntary/involuntary switch counts were read.
    pub switch_split_read: bool,
    /// CPU time the sampler spent on this snapshot, in nanoseconds.
    pub sampler_cost_ns: u64,
    /// CPU time the sampler spent on all snapshots so far, in nanoseconds.
    pub sampler_cpu_time_ns: u64,
    /// Every loop probe of the sampler (cumulative counters).
    pub loops: Vec<LoopStats>,
    /// Every sleep probe of the sampler (cumulative counters).
    pub sleeps: Vec<SleepStats>,
    /// What an attached kernel source measured.
    pub kernel: Option<KernelSample>,
    /// What made this snapshot less complete than configured.
    pub warnings: Vec<SampleWarning>,
}

impl From<&wakemeter::Snapshot> for Snapshot {
    fn from(s: &wakemeter::Snapshot) -> Self {
        Snapshot {
            seq: s.seq,
            monotonic_ns: s.monotonic_ns,
            unix_time_ns: s.unix_time_ns,
            process: (&s.process).into(),
            threads: s.threads.iter().map(Into::into).collect(),
            switch_split_read: s.switch_split_read,
            sampler_cost_ns: s.sampler_cost_ns,
            sampler_cpu_time_ns: s.total_sampler_cpu_time_ns,
            loops: s.loops.iter().map(Into::into).collect(),
            sleeps: s.sleeps.iter().map(Into::into).collect(),
            kernel: s.kernel.as_ref().map(Into::into),
            warnings: s.warnings.iter().map(Into::into).collect(),
        }
    }
}

/// Rates of one thread over an interval (see [`wakemeter::ThreadInterval`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct ThreadInterval {
    /// OS thread id.
    pub tid: u64,
    /// Sampler-assigned identity.
    pub serial: u64,
    /// Thread name at the end of the interval.
    pub name: String,
    /// Whether the thread first appeared during the interval.
    pub started_in_interval: bool,
    /// CPU time used during the interval, in nanoseconds.
    pub cpu_time_ns: u64,
    /// CPU in percent of one core (0–100).
    pub cpu_percent: f64,
    /// Timeslices (≈ context switches) during the interval.
    pub timeslices: Option<u64>,
    /// Context switches (wakeups) per second.
    pub switches_per_sec: Option<f64>,
    /// Voluntary switches during the interval.
    pub voluntary_switches: Option<u64>,
    /// Voluntary switches per second.
    pub voluntary_switches_per_sec: Option<f64>,
    /// Involuntary switches (preemptions) during the interval.
    pub involuntary_switches: Option<u64>,
    /// Involuntary switches per second.
    pub involuntary_switches_per_sec: Option<f64>,
    /// Run-queue wait during the interval, in nanoseconds.
    pub run_queue_wait_ns: Option<u64>,
    /// Run-queue wait in percent of the interval.
    pub run_queue_wait_percent: Option<f64>,
    /// What a kernel source (eBPF) saw of the thread over the interval.
    pub kernel: Option<KernelThreadInterval>,
}

/// What a kernel source (eBPF) saw of one thread over an interval (see
/// [`wakemeter::KernelThreadInterval`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct KernelThreadInterval {
    /// Time on CPU, in percent of one core.
    pub on_cpu_percent: f64,
    /// Voluntary switches per second.
    pub voluntary_switches_per_sec: f64,
    /// Involuntary switches per second.
    pub involuntary_switches_per_sec: f64,
    /// Off-CPU time during the interval by cause, in nanoseconds.
    pub off_cpu: OffCpuTime,
    /// Times the thread was woken, per second.
    pub wakeups_per_sec: f64,
    /// Poll-family syscalls per second.
    pub poll_calls_per_sec: f64,
    /// Share of poll calls that returned 0, 0 to 1.
    pub poll_zero_return_ratio: f64,
    /// Share of poll calls with a zero timeout, 0 to 1.
    pub poll_zero_timeout_ratio: f64,
    /// Sleep syscalls per second.
    pub sleeps_per_sec: f64,
    /// Mean requested sleep, in nanoseconds.
    pub mean_sleep_requested_ns: u64,
    /// Mean actual sleep, in nanoseconds.
    pub mean_sleep_actual_ns: u64,
    /// Top wakers since the source attached, most first.
    pub top_wakers: Vec<Waker>,
}

impl From<&wakemeter::KernelThreadInterval> for KernelThreadInterval {
    fn from(k: &wakemeter::KernelThreadInterval) -> Self {
        KernelThreadInterval {
            on_cpu_percent: k.on_cpu_percent,
            voluntary_switches_per_sec: k.voluntary_switches_per_sec,
            involuntary_switches_per_sec: k.involuntary_switches_per_sec,
            off_cpu: (&k.off_cpu).into(),
            wakeups_per_sec: k.wakes_per_sec,
            poll_calls_per_sec: k.poll_calls_per_sec,
            poll_zero_return_ratio: k.idle_poll_ratio,
            poll_zero_timeout_ratio: k.zero_timeout_poll_ratio,
            sleeps_per_sec: k.sleeps_per_sec,
            mean_sleep_requested_ns: k.mean_sleep_requested_ns,
            mean_sleep_actual_ns: k.mean_sleep_actual_ns,
            top_wakers: k.top_wakers.iter().map(Waker::from).collect(),
        }
    }
}

impl From<&wakemeter::ThreadInterval> for ThreadInterval {
    fn from(t: &wakemeter::ThreadInterval) -> Self {
        ThreadInterval {
            tid: t.tid,
            serial: t.serial,
            name: t.name.clone(),
            started_in_interval: t.started_in_interval,
            cpu_time_ns: t.cpu_time_ns,
            cpu_percent: t.cpu_percent,
            timeslices: t.switches,
            switches_per_sec: t.switches_per_sec,
            voluntary_switches: t.voluntary_switches,
            voluntary_switches_per_sec: t.voluntary_switches_per_sec,
            involuntary_switches: t.involuntary_switches,
            involuntary_switches_per_sec: t.involuntary_switches_per_sec,
            run_queue_wait_ns: t.run_queue_wait_ns,
            run_queue_wait_percent: t.run_queue_wait_percent,
            kernel: t.kernel.as_ref().map(KernelThreadInterval::from),
        }
    }
}

/// Process-wide rates over an interval (see [`wakemeter::ProcessInterval`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct ProcessInterval {
    /// Process id.
    pub pid: u32,
    /// Process CPU time used during the interval, in nanoseconds.
    pub cpu_time_ns: u64,
    /// CPU in percent of one core (up to `cpu_count × 100`).
    pub cpu_percent: f64,
    /// Resident set size at the end, in bytes.
    pub rss_bytes: u64,
    /// Change of the resident set size, in bytes (negative: shrank).
    pub rss_change_bytes: i64,
    /// Peak resident set size at the end, in bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Threads at the end.
    pub thread_count: u32,
    /// Apple interrupt wakeups per second.
    pub interrupt_wakeups_per_sec: Option<f64>,
    /// Apple platform-idle wakeups per second.
    pub platform_idle_wakeups_per_sec: Option<f64>,
}

impl From<&wakemeter::ProcessInterval> for ProcessInterval {
    fn from(p: &wakemeter::ProcessInterval) -> Self {
        ProcessInterval {
            pid: p.pid,
            cpu_time_ns: p.cpu_time_ns,
            cpu_percent: p.cpu_percent,
            rss_bytes: p.rss_bytes,
            rss_change_bytes: p.rss_change_bytes,
            peak_rss_bytes: p.peak_rss_bytes,
            thread_count: p.thread_count,
            interrupt_wakeups_per_sec: p.interrupt_wakeups_per_sec,
            platform_idle_wakeups_per_sec: p.platform_idle_wakeups_per_sec,
        }
    }
}

/// One instrumented loop over an interval (see [`wakemeter::LoopInterval`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct LoopInterval {
    /// Probe id.
    pub id: u64,
    /// Probe name.
    pub name: String,
    /// Thread that last waited, if any.
    pub tid: Option<u64>,
    /// Wakeups (returns from the wait) during the interval.
    pub wakeups: u64,
    /// Wakeups per second.
    pub wakeups_per_sec: f64,
    /// Wakeups that found 0 events.
    pub idle_wakeups: u64,
    /// `idle_wakeups / wakeups` (0 to 1).
    pub idle_wakeup_ratio: f64,
    /// Wakeups after the full timeout elapsed.
    pub timed_out_wakeups: u64,
    /// Wakeups before a finite timeout elapsed.
    pub early_wakeups: u64,
    /// Waits with a zero timeout (non-blocking polls).
    pub zero_timeout_waits: u64,
    /// `zero_timeout_waits / wakeups` (0 to 1).
    pub zero_timeout_ratio: f64,
    /// Ready events reported.
    pub events: u64,
    /// `events / wakeups`.
    pub events_per_wakeup: f64,
    /// Time inside waits, in nanoseconds.
    pub wait_ns: u64,
    /// Time between waits (doing work), in nanoseconds.
    pub busy_ns: u64,
    /// Loop utilization, `busy / (busy + wait)` (0 to 1).
    pub utilization: f64,
    /// Poll delays of timed-out wakeups, in nanoseconds.
    pub poll_delay_histogram: Log2Histogram,
    /// Mean poll delay of timed-out wakeups, in nanoseconds.
    pub mean_poll_delay_ns: u64,
    /// 99th percentile poll delay (lower bound of its log2 bucket), in nanoseconds.
    pub p99_poll_delay_ns: Option<u64>,
    /// Length of the wait in progress at the end, in nanoseconds.
    pub current_wait_ns: u64,
}

impl From<&wakemeter::LoopInterval> for LoopInterval {
    fn from(l: &wakemeter::LoopInterval) -> Self {
        LoopInterval {
            id: l.id,
            name: l.name.clone(),
            tid: l.tid,
            wakeups: l.wakeups,
            wakeups_per_sec: l.wakeups_per_sec,
            idle_wakeups: l.idle_wakeups,
            idle_wakeup_ratio: l.idle_wakeup_ratio,
            timed_out_wakeups: l.timed_out_wakeups,
            early_wakeups: l.early_wakeups,
            zero_timeout_waits: l.zero_timeout_waits,
            zero_timeout_ratio: l.zero_timeout_ratio,
            events: l.events,
            events_per_wakeup: l.events_per_wakeup,
            wait_ns: l.wait_ns,
            busy_ns: l.busy_ns,
            utilization: l.utilization,
            poll_delay_histogram: (&l.poll_delay_histogram).into(),
            mean_poll_delay_ns: l.mean_poll_delay_ns,
            p99_poll_delay_ns: l.p99_poll_delay_ns,
            current_wait_ns: l.current_wait_ns,
        }
    }
}

/// One instrumented sleep site over an interval (see [`wakemeter::SleepInterval`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct SleepInterval {
    /// Probe id.
    pub id: u64,
    /// Probe name.
    pub name: String,
    /// Thread that last slept, if any.
    pub tid: Option<u64>,
    /// Sleeps completed during the interval.
    pub calls: u64,
    /// Sleeps per second.
    pub sleeps_per_sec: f64,
    /// Mean requested sleep, in nanoseconds.
    pub mean_requested_ns: u64,
    /// Mean actual sleep, in nanoseconds.
    pub mean_actual_ns: u64,
    /// Mean oversleep (actual − requested), in nanoseconds.
    pub mean_oversleep_ns: u64,
    /// CPU time consumed inside the sleep calls, in nanoseconds.
    pub cpu_ns: u64,
    /// `cpu_ns / duration` in percent of one core.
    pub cpu_percent: f64,
    /// CPU time per sleep call, in nanoseconds.
    pub cpu_per_sleep_ns: u64,
    /// Oversleeps during the interval, in nanoseconds.
    pub oversleep_histogram: Log2Histogram,
    /// 99th percentile oversleep (lower bound of its log2 bucket), in nanoseconds.
    pub p99_oversleep_ns: Option<u64>,
}

impl From<&wakemeter::SleepInterval> for SleepInterval {
    fn from(s: &wakemeter::SleepInterval) -> Self {
        SleepInterval {
            id: s.id,
            name: s.name.clone(),
            tid: s.tid,
            calls: s.calls,
            sleeps_per_sec: s.sleeps_per_sec,
            mean_requested_ns: s.mean_requested_ns,
            mean_actual_ns: s.mean_actual_ns,
            mean_oversleep_ns: s.mean_oversleep_ns,
            cpu_ns: s.cpu_ns,
            cpu_percent: s.cpu_percent,
            cpu_per_sleep_ns: s.cpu_per_sleep_ns,
            oversleep_histogram: (&s.oversleep_histogram).into(),
            p99_oversleep_ns: s.p99_oversleep_ns,
        }
    }
}

/// The difference of two snapshots, with rates (see [`wakemeter::Interval`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct Interval {
    /// Sequence number of the starting snapshot.
    pub from_seq: u64,
    /// Sequence number of the ending snapshot.
    pub to_seq: u64,
    /// Monotonic timestamp of the ending snapshot, in nanoseconds.
    pub end_monotonic_ns: u64,
    /// Length of the interval, in nanoseconds.
    pub duration_ns: u64,
    /// Process-wide rates.
    pub process: ProcessInterval,
    /// Per-thread rates, highest CPU first.
    pub threads: Vec<ThreadInterval>,
    /// Threads that exited during the interval.
    pub threads_exited: u32,
    /// Threads alive at the end with no kernel (eBPF) record at the end;
    /// `None` without a kernel sample at both ends.
    pub kernel_uncovered_threads: Option<u32>,
    /// Instrumented loops alive at the end.
    pub loops: Vec<LoopInterval>,
    /// Instrumented sleep sites alive at the end.
    pub sleeps: Vec<SleepInterval>,
    /// CPU time the sampler spent during the interval, in nanoseconds.
    pub sampler_cpu_time_ns: u64,
    /// The sampler's own CPU in percent of one core.
    pub sampler_cpu_percent: f64,
}

impl From<&wakemeter::Interval> for Interval {
    fn from(i: &wakemeter::Interval) -> Self {
        Interval {
            from_seq: i.from_seq,
            to_seq: i.to_seq,
            end_monotonic_ns: i.end_monotonic_ns,
            duration_ns: i.duration_ns,
            process: (&i.process).into(),
            threads: i.threads.iter().map(Into::into).collect(),
            threads_exited: i.threads_exited,
            kernel_uncovered_threads: i.kernel_uncovered_threads,
            loops: i.loops.iter().map(Into::into).collect(),
            sleeps: i.sleeps.iter().map(Into::into).collect(),
            sampler_cpu_time_ns: i.sampler_cpu_time_ns,
            sampler_cpu_percent: i.sampler_cpu_percent,
        }
    }
}

/// Counters about the sampler itself (see [`wakemeter::SamplerStats`]).
#[derive(Debug, Clone, PartialEq, Serialize, uniffi::Record)]
pub struct SamplerStats {
    /// Snapshots taken so far.
    pub samples_taken: u64,
    /// CPU time spent taking them, in nanoseconds.
    pub sampler_cpu_time_ns: u64,
    /// Sampler CPU in percent of one core since the first snapshot.
    pub sampler_cpu_percent: f64,
    /// Mean CPU time per snapshot, in nanoseconds.
    pub mean_sample_cost_ns: u64,
    /// Snapshots currently in history.
    pub history_len: u32,
    /// Bytes one thread-sample occupies in history.
    pub bytes_per_stored_thread_sample: u32,
    /// Bytes the whole history holds (threads, packed probe and kernel counters).
    pub history_bytes: u64,
    /// Whether background sampling is running (false once it stopped, also on a fatal error).
    pub running: bool,
    /// The last error of the background thread, if any.
    pub last_error: Option<String>,
}

impl From<&wakemeter::SamplerStats> for SamplerStats {
    fn from(s: &wakemeter::SamplerStats) -> Self {
        SamplerStats {
            samples_taken: s.total_samples,
            sampler_cpu_time_ns: s.total_sampler_cpu_time_ns,
            sampler_cpu_percent: s.sampler_cpu_percent,
            mean_sample_cost_ns: s.mean_sample_cost_ns,
            history_len: s.history_len,
            bytes_per_stored_thread_sample: s.bytes_per_stored_thread_sample,
            history_bytes: s.history_bytes,
            running: s.running,
            last_error: s.last_error.clone(),
        }
    }
}
