//! Kernel records to the core's `KernelThreadStats`.

use super::*;

/// The part of a span still in progress (on or off CPU) at `now_ns`, for
/// a span that began at `since` (0: none in progress).
fn in_progress(since: u64, now_ns: u64) -> u64 {
    if since != 0 && now_ns > since {
        now_ns - since
    } else {
        0
    }
}

/// Words of a [`WmThread`] (2,504 bytes: 313 `u64`).
const WORDS: usize = std::mem::size_of::<WmThread>() / 8;
const _: () = assert!(WORDS * 8 == std::mem::size_of::<WmThread>());
const _: () = assert!(std::mem::align_of::<WmThread>() >= std::mem::align_of::<u64>());
const _: () = assert!(WORDS <= u16::MAX as usize);

/// The entry as `u64` words.
fn words_of(raw: &WmThread) -> &[u64; WORDS] {
    // SAFETY: `WmThread` is plain old data (`repr(C)`, integers only, no
    // padding: `aya::Pod`, size asserted in `abi.rs`), exactly `WORDS`
    // words long and at least as aligned as `u64` (asserted above); the
    // borrow keeps `raw` alive and unchanged for the result's lifetime.
    unsafe { &*std::ptr::from_ref(raw).cast::<[u64; WORDS]>() }
}

/// The entry as `u64` words, to write.
fn words_of_mut(raw: &mut WmThread) -> &mut [u64; WORDS] {
    // SAFETY: as in `words_of`; every bit pattern of the words is a valid
    // `WmThread` (integers only), and the borrow is exclusive.
    unsafe { &mut *std::ptr::from_mut(raw).cast::<[u64; WORDS]>() }
}

/// What a read keeps of a thread's entry, to answer the next read when
/// the task iterator says the entry has not changed (a thread blocked the
/// whole time): the entry's nonzero words (a blocked thread's 2,504-byte
/// entry has a few dozen), converted again at each read exactly as the
/// whole entry would be, and the kinds its ready descriptors had (read
/// from `/proc` once). About 250 bytes a blocked thread, where its
/// converted stats took about 750 (RELIABILITY.md, "eBPF watcher's memory").
pub(super) struct Kept {
    /// Word indexes of the nonzero words, ascending.
    at: Box<[u16]>,
    /// The nonzero words, in the order of `at`.
    words: Box<[u64]>,
    ready_fds: Box<[ReadyFd]>,
    /// Whether the entry is of a blocked thread: off CPU (`on_since_ns`
    /// 0, `off_since_ns` set) for a cause other than preemption (which
    /// leaves it runnable, on a run queue where migrations add to its
    /// `schedstat` wait). While its entry stays unchanged, such a thread
    /// has not run and not been woken (a wake changes `wakes_by`).
    pub(super) blocked: bool,
    /// The span the entry had in progress, which alone changes its
    /// conversion from one read to the next while it stays unchanged.
    pub(super) span: Span,
    /// The last read that saw the entry (one no read sees any more is
    /// forgotten).
    pub(super) seen: u64,
}

/// The span (on or off CPU) an entry has in progress: what
/// [`thread_stats`] adds to its totals up to the time of the read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    on_since_ns: u64,
    off_since_ns: u64,
    off_cause: u64,
}

impl Span {
    fn of(raw: &WmThread) -> Span {
        Span {
            on_since_ns: raw.on_since_ns,
            off_since_ns: raw.off_since_ns,
            off_cause: raw.off_cause,
        }
    }
}

impl Kept {
    pub(super) fn new(raw: &WmThread, ready_fds: &[ReadyFd], seen: u64) -> Kept {
        let nonzero = || words_of(raw).iter().enumerate().filter(|(_, w)| **w != 0);
        Kept {
            at: nonzero()
                .map(|(i, _)| u16::try_from(i).unwrap_or(u16::MAX))
                .collect(),
            words: nonzero().map(|(_, w)| *w).collect(),
            ready_fds: ready_fds.into(),
            blocked: raw.on_since_ns == 0
                && raw.off_since_ns != 0
                && raw.off_cause != abi::OFF_PREEMPTED as u64,
            span: Span::of(raw),
            seen,
        }
    }

    /// The entry as it was kept.
    pub(super) fn raw(&self) -> WmThread {
        let mut raw = WmThread::ZERO;
        let out = words_of_mut(&mut raw);
        for (&i, &w) in self.at.iter().zip(self.words.iter()) {
            if let Some(o) = out.get_mut(usize::from(i)) {
                *o = w;
            }
        }
        raw
    }

    /// The ready descriptors of the entry, with their kinds when kept.
    pub(super) fn ready_fds(&self) -> Vec<ReadyFd> {
        self.ready_fds.to_vec()
    }
}

/// The kernel's off-CPU causes (`abi::OFF_*`) in the order of
/// [`OffCpuTime::CAUSES`].
const CAUSES: [usize; 6] = [
    abi::OFF_SLEEP,
    abi::OFF_LOCK,
    abi::OFF_POLL,
    abi::OFF_IO,
    abi::OFF_PREEMPTED,
    abi::OFF_OTHER,
];

/// Updates `t`, converted by [`thread_stats`] at `then_ns` from an entry
/// that has not changed since and has `span` in progress, to what
/// [`thread_stats`] gives for that entry at `now_ns`: only the span's time
/// has grown (the same sums, short of a total at `u64::MAX`). Converting
/// the entry whole again at each read was 13% of a 1,000-thread eBPF
/// watcher's CPU.
pub(super) fn advance(t: &mut KernelThreadStats, span: Span, then_ns: u64, now_ns: u64) {
    let grown = |total: u64, since: u64| {
        total
            .saturating_sub(in_progress(since, then_ns))
            .saturating_add(in_progress(since, now_ns))
    };
    t.total_on_cpu_ns = grown(t.total_on_cpu_ns, span.on_since_ns);
    if let Some(at) = CAUSES
        .iter()
        .position(|&c| Ok(c) == usize::try_from(span.off_cause))
    {
        let mut ns = t.total_off_cpu.by_cause();
        if let Some(cause) = ns.get_mut(at) {
            *cause = grown(*cause, span.off_since_ns);
        }
        t.total_off_cpu = OffCpuTime::from_causes(ns);
    }
}

/// Converts one kernel record, adding the span in progress (on or off CPU)
/// to the totals so that they grow smoothly between switches, with its
/// `top_wakers` most frequent wakers.
pub(super) fn thread_stats(
    tid: u32,
    raw: &WmThread,
    now_ns: u64,
    top_wakers: usize,
) -> KernelThreadStats {
    let in_progress = |since: u64| in_progress(since, now_ns);

    let mut off_ns = raw.off_ns;
    if let Some(cause) = usize::try_from(raw.off_cause)
        .ok()
        .and_then(|c| off_ns.get_mut(c))
    {
        *cause = cause.saturating_add(in_progress(raw.off_since_ns));
    }
    let off_cpu = OffCpuTime::from_causes(CAUSES.map(|c| off_ns[c]));

    let mut poll = PollSyscallStats::default();
    poll.total_calls = raw.poll_calls;
    poll.total_idle_calls = raw.poll_zero_returns;
    poll.total_zero_timeout_calls = raw.poll_zero_timeouts;
    poll.total_infinite_timeout_calls = raw.poll_infinite_timeouts;
    poll.timeout_histogram = Log2Histogram::from_buckets(&raw.poll_timeout_hist);
    poll.total_blocked_ns = raw.poll_time_ns;
    poll.total_blocked_calls = raw.poll_blocked_calls;
    poll.total_idle_nonblocking_calls = raw.poll_idle_nonblocking;

    let mut sleep = SleepSyscallStats::default();
    sleep.total_calls = raw.sleep_calls;
    sleep.total_requested_ns = raw.sleep_requested_ns;
    sleep.total_actual_ns = raw.sleep_actual_ns;
    sleep.total_known_request_calls = raw.sleep_known_requests;
    sleep.total_interrupted_calls = raw.sleep_interrupted;
    sleep.total_interrupted_ns = raw.sleep_interrupted_ns;

    let mut t = KernelThreadStats::default();
    t.tid = u64::from(tid);
    t.name = abi::comm_str(&raw.comm);
    t.total_on_cpu_ns = raw.on_cpu_ns.saturating_add(in_progress(raw.on_since_ns));
    t.total_voluntary_switches = raw.voluntary;
    t.total_involuntary_switches = raw.involuntary;
    t.total_off_cpu = off_cpu;
    t.off_cpu_histogram = Log2Histogram::from_buckets(&raw.off_hist);
    t.run_queue_latency_histogram = Log2Histogram::from_buckets(&raw.runq_hist);
    // The kernel side counts each wake once, by its source.
    t.total_wakes = raw.wakes_by.iter().fold(0u64, |a, b| a.saturating_add(*b));
    t.total_interrupt_wakes = raw.wakes_by[abi::WAKE_INTERRUPT];
    t.total_process_thread_wakes = raw.wakes_by[abi::WAKE_TARGET];
    t.total_other_process_wakes = raw.wakes_by[abi::WAKE_OTHER];
    t.calls_by_syscall = Syscall::ALL
        .iter()
        .zip(raw.calls_by_syscall)
        .filter(|(_, n)| *n > 0)
        .map(|(sc, n)| SyscallCalls::new(*sc, n))
        .collect();
    t.poll = poll;
    t.sleep = sleep;
    t.total_timed_futex_waits = raw.futex_timed_waits;
    t.total_futex_timeouts = raw.futex_timeouts;
    t.top_wakers = wakers_of(raw, top_wakers);
    t
}

/// The `n` most frequent wakers in a record's slots, most first (ties by tid).
pub(super) fn wakers_of(raw: &WmThread, n: usize) -> Vec<Waker> {
    let mut slots: Vec<usize> = (0..abi::WAKER_SLOTS)
        .filter(|&i| raw.waker_count[i] != 0)
        .collect();
    slots.sort_by(|&a, &b| {
        raw.waker_count[b]
            .cmp(&raw.waker_count[a])
            .then(raw.waker_tid[a].cmp(&raw.waker_tid[b]))
    });
    slots
        .into_iter()
        .take(n)
        .map(|i| {
            let mut w = Waker::default();
            w.tid = u64::from(raw.waker_tid[i]);
            w.name = abi::comm_str(&raw.waker_comm[i]);
            w.total_wakes = raw.waker_count[i];
            w
        })
        .collect()
}

/// The id in the observer's namespace of waker `host_tid` of `raw` (0 for
/// interrupt context and for wakers outside that namespace).
pub(super) fn namespace_waker(raw: &WmThread, host_tid: u64) -> u64 {
    (0..abi::WAKER_SLOTS)
        .find(|&i| raw.waker_count[i] != 0 && u64::from(raw.waker_tid[i]) == host_tid)
        .map_or(0, |i| u64::from(raw.waker_ns_tid[i]))
}

/// Socket kinds by inode, for the ready descriptors of one target; cleared
/// when it reaches [`SocketKinds::MAX`] entries (a server accepting
/// connections makes new sockets all the time).
#[derive(Debug, Default)]
pub(super) struct SocketKinds(std::collections::HashMap<u64, FdKind>);

impl SocketKinds {
    const MAX: usize = 1024;

    /// The ready descriptors of one kernel record, each with its kind as
    /// process `pid`'s descriptor table says now (`Unknown` when it was
    /// closed since, or cannot be read).
    pub(super) fn ready_fds(&mut self, pid: u32, raw: &WmThread) -> Vec<ReadyFd> {
        let n = usize::try_from(raw.ready_fds)
            .unwrap_or(0)
            .min(abi::READY_FDS);
        raw.ready_fd
            .iter()
            .take(n)
            .map(|&fd| ReadyFd::new(fd, self.kind(pid, fd)))
            .collect()
    }

    fn kind(&mut self, pid: u32, fd: i32) -> FdKind {
        use wakemeter_procfs::fd::{self as procfd, FdLink};
        match procfd::fd_link(pid, fd) {
            Err(_) => FdKind::Unknown,
            Ok(FdLink::Kind(kind)) => fd_kind(kind),
            Ok(FdLink::Socket(inode)) => {
                if self.0.len() >= Self::MAX {
                    self.0.clear();
                }
                *self
                    .0
                    .entry(inode)
                    .or_insert_with(|| fd_kind(procfd::socket_kind(pid, inode)))
            }
        }
    }
}

/// The core's name of a descriptor kind.
fn fd_kind(kind: wakemeter_procfs::fd::FdKind) -> FdKind {
    use wakemeter_procfs::fd::FdKind as P;
    match kind {
        P::TcpSocket => FdKind::TcpSocket,
        P::UdpSocket => FdKind::UdpSocket,
        P::UnixSocket => FdKind::UnixSocket,
        P::Socket => FdKind::Socket,
        P::Pipe => FdKind::Pipe,
        P::Eventfd => FdKind::Eventfd,
        P::Timerfd => FdKind::Timerfd,
        P::Signalfd => FdKind::Signalfd,
        P::Epoll => FdKind::Epoll,
        P::Tty => FdKind::Tty,
        P::File => FdKind::File,
        P::Other => FdKind::Other,
    }
}
