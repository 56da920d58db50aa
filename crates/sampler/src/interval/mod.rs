//! Intervals: the difference of two snapshots, with derived rates. This
//! module holds the records; `compute` derives them from two snapshots.

use serde::{Deserialize, Serialize};

use crate::histogram::Log2Histogram;
use crate::kernel::{OffCpuTime, Syscall, Waker};
use crate::model::Snapshot;

mod compute;
pub(crate) mod groups;

pub(crate) use compute::{
    SharedEnd, between_in_history, between_in_history_reusing, between_in_history_sharing,
    between_in_history_without_kernel, between_stored, per_sec, percent,
};

/// Rates of one thread over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct ThreadInterval {
    /// OS thread id (see [`ThreadSample::tid`](crate::ThreadSample::tid)).
    pub tid: u64,
    /// Sampler-assigned identity (see [`ThreadSample::serial`](crate::ThreadSample::serial)).
    pub serial: u64,
    /// Thread name at the end of the interval.
    pub name: String,
    /// Whether the thread first appeared during the interval (its counters
    /// then count from the thread's start).
    pub started_in_interval: bool,
    /// CPU time used during the interval, in nanoseconds.
    pub cpu_time_ns: u64,
    /// `cpu_time_ns / duration`, in percent of one core (0–100 per thread).
    pub cpu_percent: f64,
    /// Context switches (times scheduled onto a CPU) during the interval.
    pub switches: Option<u64>,
    /// `switches` per second.
    pub switches_per_sec: Option<f64>,
    /// Voluntary switches during the interval. When an end of the interval
    /// did not read the split, this covers the outermost snapshots inside
    /// it that did; `None` if fewer than two did.
    pub voluntary_switches: Option<u64>,
    /// `voluntary_switches` per second: how often the thread blocked or slept.
    pub voluntary_switches_per_sec: Option<f64>,
    /// Involuntary switches (preemptions) during the interval.
    pub involuntary_switches: Option<u64>,
    /// `involuntary_switches` per second.
    pub involuntary_switches_per_sec: Option<f64>,
    /// Run-queue wait during the interval, in nanoseconds.
    pub run_queue_wait_ns: Option<u64>,
    /// `run_queue_wait_ns / duration`, in percent: time the thread was
    /// runnable but waiting for a CPU, at most 100. The kernel credits a
    /// wait when it ends, so under overload a wait begun before the
    /// interval makes `run_queue_wait_ns` exceed its duration; the share
    /// is capped there.
    pub run_queue_wait_percent: Option<f64>,
    /// What a kernel source (eBPF) saw of this thread over the interval;
    /// `None` without a kernel source or when an end lacks its sample.
    pub kernel: Option<KernelThreadInterval>,
}

/// What a kernel source (eBPF) saw of one thread over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct KernelThreadInterval {
    /// Time on CPU, in percent of one core, from the kernel source: the
    /// wall time between the thread's switch-in and switch-out
    /// (`sched_switch`). [`ThreadInterval::cpu_percent`] is the scheduler's
    /// task clock instead (`/proc`, the thread CPU clock). They agree
    /// within a fraction of a point on a steady thread (ACCURACY.md), and
    /// differ where the task clock leaves time out: time a hypervisor stole
    /// while the thread ran (paravirt steal accounting) and, with IRQ time
    /// accounting, interrupts handled on its CPU; in the first interval
    /// after attaching, which misses a running stretch that began before;
    /// and where the task clock adds time: after a wake that preempts (onto
    /// an idle CPU) the kernel skips the run queue's clock update at the
    /// next schedule, so the woken thread's run time counts from its wake,
    /// not its switch-in (7.4 µs a switch measured on a 2-vCPU VM: a 1 ms
    /// timer loop at 1.6% here against 2.3% in /proc).
    pub on_cpu_percent: f64,
    /// Voluntary switches per second, from the scheduler tracepoint.
    pub voluntary_switches_per_sec: f64,
    /// Involuntary switches (preemptions) per second.
    pub involuntary_switches_per_sec: f64,
    /// Off-CPU time during the interval by cause, in nanoseconds.
    pub off_cpu: OffCpuTime,
    /// Time blocked (off CPU and not waiting for a CPU), in percent of the
    /// interval: 95 for a loop that waits 95% of the time, near 0 for a
    /// thread that spins. It is the off-CPU time less the thread's
    /// run-queue wait ([`ThreadInterval::run_queue_wait_ns`], after
    /// preemptions and after wakes) and less the CPU time the scheduler
    /// charged beyond the switch tracepoints' (its wait from a wake to the
    /// switch-in, see [`KernelThreadInterval::on_cpu_percent`]), so that
    /// it, [`ThreadInterval::cpu_percent`] and the run-queue wait share
    /// add up to 100; without the run-queue wait, the off-CPU time less
    /// the preempted stretches.
    pub blocked_percent: f64,
    /// Wakes per second: times the thread was made runnable (`sched_waking`).
    pub wakes_per_sec: f64,
    /// Wakes per second from interrupt context (a timer or an I/O completion).
    pub interrupt_wakes_per_sec: f64,
    /// Wakes per second by other threads of the same process.
    pub process_thread_wakes_per_sec: f64,
    /// Wakes per second by threads of other processes.
    pub other_process_wakes_per_sec: f64,
    /// Poll-family syscalls per second.
    pub poll_calls_per_sec: f64,
    /// Poll-family calls per second that blocked: each return is a wakeup
    /// that ended a blocking wait.
    pub blocking_polls_per_sec: f64,
    /// Poll-family calls per second that returned nothing without blocking:
    /// polls that neither found work nor waited for it.
    pub idle_nonblocking_polls_per_sec: f64,
    /// Share of those calls that were idle (returned 0: nothing ready), 0 to 1.
    pub idle_poll_ratio: f64,
    /// Share of those calls made with a zero timeout (they never wait), 0 to 1.
    pub zero_timeout_poll_ratio: f64,
    /// `nanosleep`/`clock_nanosleep` calls per second.
    pub sleeps_per_sec: f64,
    /// Sleep calls per second ended early by a signal (`EINTR`).
    pub interrupted_sleeps_per_sec: f64,
    /// Mean requested sleep of the calls whose request is known (see
    /// [`crate::SleepSyscallStats::total_requested_ns`]), in nanoseconds;
    /// 0 when none is known (`unknown_request_sleeps` then equals the calls).
    pub mean_sleep_requested_ns: u64,
    /// Sleep calls during the interval whose requested duration is unknown
    /// (an absolute deadline on a clock such as `CLOCK_TAI`).
    pub unknown_request_sleeps: u64,
    /// Mean actual sleep (from the call's first block to its return), in
    /// nanoseconds, over all calls, interrupted ones included.
    pub mean_sleep_actual_ns: u64,
    /// Calls per second of each poll-family and sleep syscall, in
    /// [`Syscall::ALL`] order, syscalls without calls left out.
    pub calls_by_syscall: Vec<SyscallRate>,
    /// The threads that woke it most since the source attached, most first.
    pub top_wakers: Vec<Waker>,
    /// `futex` waits with a timeout per second that returned (see
    /// [`KernelThreadStats::total_timed_futex_waits`](crate::KernelThreadStats::total_timed_futex_waits)).
    /// Absent from reports written before it existed (reads as 0).
    #[serde(default)]
    pub timed_futex_waits_per_sec: f64,
    /// Those of them per second that timed out (`ETIMEDOUT`): the thread's
    /// own timer ended the wait, not another thread's `FUTEX_WAKE`.
    #[serde(default)]
    pub futex_timeouts_per_sec: f64,
    /// The descriptors its last poll calls found ready without blocking,
    /// as of the end of the interval (see
    /// [`KernelThreadStats::ready_fds`](crate::KernelThreadStats::ready_fds)).
    #[serde(default)]
    pub ready_fds: Vec<crate::ReadyFd>,
}

/// How often one syscall returned over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SyscallRate {
    /// Which syscall.
    pub syscall: Syscall,
    /// Its returns per second.
    pub calls_per_sec: f64,
}

/// Process-wide rates over an interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct ProcessInterval {
    /// Process id.
    pub pid: u32,
    /// Process CPU time used during the interval (exited threads included), in ns.
    pub cpu_time_ns: u64,
    /// `cpu_time_ns / duration` in percent of one core (up to `cpu_count × 100`).
    pub cpu_percent: f64,
    /// Resident set size at the end, in bytes.
    pub rss_bytes: u64,
    /// Change of the resident set size over the interval, in bytes (negative: shrank).
    pub rss_change_bytes: i64,
    /// Peak resident set size at the end, in bytes, where known.
    pub peak_rss_bytes: Option<u64>,
    /// Threads at the end of the interval.
    pub thread_count: u32,
    /// Apple interrupt wakeups per second (see [`ProcessSample::total_interrupt_wakeups`](crate::ProcessSample::total_interrupt_wakeups)).
    pub interrupt_wakeups_per_sec: Option<f64>,
    /// Apple platform-idle wakeups per second ("Idle Wake Ups").
    pub platform_idle_wakeups_per_sec: Option<f64>,
}

/// One instrumented loop over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct LoopInterval {
    /// Probe id (see [`LoopStats::id`](crate::LoopStats::id)).
    pub id: u64,
    /// Probe name.
    pub name: String,
    /// What kind of loop it is (see [`LoopStats::kind`](crate::LoopStats::kind)).
    /// Absent from reports written before it existed (reads as `application`).
    #[serde(default)]
    pub kind: crate::LoopKind,
    /// Thread that last waited, if any.
    pub tid: Option<u64>,
    /// Wakeups (returns from the wait) during the interval.
    pub wakeups: u64,
    /// `wakeups` per second.
    pub wakeups_per_sec: f64,
    /// Wakeups that found 0 events.
    pub idle_wakeups: u64,
    /// `idle_wakeups / wakeups` (0 to 1; 0 without wakeups).
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
    /// `events / wakeups` (0 without wakeups).
    pub events_per_wakeup: f64,
    /// Time inside waits, in nanoseconds.
    pub wait_ns: u64,
    /// Time between waits (doing work), in nanoseconds.
    pub busy_ns: u64,
    /// Loop utilization, `busy / (busy + wait)` (0 to 1; like Node's ELU).
    pub utilization: f64,
    /// Poll delays of timed-out wakeups during the interval, in ns (log2 buckets).
    pub poll_delay_histogram: Log2Histogram,
    /// Mean poll delay of timed-out wakeups, in nanoseconds.
    pub mean_poll_delay_ns: u64,
    /// 99th percentile poll delay (lower bound of its log2 bucket), in nanoseconds.
    pub p99_poll_delay_ns: Option<u64>,
    /// Length of the wait in progress at the end, in nanoseconds (0 if not waiting).
    pub current_wait_ns: u64,
}

/// One instrumented sleep site over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SleepInterval {
    /// Probe id (see [`SleepStats::id`](crate::SleepStats::id)).
    pub id: u64,
    /// Probe name.
    pub name: String,
    /// Thread that last slept, if any.
    pub tid: Option<u64>,
    /// Sleeps completed during the interval.
    pub calls: u64,
    /// `calls` per second.
    pub sleeps_per_sec: f64,
    /// Mean requested sleep, in nanoseconds.
    pub mean_requested_ns: u64,
    /// Mean actual sleep, in nanoseconds.
    pub mean_actual_ns: u64,
    /// Mean oversleep (actual − requested), in nanoseconds.
    pub mean_oversleep_ns: u64,
    /// CPU time consumed inside the sleep calls, in nanoseconds.
    pub cpu_ns: u64,
    /// `cpu_ns / duration` in percent of one core: what the sleeping itself costs.
    pub cpu_percent: f64,
    /// CPU time per sleep call, in nanoseconds.
    pub cpu_per_sleep_ns: u64,
    /// Oversleeps during the interval, in ns (log2 buckets).
    pub oversleep_histogram: Log2Histogram,
    /// 99th percentile oversleep (lower bound of its log2 bucket), in nanoseconds.
    pub p99_oversleep_ns: Option<u64>,
}

/// The difference of two snapshots, with rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Interval {
    /// Sequence number of the starting snapshot.
    pub from_seq: u64,
    /// Sequence number of the ending snapshot.
    pub to_seq: u64,
    /// Monotonic timestamp of the ending snapshot, in nanoseconds.
    pub end_monotonic_ns: u64,
    /// Length of the interval, in nanoseconds (monotonic clock).
    pub duration_ns: u64,
    /// Process-wide rates.
    pub process: ProcessInterval,
    /// Per-thread rates for threads alive at the end, ordered by CPU time, highest first.
    pub threads: Vec<ThreadInterval>,
    /// Threads seen by the sampler at the start and gone at the end (from
    /// the thread lists of the two snapshots: a thread that started and
    /// exited between them is not seen). [`Interval::kernel_thread_exits`]
    /// counts every exit.
    pub threads_exited: u32,
    /// Threads of the target that exited during the interval, every one,
    /// counted by the kernel source at each exit (eBPF
    /// `sched_process_exit`): a process that runs hundreds of short-lived
    /// threads per second shows them here, not in
    /// [`Interval::threads_exited`]. `None` without a kernel sample at both
    /// ends.
    #[serde(default)]
    pub kernel_thread_exits: Option<u64>,
    /// Threads alive at the end that the kernel source (eBPF) has no record
    /// of at the end: its thread map was full, or they have not been
    /// scheduled since it attached. `None` without a kernel sample at both ends.
    pub kernel_uncovered_threads: Option<u32>,
    /// Instrumented loops alive at the end.
    pub loops: Vec<LoopInterval>,
    /// Instrumented sleep sites alive at the end.
    pub sleeps: Vec<SleepInterval>,
    /// CPU time the sampler spent during the interval, in nanoseconds.
    pub sampler_cpu_time_ns: u64,
    /// `sampler_cpu_time_ns / duration`, in percent of one core: the overhead you pay.
    pub sampler_cpu_percent: f64,
}

impl Interval {
    /// The interval from snapshot `from` to snapshot `to` (`to` taken later).
    /// Threads are matched by serial, never by TID.
    pub fn between(from: &Snapshot, to: &Snapshot) -> Interval {
        compute::compute(from.into(), &from.threads, to.into(), &to.threads, None)
    }

    /// The thread with this serial, if it was alive at the end.
    pub fn thread_by_serial(&self, serial: u64) -> Option<&ThreadInterval> {
        self.threads.iter().find(|t| t.serial == serial)
    }

    /// Duration in seconds.
    pub fn duration_secs(&self) -> f64 {
        self.duration_ns as f64 / 1e9
    }
}
