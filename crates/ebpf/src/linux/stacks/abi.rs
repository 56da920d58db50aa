//! Rust mirrors of the records in `src/bpf/stacks.h`. Keep the two in
//! step: both sides assert the sizes.

use crate::stacks::{MissingStack, OffCpuCause};

use super::super::abi::{COMM_LEN, OFF_IO, OFF_LOCK, OFF_POLL, OFF_PREEMPTED, OFF_SLEEP};

/// `WM_STACK_*`: what an entry counts (`WM_STACK_ON_CPU` = 1 needs no test).
pub(crate) const KIND_OFF_CPU: u32 = 2;
pub(crate) const KIND_WAKEUP: u32 = 3;

/// `WM_NO_STACK`: no stack was taken.
const NO_STACK: i32 = -1000;
/// `-EFAULT` from `stack_id()` of stacks.bpf.c: an empty stack.
const EFAULT: i32 = 14;

/// Indexes of the `stack_lost` array (`WM_LOST_*`).
pub(crate) const LOST_COUNTS_FULL: u32 = 0;
pub(crate) const LOST_COLLISION: u32 = 1;
pub(crate) const LOST_STACKS_FULL: u32 = 2;
pub(crate) const LOST_OFF_START_FULL: u32 = 3;
pub(crate) const LOST_UNWIND_TRUNCATED: u32 = 4;
/// `WM_COUNT_SAMPLES`: on-CPU samples the program ran for.
pub(crate) const COUNT_SAMPLES: u32 = 5;
/// `WM_COUNT_TIMER_SKIPPED`: cpu-clock periods skipped on a target's thread.
pub(crate) const COUNT_TIMER_SKIPPED: u32 = 6;
/// `WM_COUNT_SWITCH_NS`: the target's time between switch-in and switch-out.
pub(crate) const COUNT_SWITCH_NS: u32 = 7;
/// `WM_COUNT_PROGRAM_NS`: the on-CPU program's own time in the target's samples.
pub(crate) const COUNT_PROGRAM_NS: u32 = 8;

/// `struct wm_stack_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StackKey {
    pub tid: u32,
    pub waker_tid: u32,
    pub kind: u32,
    pub cause: u32,
    pub user_stack: i32,
    pub kernel_stack: i32,
    pub comm: [u8; COMM_LEN],
    pub waker_comm: [u8; COMM_LEN],
    pub reserved: u64,
}

/// `struct wm_stack_count`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StackCountValue {
    pub count: u64,
    pub total_ns: u64,
}

/// `WM_NO_RA_OFFSET`: the frame-pointer walk is right from this row on.
pub(crate) const NO_RA_OFFSET: u32 = u32::MAX;

/// `struct wm_leaf_row`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeafRow {
    pub start: u64,
    pub ra_offset: u32,
    /// `WM_CFA_*` in bits 0-7, the saved `%rbp`'s offset from the CFA
    /// (an `i16`, 0: not saved) in bits 16-31.
    pub rule: u32,
}

/// `struct wm_leaf_table`: the half of `leaf_rows` the programs search.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeafTableHalf {
    /// Its first row's index, and its row count shifted left by 32.
    pub half: u64,
    /// The value of `target_execs` for the image the rows describe.
    pub execs: u64,
}

impl LeafTableHalf {
    pub(crate) fn new(first: u32, count: u32, execs: u64) -> LeafTableHalf {
        LeafTableHalf {
            half: u64::from(first) | (u64::from(count) << 32),
            execs,
        }
    }
}

/// `WM_CFA_NONE`: no rule, the frame-pointer step.
pub(crate) const CFA_NONE: u32 = 0;
/// `WM_CFA_RSP`: CFA = `%rsp` + `ra_offset` + 8.
pub(crate) const CFA_RSP: u32 = 1;
/// `WM_CFA_RBP`: CFA = `%rbp` + `ra_offset` + 8.
pub(crate) const CFA_RBP: u32 = 2;
/// `WM_CFA_END`: the outermost frame (return address undefined).
pub(crate) const CFA_END: u32 = 3;

/// `WM_RULE_UNENCODED`: flag of a [`CFA_NONE`] row whose CFI has a rule
/// the table does not encode.
pub(crate) const RULE_UNENCODED: u32 = 0x100;

/// The `rule` word of a row.
pub(crate) fn rule(cfa: u32, rbp_offset: i16) -> u32 {
    cfa | (u32::from(rbp_offset.cast_unsigned()) << 16)
}

/// `WM_STACK_DEPTH`: frames kept per stack.
pub(crate) const STACK_DEPTH: usize = 127;

/// `struct wm_stack`: a stored stack, innermost frame first, zero-padded.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoredStack {
    pub hash: u64,
    pub ips: [u64; STACK_DEPTH],
}

impl StoredStack {
    /// The frames: the addresses before the padding (no frame is at
    /// address 0).
    pub(crate) fn frames(&self) -> Vec<u64> {
        self.ips.iter().copied().take_while(|ip| *ip != 0).collect()
    }
}

const _: () = assert!(size_of::<StoredStack>() == 1024);
const _: () = assert!(size_of::<StackKey>() == 64);
const _: () = assert!(size_of::<LeafRow>() == 16);
const _: () = assert!(size_of::<LeafTableHalf>() == 16);
const _: () = assert!(size_of::<StackCountValue>() == 16);

// SAFETY: plain-old-data records: `repr(C)`, only integers and arrays of
// them, no padding (sizes asserted above, as in stacks.bpf.c), every bit
// pattern valid.
unsafe impl aya::Pod for StackKey {}
// SAFETY: as above.
unsafe impl aya::Pod for StackCountValue {}
// SAFETY: as above.
unsafe impl aya::Pod for LeafRow {}
// SAFETY: as above.
unsafe impl aya::Pod for LeafTableHalf {}
// SAFETY: as above.
unsafe impl aya::Pod for StoredStack {}

/// The cause of an off-CPU entry (`WM_OFF_*`).
pub(crate) fn cause(raw: u32) -> OffCpuCause {
    match usize::try_from(raw).unwrap_or(usize::MAX) {
        OFF_SLEEP => OffCpuCause::Sleep,
        OFF_LOCK => OffCpuCause::Lock,
        OFF_POLL => OffCpuCause::Poll,
        OFF_IO => OffCpuCause::Io,
        OFF_PREEMPTED => OffCpuCause::Preempted,
        _ => OffCpuCause::Other,
    }
}

/// A stack id from the kernel: a usable id, or why there is none.
pub(crate) fn stack_id(raw: i32) -> Result<u32, MissingStack> {
    match raw {
        NO_STACK => Err(MissingStack::NotTaken),
        e if e == -EFAULT => Err(MissingStack::Empty),
        e if e < 0 => Err(MissingStack::Lost),
        id => u32::try_from(id).map_err(|_| MissingStack::Lost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_stack_frames_end_at_the_padding() {
        let mut s = StoredStack {
            hash: 1,
            ips: [0; STACK_DEPTH],
        };
        assert!(s.frames().is_empty());
        s.ips[0] = 0xffff_ffff_8100_0000;
        s.ips[1] = 0x4000;
        assert_eq!(s.frames(), [0xffff_ffff_8100_0000, 0x4000]);
        s.ips = [7; STACK_DEPTH];
        assert_eq!(s.frames().len(), STACK_DEPTH);
    }

    #[test]
    fn stack_ids_and_causes() {
        assert_eq!(stack_id(5), Ok(5));
        assert_eq!(stack_id(-1000), Err(MissingStack::NotTaken));
        assert_eq!(stack_id(-14), Err(MissingStack::Empty));
        assert_eq!(stack_id(-17), Err(MissingStack::Lost));
        assert_eq!(cause(0), OffCpuCause::Sleep);
        assert_eq!(cause(1), OffCpuCause::Lock);
        assert_eq!(cause(2), OffCpuCause::Poll);
        assert_eq!(cause(3), OffCpuCause::Io);
        assert_eq!(cause(4), OffCpuCause::Preempted);
        assert_eq!(cause(5), OffCpuCause::Other);
        assert_eq!(cause(99), OffCpuCause::Other);
    }
}
