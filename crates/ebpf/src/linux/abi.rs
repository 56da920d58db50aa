//! Rust mirrors of the records in `src/bpf/wakemeter.h`. Keep the two in
//! step: both sides assert the sizes.

/// Log2 buckets per histogram (`WM_BUCKETS`), same as [`wakemeter::histogram::LOG2_BUCKETS`].
pub(crate) const BUCKETS: usize = 65;
/// Length of a kernel `comm` (`TASK_COMM_LEN`).
pub(crate) const COMM_LEN: usize = 16;

/// Indexes of `WmThread::off_ns` (`WM_OFF_*`).
pub(crate) const OFF_SLEEP: usize = 0;
pub(crate) const OFF_LOCK: usize = 1;
pub(crate) const OFF_POLL: usize = 2;
pub(crate) const OFF_IO: usize = 3;
pub(crate) const OFF_PREEMPTED: usize = 4;
pub(crate) const OFF_OTHER: usize = 5;
pub(crate) const OFF_CAUSES: usize = 6;

/// `struct wm_thread`: per-thread state and counters (see the C header).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct WmThread {
    pub on_since_ns: u64,
    pub off_since_ns: u64,
    pub off_cause: u64,
    pub woken_at_ns: u64,
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
    pub off_hist: [u64; BUCKETS],
    pub runq_hist: [u64; BUCKETS],
    pub poll_timeout_hist: [u64; BUCKETS],
    pub comm: [u8; COMM_LEN],
}

/// `struct wm_waker_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WmWakerKey {
    pub target_tid: u32,
    pub waker_tid: u32,
}

/// `struct wm_waker`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct WmWaker {
    pub count: u64,
    pub comm: [u8; COMM_LEN],
}

const _: () = assert!(size_of::<WmThread>() == 1776);
// Offsets the C side asserts too (`wakemeter.bpf.c`): a field moved on one
// side only fails the build instead of reading garbage.
const _: () = assert!(std::mem::offset_of!(WmThread, woken_at_ns) == 24);
const _: () = assert!(std::mem::offset_of!(WmThread, wakeups) == 32);
const _: () = assert!(std::mem::offset_of!(WmThread, involuntary) == 56);
const _: () = assert!(std::mem::offset_of!(WmThread, sc_block_nr) == 112);
const _: () = assert!(std::mem::offset_of!(WmThread, sleep_actual_ns) == 192);
const _: () = assert!(std::mem::offset_of!(WmThread, off_hist) == 200);
const _: () = assert!(std::mem::offset_of!(WmThread, poll_timeout_hist) == 1240);
const _: () = assert!(std::mem::offset_of!(WmThread, comm) == 1760);
const _: () = assert!(size_of::<WmWakerKey>() == 8);
const _: () = assert!(size_of::<WmWaker>() == 24);
const _: () = assert!(BUCKETS == wakemeter::histogram::LOG2_BUCKETS);

// SAFETY: plain-old-data records: `repr(C)`, only integers and byte arrays,
// no padding (sizes asserted above), every bit pattern valid.
unsafe impl aya::Pod for WmThread {}
// SAFETY: as above: two u32, no padding, any bit pattern valid.
unsafe impl aya::Pod for WmWakerKey {}
// SAFETY: as above: a u64 and a byte array, no padding, any bit pattern valid.
unsafe impl aya::Pod for WmWaker {}

/// A kernel `comm` as text: up to the first NUL, lossy UTF-8.
pub(crate) fn comm_str(comm: &[u8; COMM_LEN]) -> String {
    let end = comm.iter().position(|b| *b == 0).unwrap_or(COMM_LEN);
    String::from_utf8_lossy(&comm[..end]).into_owned()
}
