/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Records shared by the kernel programs and the Rust loader. The Rust side
 * mirrors them in src/linux/abi.rs; both sides assert the sizes. Every field
 * is 8 bytes wide or an array whose size is a multiple of 8 bytes, so the
 * layout has no padding on any 64-bit ABI.
 */
#ifndef WAKEMETER_H
#define WAKEMETER_H

/* Log2 buckets: 0 holds value 0, i >= 1 holds [2^(i-1), 2^i). Covers u64. */
#define WM_BUCKETS 65
#define WM_COMM_LEN 16
/* Wakers remembered per target thread (wm_thread.waker_*). */
#define WM_WAKER_SLOTS 16

/* Why a thread left the CPU (index into wm_thread.off_ns). */
#define WM_OFF_SLEEP 0
#define WM_OFF_LOCK 1
#define WM_OFF_POLL 2
#define WM_OFF_IO 3
#define WM_OFF_PREEMPTED 4
#define WM_OFF_OTHER 5
#define WM_OFF_CAUSES 6

/* What kind of syscall a thread is in (see syscall_class). */
#define WM_SC_OTHER 1
#define WM_SC_SLEEP 2
#define WM_SC_LOCK 3
#define WM_SC_POLL 4
#define WM_SC_RENAME 5 /* prctl, execve, execveat: comm may change */

/* Who made a thread runnable (index into wm_thread.wakes_by). */
#define WM_WAKE_INTERRUPT 0 /* interrupt context: a timer or an I/O completion */
#define WM_WAKE_TARGET 1    /* another thread of the target */
#define WM_WAKE_OTHER 2     /* a thread of another process */
#define WM_WAKE_SOURCES 3

/* The poll and sleep syscalls counted one by one (index into
 * wm_thread.calls_by_syscall); the Rust side's Syscall enum has the same order. */
#define WM_SYS_POLL 0
#define WM_SYS_PPOLL 1
#define WM_SYS_SELECT 2
#define WM_SYS_PSELECT6 3
#define WM_SYS_EPOLL_WAIT 4
#define WM_SYS_EPOLL_PWAIT 5
#define WM_SYS_EPOLL_PWAIT2 6
#define WM_SYS_NANOSLEEP 7
#define WM_SYS_CLOCK_NANOSLEEP 8
#define WM_SYSCALLS 9

/* Timeout or sleep request sentinels (wm_thread.sc_arg_ns). */
#define WM_ARG_INFINITE (~0ULL)
#define WM_ARG_UNKNOWN (~0ULL - 1)

/* Per-thread state and counters, one entry per TID of the target.
 *
 * Field order matters for speed. The first eight fields are what the
 * switch program touches at every switch, in one 64-byte span. The wake
 * program writes none of them (the run-queue wait comes from the kernel's
 * own accounting at switch-out, not from a time stamp at the wakeup), so a
 * wakeup from another CPU does not pull that line away from the thread's
 * CPU; it writes only `wakes_by` and the waker slots. The syscall fields
 * are touched only on the thread's own CPU and stay out of that span. */
/* Ready descriptors kept per thread, entries of a poll array scanned for
 * them, and one ready-at-once call in this many looked at. */
#define WM_READY_FDS 4
#define WM_READY_SCAN 8
#define WM_READY_SAMPLE 64

struct wm_thread {
	/* Scheduling state (0 = unknown / not set), CLOCK_MONOTONIC ns. */
	__u64 on_since_ns;
	__u64 off_since_ns;
	__u64 off_cause;
	/* The kernel's run_delay of the thread at its last switch-out, with
	 * WM_RUN_DELAY_SEEN set (0 = none seen yet): the next switch-out's
	 * run_delay less this is the wait that ended the thread's off-CPU
	 * span (see on_switch). */
	__u64 run_delay_mark;
	/* Scheduling counters, cumulative since the entry was created.
	 * `wakeups` is no longer written (always 0): the total is the sum of
	 * `wakes_by`; the word keeps the layout. */
	__u64 wakeups;
	__u64 on_cpu_ns;
	__u64 voluntary;
	__u64 involuntary;
	__u64 off_ns[WM_OFF_CAUSES];
	/* The poll or sleep call the thread is blocked in: its number, when
	 * it first blocked (0 = not blocked in one) and its timeout or sleep
	 * request in ns, taken at that moment. */
	__u64 sc_block_nr;
	__u64 sc_block_ns;
	__u64 sc_arg_ns;
	/* Syscall counters. */
	__u64 poll_calls;
	__u64 poll_zero_returns;
	__u64 poll_zero_timeouts;
	__u64 poll_infinite_timeouts;
	__u64 poll_time_ns;
	__u64 sleep_calls;
	__u64 sleep_requested_ns;
	__u64 sleep_actual_ns;
	/* Poll-family calls that blocked at least once (their return is a
	 * wakeup ending a blocking wait), and calls that returned 0 without
	 * ever blocking (a poll that found nothing and did not wait). */
	__u64 poll_blocked_calls;
	__u64 poll_idle_nonblocking;
	/* Sleep calls whose request is known (sleep_requested_ns sums those),
	 * sleep calls ended by a signal (EINTR or a restart code) and the time
	 * they were blocked. */
	__u64 sleep_known_requests;
	__u64 sleep_interrupted;
	__u64 sleep_interrupted_ns;
	/* Wakes by source (WM_WAKE_*); their sum is every wake. */
	__u64 wakes_by[WM_WAKE_SOURCES];
	/* Returns of each poll and sleep syscall (WM_SYS_*). */
	__u64 calls_by_syscall[WM_SYSCALLS];
	__u64 off_hist[WM_BUCKETS];
	__u64 runq_hist[WM_BUCKETS];
	__u64 poll_timeout_hist[WM_BUCKETS];
	char comm[WM_COMM_LEN];
	/* The threads that woke this one most: WM_WAKER_SLOTS slots, each a
	 * waker tid (0 = interrupt context), the wakeups it caused since it
	 * took the slot (0 = free slot), its comm, and a bit of
	 * waker_of_target telling that it is a thread of the target (whose
	 * exit the programs can see in the threads map). They live in the
	 * thread's own entry so that they go when it goes, and reading them
	 * costs nothing beyond the entry. Written only by sched_waking, which
	 * the kernel runs under the woken task's pi_lock (plain stores). */
	__u32 waker_tid[WM_WAKER_SLOTS];
	__u64 waker_count[WM_WAKER_SLOTS];
	__u64 waker_of_target;
	char waker_comm[WM_WAKER_SLOTS][WM_COMM_LEN];
	/* Only when the observer is in a PID namespace other than the initial
	 * one (pidns_ino set): each waker's id there (0 for interrupt context
	 * and for wakers outside it), and the thread's own id there. The key
	 * and waker_tid stay initial-namespace ids, which the programs compare. */
	__u32 waker_ns_tid[WM_WAKER_SLOTS];
	__u64 ns_tid;
	/* The process the thread belongs to (initial-namespace id): one map
	 * serves every watched process, and its reader splits it by this. */
	__u64 tgid;
	/* futex waits with a timeout (FUTEX_WAIT, FUTEX_WAIT_BITSET) that
	 * returned, and those of them that returned -ETIMEDOUT: a timed wait
	 * that nobody ended, i.e. the thread's own timer (a runtime's timed
	 * condition wait, ScheduledExecutor, a tokio park with a deadline). */
	__u64 futex_timed_waits;
	__u64 futex_timeouts;
	/* The descriptors a poll or ppoll call found ready without blocking,
	 * as of the last such call looked at (one in WM_READY_SAMPLE): at most
	 * WM_READY_FDS of the first WM_READY_SCAN entries of its array, and
	 * how many (0: none seen). What a loop that never blocks polls. */
	__s32 ready_fd[WM_READY_FDS];
	__u32 ready_fds;
	__u32 ready_pad;
	/* Written by the task iterator only: the reader (wm_iter_ctl.reader)
	 * that last got this entry whole, and the entry's mark then (see
	 * entry_mark). While both still match, the iterator writes the row's
	 * head alone: that reader has the entry already. */
	__u64 read_by;
	__u64 read_mark;
};

/* The watched set: bit (tgid % 64) of word (tgid / 64). PID_MAX_LIMIT is
 * 4,194,304 on 64-bit kernels, so 65,536 words (512 KiB) cover every id. */
#define WM_TGID_WORDS 65536
/* Processes watched at once by one program set (the `targets` map). */
#define WM_MAX_TARGETS 4096

/* Per watched process: what cannot be told per thread. Written by the
 * programs with atomic adds (exits, dropped) and once (dead). */
struct wm_target {
	/* Threads of the process that exited since it joined the set. */
	__u64 exits;
	/* Events of its threads that the full threads map could not take. */
	__u64 dropped;
	/* 1 once its last thread exited: from then on no entry is created
	 * for its id, so a new process that reuses the id before the loader
	 * takes it out of the set is never counted as this one. */
	__u64 dead;
};

/* Parts of the programs a cost measurement can switch off (the `parts_off`
 * global; 0 in every real use). With a part off the counters it feeds are
 * wrong: only the benches set it, to find what each part costs per run. */
#define WM_PART_CAUSE 1U     /* the off-CPU cause: saved registers, syscall class */
#define WM_PART_STORAGE 2U   /* per-thread entries: a per-CPU scratch entry instead */
#define WM_PART_WAKERS 4U    /* the waker slots of sched_waking */
#define WM_PART_RUN_DELAY 8U /* the schedstat read (sched_info.run_delay) */
#define WM_PART_CLOCK 16U    /* the clock read of sched_switch */

/* What the next walk of the task iterator does (iter_ctl's one entry). */
struct wm_iter_ctl {
	/* The process whose entries are written out (initial-namespace
	 * id); 0 for every watched process. */
	__u32 tgid;
	/* 1: first give that process's threads their entries from `seeds`. */
	__u32 seed;
	/* Who reads (any id but 0, one per reading session): entries this
	 * reader got whole on its last walk and that have not changed since
	 * come out as a head alone. 0: every entry whole. */
	__u64 reader;
};

/* The head of each entry the task iterator writes; the struct wm_thread
 * follows it unless `unchanged` is 1. */
struct wm_iter_row {
	__u32 tid; /* initial-namespace thread id */
	/* 1: the entry is as the reader got it last time (no body follows). */
	__u32 unchanged;
};

#endif
