//! Rust mirrors of the records in `src/bpf/wakemeter.h`. Keep the two in
//! step: both sides assert the sizes.

/// Log2 buckets per histogram (`WM_BUCKETS`), same as [`wakemeter::histogram::LOG2_BUCKETS`].
pub(crate) const BUCKETS: usize = 65;
/// Length of a kernel `comm` (`TASK_COMM_LEN`).
pub(crate) const COMM_LEN: usize = 16;
/// Waker slots per thread (`WM_WAKER_SLOTS`), same as [`crate::WAKER_SLOTS`].
pub(crate) const WAKER_SLOTS: usize = 16;
/// Ready descriptors kept per thread (`WM_READY_FDS`).
pub(crate) const READY_FDS: usize = 4;

/// Indexes of `WmThread::off_ns` (`WM_OFF_*`).
pub(crate) const OFF_SLEEP: usize = 0;
pub(crate) const OFF_LOCK: usize = 1;
pub(crate) const OFF_POLL: usize = 2;
pub(crate) const OFF_IO: usize = 3;
pub(crate) const OFF_PREEMPTED: usize = 4;
pub(crate) const OFF_OTHER: usize = 5;
pub(crate) const OFF_CAUSES: usize = 6;

/// `WM_ARG_UNKNOWN`: a timeout or sleep request that is not known.
pub(crate) const ARG_UNKNOWN: u64 = u64::MAX - 1;

/// Indexes of `WmThread::wakes_by` (`WM_WAKE_*`).
pub(crate) const WAKE_INTERRUPT: usize = 0;
pub(crate) const WAKE_TARGET: usize = 1;
pub(crate) const WAKE_OTHER: usize = 2;
pub(crate) const WAKE_SOURCES: usize = 3;

/// Length of `WmThread::calls_by_syscall` (`WM_SYSCALLS`); index `i` is
/// the `i`-th variant of [`wakemeter::kernel::Syscall::ALL`].
pub(crate) const SYSCALLS: usize = 9;

/// `struct wm_thread`: per-thread state and counters (see the C header).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct WmThread {
    pub on_since_ns: u64,
    pub off_since_ns: u64,
    pub off_cause: u64,
    /// The kernel's `run_delay` at the last switch-out, with bit 63 set
    /// (0 = none seen); state of the programs, not a counter.
    pub run_delay_mark: u64,
    /// Not written any more (0): the total is the sum of `wakes_by`.
    pub wakeups: u64,
    pub on_cpu_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub off_ns: [u64; OFF_CAUSES],
    pub sc_block_nr: u64,
    pub sc_block_ns: u64,
    pub sc_arg_ns: u64,
    pub poll_calls: u64,
    pub poll_zero_returns: u64,
    pub poll_zero_timeouts: u64,
    pub poll_infinite_timeouts: u64,
    pub poll_time_ns: u64,
    pub sleep_calls: u64,
    pub sleep_requested_ns: u64,
    pub sleep_actual_ns: u64,
    pub poll_blocked_calls: u64,
    pub poll_idle_nonblocking: u64,
    pub sleep_known_requests: u64,
    pub sleep_interrupted: u64,
    pub sleep_interrupted_ns: u64,
    pub wakes_by: [u64; WAKE_SOURCES],
    pub calls_by_syscall: [u64; SYSCALLS],
    pub off_hist: [u64; BUCKETS],
    pub runq_hist: [u64; BUCKETS],
    pub poll_timeout_hist: [u64; BUCKETS],
    pub comm: [u8; COMM_LEN],
    /// Waker slots: tid (0 = interrupt context), wakeups since it took the
    /// slot (0 = free slot), whether it is a thread of the target (bit i),
    /// and its comm.
    pub waker_tid: [u32; WAKER_SLOTS],
    pub waker_count: [u64; WAKER_SLOTS],
    pub waker_of_target: u64,
    pub waker_comm: [[u8; COMM_LEN]; WAKER_SLOTS],
    /// Set only for an observer in a PID namespace of its own: each
    /// waker's id there (0: interrupt context, or outside it) and the
    /// thread's own id there.
    pub waker_ns_tid: [u32; WAKER_SLOTS],
    pub ns_tid: u64,
    pub tgid: u64,
    /// futex waits with a timeout that returned, and those that timed out.
    pub futex_timed_waits: u64,
    pub futex_timeouts: u64,
    /// The descriptors the last poll/ppoll call looked at found ready
    /// without blocking, and how many of `ready_fd` are set.
    pub ready_fd: [i32; READY_FDS],
    pub ready_fds: u32,
    pub ready_pad: u32,
    /// The task iterator's own: the reader that last got the entry whole,
    /// and the entry's mark then (not counters).
    pub read_by: u64,
    pub read_mark: u64,
}

impl WmThread {
    /// An all-zero record (a valid value: every field is an integer).
    pub(crate) const ZERO: WmThread = WmThread {
        on_since_ns: 0,
        off_since_ns: 0,
        off_cause: 0,
        run_delay_mark: 0,
        wakeups: 0,
        on_cpu_ns: 0,
        voluntary: 0,
        involuntary: 0,
        off_ns: [0; OFF_CAUSES],
        sc_block_nr: 0,
        sc_block_ns: 0,
        sc_arg_ns: 0,
        poll_calls: 0,
        poll_zero_returns: 0,
        poll_zero_timeouts: 0,
        poll_infinite_timeouts: 0,
        poll_time_ns: 0,
        sleep_calls: 0,
        sleep_requested_ns: 0,
        sleep_actual_ns: 0,
        poll_blocked_calls: 0,
        poll_idle_nonblocking: 0,
        sleep_known_requests: 0,
        sleep_interrupted: 0,
        sleep_interrupted_ns: 0,
        wakes_by: [0; WAKE_SOURCES],
        calls_by_syscall: [0; SYSCALLS],
        off_hist: [0; BUCKETS],
        runq_hist: [0; BUCKETS],
        poll_timeout_hist: [0; BUCKETS],
        comm: [0; COMM_LEN],
        waker_tid: [0; WAKER_SLOTS],
        waker_count: [0; WAKER_SLOTS],
        waker_of_target: 0,
        waker_comm: [[0; COMM_LEN]; WAKER_SLOTS],
        waker_ns_tid: [0; WAKER_SLOTS],
        ns_tid: 0,
        tgid: 0,
        futex_timed_waits: 0,
        futex_timeouts: 0,
        ready_fd: [0; READY_FDS],
        ready_fds: 0,
        ready_pad: 0,
        read_by: 0,
        read_mark: 0,
    };

    /// Occupied waker slots.
    pub(crate) fn waker_slots_used(&self) -> usize {
        self.waker_count.iter().filter(|c| **c != 0).count()
    }
}

const _: () = assert!(size_of::<WmThread>() == 2504);
// Offsets the C side asserts too (`wakemeter.bpf.c`): a field moved on one
// side only fails the build instead of reading garbage.
const _: () = assert!(std::mem::offset_of!(WmThread, run_delay_mark) == 24);
const _: () = assert!(std::mem::offset_of!(WmThread, wakeups) == 32);
const _: () = assert!(std::mem::offset_of!(WmThread, involuntary) == 56);
const _: () = assert!(std::mem::offset_of!(WmThread, sc_block_nr) == 112);
const _: () = assert!(std::mem::offset_of!(WmThread, sleep_actual_ns) == 192);
const _: () = assert!(std::mem::offset_of!(WmThread, wakes_by) == 240);
const _: () = assert!(std::mem::offset_of!(WmThread, calls_by_syscall) == 264);
const _: () = assert!(std::mem::offset_of!(WmThread, off_hist) == 336);
const _: () = assert!(std::mem::offset_of!(WmThread, poll_timeout_hist) == 1376);
const _: () = assert!(std::mem::offset_of!(WmThread, comm) == 1896);
const _: () = assert!(std::mem::offset_of!(WmThread, waker_tid) == 1912);
const _: () = assert!(std::mem::offset_of!(WmThread, waker_count) == 1976);
const _: () = assert!(std::mem::offset_of!(WmThread, waker_of_target) == 2104);
const _: () = assert!(std::mem::offset_of!(WmThread, waker_comm) == 2112);
const _: () = assert!(std::mem::offset_of!(WmThread, waker_ns_tid) == 2368);
const _: () = assert!(std::mem::offset_of!(WmThread, ns_tid) == 2432);
const _: () = assert!(std::mem::offset_of!(WmThread, tgid) == 2440);
const _: () = assert!(std::mem::offset_of!(WmThread, read_mark) == 2496);

/// `struct wm_target`: per watched process (see the C header).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WmTarget {
    pub exits: u64,
    pub dropped: u64,
    pub dead: u64,
}

// SAFETY: plain integers, no padding (asserted on both sides).
unsafe impl aya::Pod for WmTarget {}

const _: () = assert!(size_of::<WmTarget>() == 24);

/// `struct wm_iter_ctl`: what the next walk of the task iterator does.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WmIterCtl {
    /// The process whose entries are written out; 0 for all of them.
    pub tgid: u32,
    /// 1: first give that process's threads their entries from `seeds`.
    pub seed: u32,
    /// The reading session (not 0): entries it got whole on its last walk
    /// and unchanged since come out as a head alone. 0: all whole.
    pub reader: u64,
}

// SAFETY: two u32 and a u64, no padding (asserted on both sides).
unsafe impl aya::Pod for WmIterCtl {}

const _: () = assert!(size_of::<WmIterCtl>() == 16);

/// Bytes of the head (`struct wm_iter_row`: the thread id and the
/// `unchanged` flag) before each entry the task iterator writes.
pub(crate) const ITER_ROW_HEAD: usize = 8;

/// Words of the watched-process bitmap (`WM_TGID_WORDS`): one bit per
/// possible process id up to `PID_MAX_LIMIT`.
pub(crate) const TGID_WORDS: u32 = 65_536;
/// Processes one program set watches at once (`WM_MAX_TARGETS`).
pub(crate) const MAX_TARGETS: usize = 4096;
const _: () = assert!(BUCKETS == wakemeter::histogram::LOG2_BUCKETS);
const _: () = assert!(WAKER_SLOTS == crate::WAKER_SLOTS);
const _: () = assert!(SYSCALLS == wakemeter::kernel::Syscall::ALL.len());

// SAFETY: plain-old-data record: `repr(C)`, only integers and arrays of
// them, no padding (size and offsets asserted above), every bit pattern valid.
unsafe impl aya::Pod for WmThread {}

/// A kernel `comm` as text: up to the first NUL, lossy UTF-8.
pub(crate) fn comm_str(comm: &[u8; COMM_LEN]) -> String {
    let end = comm.iter().position(|b| *b == 0).unwrap_or(COMM_LEN);
    String::from_utf8_lossy(&comm[..end]).into_owned()
}
