/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Records shared by stacks.bpf.c and the Rust loader (src/linux/stacks_abi.rs,
 * which asserts the same sizes). Fields are laid out without padding on
 * every 64-bit ABI.
 */
#ifndef WAKEMETER_STACKS_H
#define WAKEMETER_STACKS_H

/* Frames kept per stack: the kernel's default kernel.perf_event_max_stack. */
#define WM_STACK_DEPTH 127

/* A stored stack (value of the `stacks` map, keyed by its id): the 64-bit
 * hash of its frames and the frames, innermost first, zero-padded. */
struct wm_stack {
	__u64 hash;
	__u64 ips[WM_STACK_DEPTH];
};

/* Ids tried for one stack before it counts as lost to collisions: its
 * hash's low 31 bits, then the next ids (linear probing). */
#define WM_STACK_PROBES 8

/* What a stack_counts entry counts (wm_stack_key.kind). */
#define WM_STACK_ON_CPU 1  /* a cpu-clock sample of the thread */
#define WM_STACK_OFF_CPU 2 /* a switch-out of the thread and the time until its switch-in */
#define WM_STACK_WAKEUP 3  /* a wakeup of the thread: the waker's stacks */

/* stack_id when no stack was taken (a wakeup from interrupt context has no
 * user stack of the waker). Other negative ids are the helper's -errno. */
#define WM_NO_STACK (-1000)

/* Why a stack is missing from an entry (index of stack_lost). */
#define WM_LOST_COUNTS_FULL 0   /* stack_counts was full: the event is lost */
#define WM_LOST_COLLISION 1     /* every id a stack may take held another stack */
#define WM_LOST_STACKS_FULL 2   /* the stacks map was full (or another error) */
#define WM_LOST_OFF_START_FULL 3 /* off_start was full: that off-CPU span is lost */
#define WM_LOST_UNWIND_TRUNCATED 4 /* a user stack's unwinding stopped early */
/* Not a loss: on-CPU samples of the target the program ran for, to tell
 * samples the kernel never delivered from those lost after. */
#define WM_COUNT_SAMPLES 5
/* Not losses either, on-CPU only, to tell which samples due a timer could
 * take: periods the cpu-clock timer skipped on a CPU (it fired more than a
 * period late) while a thread of the target stayed on it; ns the target's
 * threads were on a CPU between their switch-in and switch-out (from
 * sched_switch, bpf_ktime_get_ns); ns the on-CPU program itself ran in
 * the target's samples (interrupt time, charged to the sampled thread). */
#define WM_COUNT_TIMER_SKIPPED 6
#define WM_COUNT_SWITCH_NS 7
#define WM_COUNT_PROGRAM_NS 8
#define WM_LOST_KINDS 9

/* Per CPU, for the on-CPU counters above: the last cpu-clock sample on it
 * (any task), and the target's thread on it since when (tid 0: none). */
struct wm_cpu_clock {
	__u64 last_sample_ns;
	__u64 since_ns;
	__u32 tid;
	__u32 pad;
};

/* A row of the unwind table (see unwind_step() in stacks.bpf.c and
 * src/linux/stacks/leaf.rs): from `start` (a virtual address of the
 * target) up to the next row's start, the frame's CFA and saved %rbp as
 * `rule` says; ra_offset is the CFA's offset from its register minus 8,
 * or WM_NO_RA_OFFSET with WM_CFA_NONE or WM_CFA_END. */
#define WM_NO_RA_OFFSET 0xffffffffu
/* The outermost "frame" of a user stack whose unwinding stopped early: a
 * marker address saying why (no code lies below 16), stored after the
 * frame the walk could not step from. */
#define WM_STOP_DEPTH 1        /* WM_STACK_DEPTH frames */
#define WM_STOP_NO_ROW 2       /* no CFI row and %rbp is 0: no frame-pointer step */
#define WM_STOP_UNENCODED 3    /* a CFI row the table does not encode, and %rbp is 0 */
#define WM_STOP_RA_UNREADABLE 4 /* the return address could not be read */
#define WM_STOP_BP_UNREADABLE 5 /* the saved %rbp could not be read */
#define WM_STOP_NULL_RA 6      /* a null return address where the CFI does not end */

/* Binary search steps over the rows: enough for 2^24 rows. */
#define WM_LEAF_SEARCH_STEPS 24

/* The CFA rule of a row (bits 0-7 of `rule`); the saved %rbp's offset from
 * the CFA is in bits 16-31 (signed, 0: %rbp not saved, unchanged). */
#define WM_CFA_NONE 0 /* no rule known: the frame-pointer step */
#define WM_CFA_RSP 1  /* CFA = %rsp + ra_offset + 8 */
#define WM_CFA_RBP 2  /* CFA = %rbp + ra_offset + 8 */
#define WM_CFA_END 3  /* the outermost frame: no return address */
/* Flag (bit 8 of `rule`) of a WM_CFA_NONE row: the CFI has a rule here that
 * the table does not encode (a DWARF expression, another register), as
 * opposed to no CFI at all. Only tells why a walk stopped. */
#define WM_RULE_UNENCODED 0x100

struct wm_leaf_row {
	__u64 start;
	__u32 ra_offset; /* the return address lies at CFA - 8 */
	__u32 rule;
};

/* Which half of leaf_rows the programs search: its first row and row
 * count (`half` = first | count << 32, one 8-byte word so that a program
 * never reads the first of one half with the count of another), and the
 * value of target_execs for the image the rows describe. */
struct wm_leaf_table {
	__u64 half;
	__u64 execs;
};

struct wm_stack_key {
	__u32 tid;          /* the sampled, switched-out or woken thread */
	__u32 waker_tid;    /* WM_STACK_WAKEUP: the waker (0 = interrupt context) */
	__u32 kind;         /* WM_STACK_* */
	__u32 cause;        /* WM_STACK_OFF_CPU: WM_OFF_* of wakemeter.h */
	__s32 user_stack;   /* id in the stacks map, or negative (see WM_NO_STACK) */
	__s32 kernel_stack;
	char comm[16];      /* name of `tid` */
	char waker_comm[16]; /* WM_STACK_WAKEUP: name of the waker */
	__u64 reserved;     /* 0 */
};

struct wm_stack_count {
	__u64 count;    /* samples, switch-outs or wakeups */
	__u64 total_ns; /* WM_STACK_OFF_CPU: off-CPU time of the finished spans */
};

/* A switched-out thread of the target: when, and the key its span adds to. */
struct wm_off_start {
	__u64 since_ns;
	struct wm_stack_key key;
};

#endif
