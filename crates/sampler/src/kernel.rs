//! The seam for kernel-side sources (eBPF on Linux hosts).
//!
//! The core crate knows nothing about eBPF or aya: a kernel source lives in
//! its own crate (`wakemeter-ebpf`), implements [`KernelSource`], and is
//! handed to [`crate::SamplerBuilder::with_kernel_source`]. Each snapshot then
//! carries a [`KernelSample`], and the findings engine uses it for threads
//! that no in-process probe instruments (e.g. an unmodified Envoy).

use serde::{Deserialize, Serialize};

use crate::histogram::Log2Histogram;

/// Off-CPU time of one thread split by why it left the CPU, in nanoseconds,
/// cumulative since the source attached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct OffCpuTime {
    /// Blocked in `nanosleep`/`clock_nanosleep`.
    pub sleep_ns: u64,
    /// Blocked in `futex` (locks, condition variables).
    pub lock_ns: u64,
    /// Blocked in a poll-family syscall (poll, ppoll, select, pselect6, epoll_wait*).
    pub poll_ns: u64,
    /// Blocked uninterruptibly (disk or other I/O, `D` state) outside the above.
    pub io_ns: u64,
    /// Preempted: runnable and waiting for a CPU (run-queue wait after an involuntary switch).
    pub preempted_ns: u64,
    /// Blocked for any other reason (other syscalls, signals, page faults).
    pub other_ns: u64,
}

impl OffCpuTime {
    /// The causes, in the order of [`OffCpuTime::by_cause`]: the field
    /// names without `_ns`.
    pub const CAUSES: [&'static str; 6] = ["sleep", "lock", "poll", "io", "preempted", "other"];

    /// The time of each cause, in nanoseconds, in the order of [`OffCpuTime::CAUSES`].
    pub fn by_cause(&self) -> [u64; 6] {
        [
            self.sleep_ns,
            self.lock_ns,
            self.poll_ns,
            self.io_ns,
            self.preempted_ns,
            self.other_ns,
        ]
    }

    /// The record of these times, in nanoseconds, in the order of [`OffCpuTime::CAUSES`].
    pub fn from_causes(ns: [u64; 6]) -> Self {
        let [sleep_ns, lock_ns, poll_ns, io_ns, preempted_ns, other_ns] = ns;
        OffCpuTime {
            sleep_ns,
            lock_ns,
            poll_ns,
            io_ns,
            preempted_ns,
            other_ns,
        }
    }

    /// Sum of all causes, in nanoseconds.
    pub fn total_ns(&self) -> u64 {
        self.by_cause()
            .iter()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// A thread that woke another one, with how often.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Waker {
    /// Waker's TID (0 for interrupts/idle).
    pub tid: u64,
    /// Waker's name (its `comm`) at the time of the wake.
    pub name: String,
    /// Wakes of the target thread by this waker since the source attached.
    pub total_wakes: u64,
}

/// A poll-family or sleep syscall, as counted one by one
/// ([`KernelThreadStats::calls_by_syscall`]). The list is bounded: these
/// nine are all the kernel source tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Syscall {
    /// `poll(2)` (x86_64 only; aarch64 libcs call `ppoll`).
    Poll,
    /// `ppoll(2)`.
    Ppoll,
    /// `select(2)` (x86_64 only; aarch64 libcs call `pselect6`).
    Select,
    /// `pselect6(2)`, behind `pselect(3)` (and `select(3)` on aarch64).
    Pselect6,
    /// `epoll_wait(2)` (x86_64 only; aarch64 libcs call `epoll_pwait`).
    EpollWait,
    /// `epoll_pwait(2)`.
    EpollPwait,
    /// `epoll_pwait2(2)` (timeout as a timespec).
    EpollPwait2,
    /// `nanosleep(2)`, behind `usleep(3)` and `sleep(3)` in some libcs.
    Nanosleep,
    /// `clock_nanosleep(2)`, behind `nanosleep(3)` in glibc.
    ClockNanosleep,
}

impl Syscall {
    /// Every syscall, in the order of the kernel side's counters.
    pub const ALL: [Syscall; 9] = [
        Syscall::Poll,
        Syscall::Ppoll,
        Syscall::Select,
        Syscall::Pselect6,
        Syscall::EpollWait,
        Syscall::EpollPwait,
        Syscall::EpollPwait2,
        Syscall::Nanosleep,
        Syscall::ClockNanosleep,
    ];

    /// Its name as in the man pages, e.g. `"epoll_pwait"`.
    pub fn name(self) -> &'static str {
        match self {
            Syscall::Poll => "poll",
            Syscall::Ppoll => "ppoll",
            Syscall::Select => "select",
            Syscall::Pselect6 => "pselect6",
            Syscall::EpollWait => "epoll_wait",
            Syscall::EpollPwait => "epoll_pwait",
            Syscall::EpollPwait2 => "epoll_pwait2",
            Syscall::Nanosleep => "nanosleep",
            Syscall::ClockNanosleep => "clock_nanosleep",
        }
    }

    /// Whether it is of the poll family (else a sleep).
    pub fn is_poll(self) -> bool {
        !matches!(self, Syscall::Nanosleep | Syscall::ClockNanosleep)
    }
}

/// Returns of one syscall, cumulative since the source attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SyscallCalls {
    /// Which syscall.
    pub syscall: Syscall,
    /// Calls of it that returned.
    pub total_calls: u64,
}

impl SyscallCalls {
    /// `total_calls` returns of `syscall`.
    pub fn new(syscall: Syscall, total_calls: u64) -> SyscallCalls {
        SyscallCalls {
            syscall,
            total_calls,
        }
    }
}

/// Poll-family syscalls of one thread (poll, ppoll, select, pselect6,
/// epoll_wait, epoll_pwait, epoll_pwait2), cumulative since attach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct PollSyscallStats {
    /// Calls that returned.
    pub total_calls: u64,
    /// Idle calls: calls that returned 0 (nothing ready).
    pub total_idle_calls: u64,
    /// Calls made with a zero timeout (non-blocking: they never wait).
    pub total_zero_timeout_calls: u64,
    /// Calls made with no timeout (block until an event).
    pub total_infinite_timeout_calls: u64,
    /// Requested timeouts of calls with a finite timeout, in nanoseconds (log2 buckets).
    pub timeout_histogram: Log2Histogram,
    /// Time spent blocked in the calls, from each call's first block to its
    /// return, in nanoseconds (calls that never block add 0).
    pub total_blocked_ns: u64,
    /// Calls that blocked (the thread left the CPU in them): each return is
    /// a wakeup that ended a blocking wait.
    pub total_blocked_calls: u64,
    /// Idle calls that never blocked: returned 0 (nothing ready) without
    /// the thread leaving the CPU. What a busy poller makes.
    pub total_idle_nonblocking_calls: u64,
}

/// `nanosleep`/`clock_nanosleep` calls of one thread, cumulative since attach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SleepSyscallStats {
    /// Calls that returned.
    pub total_calls: u64,
    /// Sum of requested durations of the calls whose request is known, in
    /// nanoseconds: relative sleeps, and absolute ones (`TIMER_ABSTIME`) on
    /// `CLOCK_MONOTONIC`, `CLOCK_BOOTTIME` or `CLOCK_REALTIME`, whose length
    /// counts from the clock's value when the call blocked.
    pub total_requested_ns: u64,
    /// Calls whose requested duration is known (the calls
    /// `total_requested_ns` sums); the others slept on another clock or
    /// passed an unreadable request.
    pub total_known_request_calls: u64,
    /// Sum of actual durations, from each call's first block to its
    /// return, in nanoseconds.
    pub total_actual_ns: u64,
    /// Calls ended early by a signal (`EINTR`, or a restart after a stop).
    pub total_interrupted_calls: u64,
    /// Time blocked in the interrupted calls, in nanoseconds (part of
    /// `total_actual_ns`).
    pub total_interrupted_ns: u64,
}

/// What a file descriptor is (its `/proc/<pid>/fd` link, and for a
/// socket the protocol table that lists it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FdKind {
    /// A TCP socket (IPv4 or IPv6).
    TcpSocket,
    /// A UDP socket (IPv4 or IPv6).
    UdpSocket,
    /// A Unix-domain socket.
    UnixSocket,
    /// Another socket (netlink, raw, ...).
    Socket,
    /// A pipe or FIFO.
    Pipe,
    /// An `eventfd`.
    Eventfd,
    /// A `timerfd`.
    Timerfd,
    /// A `signalfd`.
    Signalfd,
    /// An epoll instance.
    Epoll,
    /// A terminal.
    Tty,
    /// A regular file or another path (a device).
    File,
    /// Another anonymous inode.
    Other,
    /// Not known: closed before it was looked up, or not readable.
    Unknown,
}

impl FdKind {
    /// The kind in words ("an eventfd", "a TCP socket").
    pub fn describe(self) -> &'static str {
        match self {
            FdKind::TcpSocket => "a TCP socket",
            FdKind::UdpSocket => "a UDP socket",
            FdKind::UnixSocket => "a Unix socket",
            FdKind::Socket => "a socket",
            FdKind::Pipe => "a pipe",
            FdKind::Eventfd => "an eventfd",
            FdKind::Timerfd => "a timerfd",
            FdKind::Signalfd => "a signalfd",
            FdKind::Epoll => "an epoll descriptor",
            FdKind::Tty => "a terminal",
            FdKind::File => "a file",
            FdKind::Other => "an anonymous inode",
            FdKind::Unknown => "of unknown kind",
        }
    }

    /// Its number in the packed history.
    pub(crate) fn code(self) -> u64 {
        FdKind::ALL.iter().position(|k| *k == self).unwrap_or(0) as u64
    }

    /// The kind of a packed number; unknown numbers are [`FdKind::Unknown`].
    pub(crate) fn from_code(code: u64) -> FdKind {
        usize::try_from(code)
            .ok()
            .and_then(|i| FdKind::ALL.get(i))
            .copied()
            .unwrap_or(FdKind::Unknown)
    }

    const ALL: [FdKind; 13] = [
        FdKind::Unknown,
        FdKind::TcpSocket,
        FdKind::UdpSocket,
        FdKind::UnixSocket,
        FdKind::Socket,
        FdKind::Pipe,
        FdKind::Eventfd,
        FdKind::Timerfd,
        FdKind::Signalfd,
        FdKind::Epoll,
        FdKind::Tty,
        FdKind::File,
        FdKind::Other,
    ];
}

/// A descriptor a poll call found ready without blocking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct ReadyFd {
    /// The descriptor's number in the target process.
    pub fd: i32,
    /// What it is, looked up when the kernel source was read.
    pub kind: FdKind,
}

impl ReadyFd {
    /// Descriptor `fd`, of kind `kind`.
    pub fn new(fd: i32, kind: FdKind) -> ReadyFd {
        ReadyFd { fd, kind }
    }
}

/// What the kernel saw of one thread, cumulative since the source attached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct KernelThreadStats {
    /// TID.
    pub tid: u64,
    /// Thread name (its `comm`) as the kernel last saw it.
    pub name: String,
    /// Time on CPU, in nanoseconds (sum of sched_switch-to-sched_switch spans).
    pub total_on_cpu_ns: u64,
    /// Voluntary switches (`!preempt && prev_state != 0`).
    pub total_voluntary_switches: u64,
    /// Involuntary switches (preempted while runnable).
    pub total_involuntary_switches: u64,
    /// Off-CPU time by cause.
    pub total_off_cpu: OffCpuTime,
    /// Durations of off-CPU spans, in nanoseconds (log2 buckets).
    pub off_cpu_histogram: Log2Histogram,
    /// Wakeup-to-run latencies, in nanoseconds (log2 buckets): each wait
    /// on a run queue that followed a wakeup (not those after a
    /// preemption), as the kernel's own accounting measures it: the waits
    /// it adds to the thread's run-queue total in
    /// `/proc/<pid>/task/<tid>/schedstat`, on the run queue's clock from
    /// enqueue to switch-in. A wakeup that preempts at once (as on an idle
    /// CPU) counts 0 there, since the kernel skips that clock's update;
    /// tools that time from the wakeup on the monotonic clock show a few
    /// µs of idle exit for it. Empty on kernels without
    /// `CONFIG_SCHED_INFO`.
    pub run_queue_latency_histogram: Log2Histogram,
    /// Wakes: times this thread was made runnable by another thread or an
    /// interrupt (`sched_waking`).
    pub total_wakes: u64,
    /// Wakes from interrupt context: a timer (hrtimer, the tick) or an I/O
    /// completion (network, disk), not a thread.
    pub total_interrupt_wakes: u64,
    /// Wakes by other threads of the same process.
    pub total_process_thread_wakes: u64,
    /// Wakes by threads of other processes.
    pub total_other_process_wakes: u64,
    /// The threads that woke it most, most frequent first (bounded list).
    pub top_wakers: Vec<Waker>,
    /// Poll-family syscalls.
    pub poll: PollSyscallStats,
    /// Sleep syscalls.
    pub sleep: SleepSyscallStats,
    /// Returns of each poll-family and sleep syscall the thread made, in
    /// [`Syscall::ALL`] order, zero counts left out (at most nine entries).
    pub calls_by_syscall: Vec<SyscallCalls>,
    /// `futex` waits with a timeout (`FUTEX_WAIT`, `FUTEX_WAIT_BITSET`) that
    /// returned: a runtime's timed condition waits and parks. Absent from
    /// reports written before it existed (reads as 0).
    #[serde(default)]
    pub total_timed_futex_waits: u64,
    /// Those of them that returned `ETIMEDOUT`: no other thread ended the
    /// wait, its timeout did (the thread's own timer). A wait ended by
    /// `FUTEX_WAKE` (another thread) returns 0 instead.
    #[serde(default)]
    pub total_futex_timeouts: u64,
    /// The descriptors the thread's last `poll`/`ppoll` call looked at
    /// (one in 64 of those that returned ready without blocking; `poll`
    /// and `ppoll` only, the first 8 entries of its array) found ready:
    /// what a loop that never blocks keeps polling. Empty when none was
    /// seen. Absent from reports written before it existed.
    #[serde(default)]
    pub ready_fds: Vec<ReadyFd>,
}

/// One read of a kernel source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct KernelSample {
    /// Name of the source, e.g. "ebpf".
    pub source: String,
    /// Process id the source observes.
    pub pid: u32,
    /// Live threads of the target with their counters.
    pub threads: Vec<KernelThreadStats>,
    /// Events the kernel programs could not record because a bounded map was
    /// full (0 when nothing was lost), since the source attached.
    pub total_dropped_events: u64,
    /// Threads of the target that exited since the source attached: every
    /// one, including those that started and ended between two reads.
    /// Absent from reports written before it existed (reads as 0).
    #[serde(default)]
    pub total_thread_exits: u64,
}

impl KernelSample {
    /// The thread with this TID, if the source saw it.
    pub fn thread(&self, tid: u64) -> Option<&KernelThreadStats> {
        self.threads.iter().find(|t| t.tid == tid)
    }
}

/// Why a kernel source failed to read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelSourceError {
    /// The observed process exited; the source is finished.
    #[error("target process {pid} has exited")]
    TargetExited {
        /// The process that exited.
        pid: u32,
    },
    /// Reading the source failed.
    #[error("kernel source read failed: {0}")]
    Read(String),
}

/// A source of kernel-side per-thread counters, such as the eBPF programs
/// of `wakemeter-ebpf`. Called from the sampling thread once per snapshot.
pub trait KernelSource: Send {
    /// Reads the current cumulative counters. Must not block for long: it
    /// runs on the sampling path.
    ///
    /// # Errors
    /// [`KernelSourceError::TargetExited`] once the target is gone (the
    /// sampler then detaches the source), [`KernelSourceError::Read`] otherwise.
    fn read(&mut self) -> Result<KernelSample, KernelSourceError>;

    /// Thread ids (as in [`KernelSample::threads`]) of the threads that,
    /// by the last successful [`KernelSource::read`], were blocked (off CPU
    /// and not runnable) at the read before it and have neither run, been
    /// woken nor been renamed since: every per-thread counter `/proc` has
    /// for them (CPU time, run-queue wait, switches) is what it was just
    /// after that earlier read. The sampler reads the kernel source before
    /// `/proc` and skips the `/proc` reads of these threads, carrying their
    /// previous values (and still reads each of them in full now and then:
    /// a name written by a sibling through `/proc/TID/comm` changes no
    /// counter). Sorted ascending. Empty (the default) when the source
    /// cannot tell: every thread is then read.
    fn quiet_threads(&self) -> &[u64] {
        &[]
    }

    /// Takes back a sample this source returned, once the sampler has
    /// stored it, so that the next [`KernelSource::read`] can write into
    /// its buffers instead of allocating them again. The default drops it.
    fn recycle(&mut self, sample: KernelSample) {
        drop(sample);
    }
}
