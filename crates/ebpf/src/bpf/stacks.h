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
#define WM_LOST_LEAF_CALLER 4   /* the leaf's return address could not be read */
#define WM_LOST_KINDS 5

/* A row of the leaf table (see leaf_caller() in stacks.bpf.c and
 * src/linux/stacks/leaf.rs): from `start` (a virtual address of the
 * target) up to the next row's start, the return address of a function
 * lies at sp + ra_offset, or WM_NO_RA_OFFSET: the frame has a frame
 * pointer (or a rule too complex for one step), the frame-pointer walk is
 * right. */
#define WM_NO_RA_OFFSET 0xffffffffu
/* Binary search steps over the rows: enough for 2^24 rows. */
#define WM_LEAF_SEARCH_STEPS 24

struct wm_leaf_row {
	__u64 start;
	__u32 ra_offset;
	__u32 pad;
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
	/* The direct caller of the user stack's leaf frame when that frame
	 * has no frame pointer (its return address, read at sp + the leaf
	 * table's offset); 0: none recovered. The frame-pointer walk skips it. */
	__u64 leaf_caller;
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
