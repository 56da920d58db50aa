/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Records shared by the kernel programs and the Rust loader. The Rust side
 * mirrors them in src/linux/abi.rs; both sides assert the sizes. Every field
 * is 8 bytes wide (or a byte array whose size is a multiple of 8), so the
 * layout has no padding on any 64-bit ABI.
 */
#ifndef WAKEMETER_H
#define WAKEMETER_H

/* Log2 buckets: 0 holds value 0, i >= 1 holds [2^(i-1), 2^i). Covers u64. */
#define WM_BUCKETS 65
#define WM_COMM_LEN 16

/* Why a thread left the CPU (index into wm_thread.off_ns). */
#define WM_OFF_SLEEP 0
#define WM_OFF_LOCK 1
#define WM_OFF_POLL 2
#define WM_OFF_IO 3
#define WM_OFF_PREEMPTED 4
#define WM_OFF_OTHER 5
#define WM_OFF_CAUSES 6

/* What the thread's current syscall is (wm_thread.sc_class). */
#define WM_SC_NONE 0
#define WM_SC_OTHER 1
#define WM_SC_SLEEP 2
#define WM_SC_LOCK 3
#define WM_SC_POLL 4
#define WM_SC_RENAME 5 /* prctl, execve, execveat: comm may change */

/* wm_thread.sc_arg_ns sentinels. */
#define WM_ARG_INFINITE (~0ULL)
#define WM_ARG_UNKNOWN (~0ULL - 1)

/* Per-thread state and counters, one entry per TID of the target. */
struct wm_thread {
	/* Scheduling state (0 = unknown / not set), CLOCK_MONOTONIC ns. */
	__u64 on_since_ns;
	__u64 off_since_ns;
	__u64 woken_at_ns;
	__u64 off_cause;
	/* Current syscall: class, entry time, timeout or sleep request (ns). */
	__u64 sc_class;
	__u64 sc_enter_ns;
	__u64 sc_arg_ns;
	/* Counters, cumulative since the entry was created. */
	__u64 on_cpu_ns;
	__u64 voluntary;
	__u64 involuntary;
	__u64 off_ns[WM_OFF_CAUSES];
	__u64 wakeups;
	__u64 poll_calls;
	__u64 poll_zero_returns;
	__u64 poll_zero_timeouts;
	__u64 poll_infinite_timeouts;
	__u64 poll_time_ns;
	__u64 sleep_calls;
	__u64 sleep_requested_ns;
	__u64 sleep_actual_ns;
	__u64 off_hist[WM_BUCKETS];
	__u64 runq_hist[WM_BUCKETS];
	__u64 poll_timeout_hist[WM_BUCKETS];
	char comm[WM_COMM_LEN];
};

/* Key of the wakers map: who (waker) woke which target thread. */
struct wm_waker_key {
	__u32 target_tid;
	__u32 waker_tid;
};

struct wm_waker {
	__u64 count;
	char comm[WM_COMM_LEN];
};

#endif
