// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * Kernel side of wakemeter-ebpf: per-thread scheduling and syscall counters
 * of the watched processes (the `watched` set). One loaded set of programs
 * serves every watched process: adding or removing one is a map update, not
 * a new attach, so the cost to the machine does not grow with their number.
 *
 * Every handler exists twice, as `tp_btf/...` (BTF-typed arguments, direct
 * field loads) and as `raw_tp/...` (untyped arguments, reads through
 * bpf_probe_read_kernel). Both call the same always-inline body with a
 * constant `btf` flag, so the compiler keeps only one kind of read in each.
 * The loader attaches the tp_btf flavour and falls back to raw_tp.
 *
 * Every handler tests the process id against the watched set first (one
 * bit in an array the verifier inlines) and returns at once for other
 * processes: that path is what the whole machine pays.
 *
 * Where the entries live: built with WM_WITH_TASK_STORE (the loader's
 * first choice, Linux 5.11+), the tp_btf programs keep them in task-local
 * storage (`thread_store`), found from
 * the task pointer the tracepoint hands over, without hashing a thread id
 * (the lookups were most of a switch's cost: BENCHMARKS.md, "A
 * 64-active-thread target"); user space reads them with the task iterator
 * `wm_dump_threads`. The raw_tp programs have no typed task pointer and
 * keep them in the `threads` hash map, keyed by thread id.
 */
#include "vmlinux_min.h"
#include "bpf_min.h"
#include "wakemeter.h"
#include "sched_classify.h"
#include "pid_ns.h"
#include "sched_events.h"

/* Dual licence string so the kernel grants the GPL-only helpers we call
 * (bpf_probe_read_kernel/user); the source itself is MIT OR Apache-2.0. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* The nsfs inode of the PID namespace the observer names threads in, 0 for
 * the initial one (set by the loader). When set, each entry and waker slot
 * also keeps the thread's id there (see pid_ns.h); when 0, the verifier
 * drops that code. */
const volatile __u64 pidns_ino = 0;
/* Whether the sys_exit program is attached (set by the loader): only then
 * does a switch-out note the poll or sleep call it blocks in. */
const volatile __u32 syscalls_on = 1;
/* WM_PART_* bits: parts switched off for a cost measurement (set by the
 * loader, 0 unless a bench asks). A constant to the verifier, which drops
 * the code of the parts that are off, or the tests when none is. */
const volatile __u32 parts_off = 0;
/* Whether a program with typed arguments (`btf`) uses task storage (the
 * loader then attaches every hook as tp_btf, or loads the other object). */
#ifdef WM_WITH_TASK_STORE
#define WM_TASK_STORE(btf) (btf)
#else
#define WM_TASK_STORE(btf) 0
#endif

/* The watched processes (initial-namespace ids), as bits: see WM_TGID_WORDS.
 * Written by the loader only. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WM_TGID_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} watched SEC(".maps");

/* Per watched process (by tgid): exits, drops and death. The loader creates
 * the entry before it sets the process's bit and deletes it after clearing
 * the bit. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct wm_target);
} targets SEC(".maps");

/* One entry per live thread of a watched process; deleted when the thread
 * exits (or moved, when a thread other than the leader calls execve and
 * takes over the leader's id). Its wakers live inside the entry.
 * max_entries is overridden by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct wm_thread);
} threads SEC(".maps");

#ifdef WM_WITH_TASK_STORE
/* The entries in task-local storage (see the top of this file): one per
 * live thread of a watched process, freed with the task, deleted at its
 * exit, and by the task iterator once its process leaves the set. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct wm_thread);
} thread_store SEC(".maps");

/* Entries user space prepares for threads blocked when their process
 * joins (see seed_blocked_threads in the loader), by thread id; the task
 * iterator moves them into task storage. max_entries is overridden. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct wm_thread);
} seeds SEC(".maps");

/* What the next walk of the task iterator does (written by the loader). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_iter_ctl);
} iter_ctl SEC(".maps");

/* The entry in task storage of task `t`, created (zeroed) with
 * BPF_LOCAL_STORAGE_GET_F_CREATE in `flags`. */
static __always_inline struct wm_thread *stored_entry(struct task_struct *t, __u64 flags)
{
	return bpf_task_storage_get(&thread_store, t, 0, flags);
}

static __always_inline void forget_stored(struct task_struct *t)
{
	bpf_task_storage_delete(&thread_store, t);
}
#else
static __always_inline struct wm_thread *stored_entry(struct task_struct *t, __u64 flags)
{
	return NULL;
}

static __always_inline void forget_stored(struct task_struct *t) {}
#endif

/* All-zero template for new thread entries (too big for the 512-byte stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_thread);
} zero_thread SEC(".maps");

/* The entry every event uses when WM_PART_STORAGE is off (parts_off): one
 * per CPU, found without a helper call, so the difference to a real run is
 * what reaching the thread's own entry costs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_thread);
} scratch_thread SEC(".maps");

/* CLOCK_REALTIME minus CLOCK_MONOTONIC in ns, written by the loader when it
 * attaches and at every read (0 = not known yet): what turns an absolute
 * CLOCK_REALTIME sleep deadline into a length. A clock step between two
 * reads makes the lengths of the sleeps in between off by the step. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} realtime_offset SEC(".maps");

#define TIMER_ABSTIME 1
#define CLOCK_REALTIME 0
#define CLOCK_MONOTONIC 1
#define CLOCK_BOOTTIME 7
/* Syscall results that mean "interrupted by a signal": -EINTR, and the
 * restart codes the kernel turns into -EINTR or a restart after sys_exit
 * (ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK). */
#define WM_EINTR 4
#define WM_ERESTARTSYS 512
#define WM_ERESTARTNOHAND 514
#define WM_ERESTART_RESTARTBLOCK 516
#define NSEC_PER_SEC 1000000000ULL
#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC 1000000ULL


/* Whether process `tgid` is watched. */
static __always_inline bool is_watched(__u32 tgid)
{
	__u32 word = tgid >> 6;
	__u64 *bits = bpf_map_lookup_elem(&watched, &word);
	return bits && ((*bits >> (tgid & 63)) & 1);
}

/* Events of process `tgid` lost because the threads map was full. */
static __always_inline void count_drops(__u32 tgid, __u64 events)
{
	struct wm_target *t = bpf_map_lookup_elem(&targets, &tgid);
	if (t)
		__sync_fetch_and_add(&t->dropped, events);
}

/* Keeps the compiler from reordering the stores around it. */
#define WM_BARRIER() asm volatile("" ::: "memory")

/* Bucket index as in the Rust log2_bucket: 0 for 0, else floor(log2 v) + 1. */
static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 r = 0;
	if (v == 0)
		return 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r + 1;
}

static __always_inline void hist_add(__u64 *hist, __u64 value)
{
	__u32 i = log2_bucket(value);
	if (i < WM_BUCKETS) /* always true; bounds the index for the verifier */
		hist[i] += 1;
}

/* The entry of `tid` of watched process `tgid`, created (zeroed, with the
 * task's comm, or current's when `task` is NULL) if missing. NULL when the
 * map is full (counted as a dropped event), and when the process is not
 * (or no longer) a live member of the set: an id reused by a new process
 * before the loader took the dead one out gets no entry. */
static __always_inline struct wm_thread *thread_entry(__u32 tid, __u32 tgid,
						      struct task_struct *task, const bool btf)
{
	if (parts_off & WM_PART_STORAGE) {
		__u32 zero = 0;
		return bpf_map_lookup_elem(&scratch_thread, &zero);
	}
	if (WM_TASK_STORE(btf)) {
		struct task_struct *t = task ? task : bpf_get_current_task_btf();
		struct wm_thread *ts = stored_entry(t, 0);
		if (ts)
			return ts;
		struct wm_target *target = bpf_map_lookup_elem(&targets, &tgid);
		if (!target || target->dead)
			return NULL;
		/* Zeroed by the kernel. NULL when another CPU created it at the
		 * same moment (then the lookup finds that one), when the
		 * allocation fails, or when this CPU is already inside a task
		 * storage call (the kernel's recursion guard). */
		ts = stored_entry(t, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!ts)
			ts = stored_entry(t, 0);
		if (!ts) {
			count_drops(tgid, 1);
			return NULL;
		}
		if (!ts->tgid) {
			ts->tgid = tgid;
			__builtin_memcpy(&ts->comm, t->comm, sizeof(ts->comm));
			if (pidns_ino)
				ts->ns_tid = task_or_current_ns_tid(task, pidns_ino);
		}
		return ts;
	}
	struct wm_thread *st = bpf_map_lookup_elem(&threads, &tid);
	if (st)
		return st;
	struct wm_target *target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target || target->dead)
		return NULL;
	__u32 zero = 0;
	struct wm_thread *init = bpf_map_lookup_elem(&zero_thread, &zero);
	if (!init)
		return NULL;
	long err = bpf_map_update_elem(&threads, &tid, init, BPF_NOEXIST);
	if (err && err != -WM_EEXIST) {
		count_drops(tgid, 1);
		return NULL;
	}
	st = bpf_map_lookup_elem(&threads, &tid);
	if (st && !err) {
		st->tgid = tgid;
		if (task)
			bpf_probe_read_kernel(&st->comm, sizeof(st->comm), &task->comm);
		else
			bpf_get_current_comm(&st->comm, sizeof(st->comm));
		if (pidns_ino)
			st->ns_tid = task_or_current_ns_tid(task, pidns_ino);
	}
	return st;
}


/* Timeout or sleep length in ns from a user timespec; NULL is infinite. */
static __always_inline __u64 user_timespec_ns(__u64 uptr)
{
	if (!uptr)
		return WM_ARG_INFINITE;
	struct wm_timespec ts = {};
	if (bpf_probe_read_user(&ts, sizeof(ts), (const void *)uptr))
		return WM_ARG_UNKNOWN;
	if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= (__s64)NSEC_PER_SEC)
		return WM_ARG_UNKNOWN; /* the syscall fails with EINVAL */
	if ((__u64)ts.tv_sec > 18000000000ULL) /* > ~570 years: treat as forever */
		return WM_ARG_INFINITE;
	return (__u64)ts.tv_sec * NSEC_PER_SEC + (__u64)ts.tv_nsec;
}

#ifdef NR_SELECT
static __always_inline __u64 user_timeval_ns(__u64 uptr)
{
	if (!uptr)
		return WM_ARG_INFINITE;
	struct wm_timeval tv = {};
	if (bpf_probe_read_user(&tv, sizeof(tv), (const void *)uptr))
		return WM_ARG_UNKNOWN;
	if (tv.tv_sec < 0 || tv.tv_usec < 0)
		return WM_ARG_UNKNOWN;
	if ((__u64)tv.tv_sec > 18000000000ULL)
		return WM_ARG_INFINITE;
	return (__u64)tv.tv_sec * NSEC_PER_SEC + (__u64)tv.tv_usec * NSEC_PER_USEC;
}

#endif

static __always_inline __u64 millis_ns(__u64 reg)
{
	int ms = (int)reg;
	if (ms < 0)
		return WM_ARG_INFINITE;
	return (__u64)ms * NSEC_PER_MSEC;
}

/* The timeout (poll family) or sleep request (nanosleep family) of call
 * `nr` in ns, read from its arguments; WM_ARG_INFINITE or WM_ARG_UNKNOWN
 * otherwise. An absolute clock_nanosleep deadline counts from `now` (read
 * here when 0). */
static __always_inline __u64 syscall_arg_ns(long nr, struct pt_regs *regs, const bool btf,
					    __u64 now)
{
	__u64 a = 0;
	switch (nr) {
	case NR_NANOSLEEP:
		WM_READ(btf, a, WM_SYSCALL_ARG0(regs));
		return user_timespec_ns(a);
	case NR_CLOCK_NANOSLEEP: {
		__u64 clock = 0, flags = 0;
		WM_READ(btf, clock, WM_SYSCALL_ARG0(regs));
		WM_READ(btf, flags, WM_SYSCALL_ARG1(regs));
		WM_READ(btf, a, WM_SYSCALL_ARG2(regs));
		__u64 arg = user_timespec_ns(a);
		if (!(flags & TIMER_ABSTIME) || arg >= WM_ARG_UNKNOWN)
			return arg;
		/* Absolute deadline: its length counts from the clock's value
		 * now (the call's first block, or its return when it never
		 * blocked). Other clocks (TAI, the CPU-time clocks) are unknown. */
		__u64 clock_now;
		if ((int)clock == CLOCK_MONOTONIC) {
			clock_now = now ? now : bpf_ktime_get_ns();
		} else if ((int)clock == CLOCK_BOOTTIME) {
			clock_now = bpf_ktime_get_boot_ns();
		} else if ((int)clock == CLOCK_REALTIME) {
			__u32 zero = 0;
			__s64 *offset = bpf_map_lookup_elem(&realtime_offset, &zero);
			if (!offset || *offset == 0)
				return WM_ARG_UNKNOWN;
			clock_now = (now ? now : bpf_ktime_get_ns()) + (__u64)*offset;
		} else {
			return WM_ARG_UNKNOWN;
		}
		return arg > clock_now ? arg - clock_now : 0;
	}
#ifdef NR_POLL
	case NR_POLL:
		WM_READ(btf, a, WM_SYSCALL_ARG2(regs));
		return millis_ns(a);
#endif
#ifdef NR_SELECT
	case NR_SELECT:
		WM_READ(btf, a, WM_SYSCALL_ARG4(regs));
		return user_timeval_ns(a);
#endif
#ifdef NR_EPOLL_WAIT
	case NR_EPOLL_WAIT:
#endif
	case NR_EPOLL_PWAIT:
		WM_READ(btf, a, WM_SYSCALL_ARG3(regs));
		return millis_ns(a);
	case NR_EPOLL_PWAIT2:
		WM_READ(btf, a, WM_SYSCALL_ARG3(regs));
		return user_timespec_ns(a);
	case NR_PPOLL:
		WM_READ(btf, a, WM_SYSCALL_ARG2(regs));
		return user_timespec_ns(a);
	case NR_PSELECT6:
		WM_READ(btf, a, WM_SYSCALL_ARG4(regs));
		return user_timespec_ns(a);
	default:
		return WM_ARG_UNKNOWN;
	}
}

/* --- sched_switch(bool preempt, task *prev, task *next, unsigned prev_state) --- */

/* Marks a run_delay as seen (the kernel's run_delay stays far below 2^63). */
#define WM_RUN_DELAY_SEEN (1ULL << 63)

/* At a switch-out of `prev` (whose entry is `st`, its off_cause still the
 * previous switch-out's): the run-queue wait of the run that ends now, into
 * runq_hist when that run began with a wakeup. The kernel adds each wait to
 * the task's sched_info.run_delay when the task gets the CPU, measured on
 * the run queue's clock from the moment it was queued (what schedstat
 * reports), so the wait is the growth of run_delay since the last
 * switch-out. A thread that was preempted waited too, but not for a
 * wakeup: its wait is its preempted off-CPU time, and it is not counted
 * here. Taking the wait from the kernel keeps sched_waking from reading a
 * clock and from writing into the woken thread's entry on the waker's CPU
 * (BENCHMARKS.md, "A 64-active-thread target"). Kernels without
 * CONFIG_SCHED_INFO have no run_delay: the histogram stays empty. */
static __always_inline void note_run_delay(struct wm_thread *st, struct task_struct *prev,
					   const bool btf)
{
	if (!__builtin_preserve_field_info(prev->sched_info, 2 /* BPF_FIELD_EXISTS */) ||
	    (parts_off & WM_PART_RUN_DELAY))
		return;
	__u64 run_delay = 0;
	WM_READ(btf, run_delay, prev->sched_info.run_delay);
	__u64 mark = st->run_delay_mark;
	__u64 before = mark & ~WM_RUN_DELAY_SEEN;
	if (mark && st->off_cause != WM_OFF_PREEMPTED && run_delay >= before)
		hist_add(st->runq_hist, run_delay - before);
	st->run_delay_mark = run_delay | WM_RUN_DELAY_SEEN;
}

static __always_inline int on_switch(__u64 *ctx, const bool btf)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u64 cur = current_pid_tgid(prev, btf); /* current == prev */
	__u32 prev_tgid = (__u32)(cur >> 32);
	__u32 next_tgid = task_tgid(next, btf);
	bool prev_watched = is_watched(prev_tgid);
	bool next_watched = is_watched(next_tgid);
	if (!prev_watched && !next_watched)
		return 0;

	__u64 now = (parts_off & WM_PART_CLOCK) ? 1 : bpf_ktime_get_ns();
	if (prev_watched) {
		__u32 tid = (__u32)cur;
		bool preempt = (bool)ctx[0];
		__u32 prev_state = (__u32)ctx[3];
		if (prev_state & TASK_DEAD) {
			/* Final switch of an exiting thread: never recreate it. */
			if (WM_TASK_STORE(btf))
				forget_stored(prev);
			else
				forget_thread(&threads, tid);
		} else {
			struct wm_thread *st = thread_entry(tid, prev_tgid, prev, btf);
			if (st) {
				if (st->on_since_ns && now > st->on_since_ns)
					st->on_cpu_ns += now - st->on_since_ns;
				st->on_since_ns = 0;
				/* The cause is the syscall it blocks in, read from its
				 * saved registers (current == prev). */
				struct pt_regs *regs;
				long nr;
				__u64 cause;
				if (parts_off & WM_PART_CAUSE) {
					regs = NULL;
					nr = -1;
					cause = preempt || prev_state == 0 ? WM_OFF_PREEMPTED
									   : WM_OFF_OTHER;
				} else {
					cause = off_cpu_cause(prev, preempt, prev_state, btf, &regs,
							      &nr);
				}
				if (cause == WM_OFF_PREEMPTED) {
					st->involuntary += 1;
				} else {
					st->voluntary += 1;
					/* First block of a poll or sleep call: what
					 * sys_exit needs to time it. */
					__u32 cls = syscall_class(nr);
					if (syscalls_on && regs && !st->sc_block_ns &&
					    (cls == WM_SC_POLL || cls == WM_SC_SLEEP)) {
						st->sc_block_nr = (__u64)nr;
						st->sc_block_ns = now;
						st->sc_arg_ns = syscall_arg_ns(nr, regs, btf, now);
					}
				}
				note_run_delay(st, prev, btf);
				st->off_cause = cause;
				/* Last, after a barrier: entry_mark reads it. */
				WM_BARRIER();
				st->off_since_ns = now;
			}
		}
	}
	if (next_watched) {
		struct wm_thread *st = thread_entry(task_tid(next, btf), next_tgid, next, btf);
		if (st) {
			if (st->off_since_ns && now > st->off_since_ns) {
				__u64 d = now - st->off_since_ns;
				__u64 cause = st->off_cause;
				if (cause < WM_OFF_CAUSES)
					st->off_ns[cause] += d;
				hist_add(st->off_hist, d);
			}
			st->off_since_ns = 0;
			WM_BARRIER(); /* on_since last: entry_mark reads it */
			st->on_since_ns = now;
		}
	}
	return 0;
}

SEC("tp_btf/sched_switch")
int tpbtf_sched_switch(__u64 *ctx) { return on_switch(ctx, true); }

SEC("raw_tp/sched_switch")
int rawtp_sched_switch(__u64 *ctx) { return on_switch(ctx, false); }

/* --- sched_waking(task *p): runs in the waker's context --- */

/* Whether the waker in slot `i` of `st` is known to have exited: a thread
 * of the target that is no longer in the threads map. Wakers of other
 * processes and interrupts are never known to have exited, and with task
 * storage none is (an entry cannot be looked up by thread id there): the
 * slot with the fewest wakeups is then the one reused. */
static __always_inline bool waker_exited(struct wm_thread *st, __u32 i, const bool btf)
{
	if (WM_TASK_STORE(btf))
		return false;
	if (i >= WM_WAKER_SLOTS || !(st->waker_of_target & (1ULL << i)))
		return false;
	__u32 tid = st->waker_tid[i];
	return bpf_map_lookup_elem(&threads, &tid) == NULL;
}

/* Counts one wakeup of `st` by the current task (or by interrupt context).
 * A waker without a slot takes a free one, else the slot of a waker of the
 * target that has exited, else the one with the fewest wakeups, whose
 * attribution is then forgotten. That is not a dropped event: the wakeup
 * itself is still counted in `wakeups`, and the slots keep the most
 * frequent wakers; counting it as a drop would raise a "counters are low"
 * warning for any thread woken by more than 16 threads of other processes. */
static __always_inline void note_waker(struct wm_thread *st, __u64 id, bool irq, bool of_target,
				       const bool btf)
{
	__u32 waker = irq ? 0 : (__u32)id;
	__u32 free_slot = WM_WAKER_SLOTS, min_slot = 0;
	__u64 min_count = ~0ULL; /* only to find the smallest slot */
	for (__u32 i = 0; i < WM_WAKER_SLOTS; i++) {
		__u64 c = st->waker_count[i];
		if (c == 0) {
			if (free_slot == WM_WAKER_SLOTS)
				free_slot = i;
			continue;
		}
		if (st->waker_tid[i] == waker) {
			st->waker_count[i] = c + 1;
			return;
		}
		if (c < min_count) {
			min_count = c;
			min_slot = i;
		}
	}
	__u32 slot = free_slot;
	if (slot == WM_WAKER_SLOTS) {
		for (__u32 i = 0; i < WM_WAKER_SLOTS; i++) {
			if (waker_exited(st, i, btf)) {
				slot = i;
				break;
			}
		}
	}
	if (slot == WM_WAKER_SLOTS)
		slot = min_slot;
	if (slot >= WM_WAKER_SLOTS) /* always false; bounds the index for the verifier */
		return;
	/* A reader sees a free slot (count 0) until the new waker is in it. */
	st->waker_count[slot] = 0;
	WM_BARRIER();
	st->waker_tid[slot] = waker;
	if (pidns_ino)
		st->waker_ns_tid[slot] = irq ? 0 : current_ns_tid(pidns_ino);
	waker_comm(st->waker_comm[slot], irq);
	if (of_target)
		st->waker_of_target |= 1ULL << slot;
	else
		st->waker_of_target &= ~(1ULL << slot);
	WM_BARRIER();
	st->waker_count[slot] = 1;
}

static __always_inline int on_waking(__u64 *ctx, const bool btf)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u32 tgid = task_tgid(p, btf);
	if (!is_watched(tgid))
		return 0;

	struct wm_thread *st = thread_entry(task_tid(p, btf), tgid, p, btf);
	if (!st)
		return 0;

	/* The wakeups are counted once, by source: their sum is the total.
	 * Plain adds, no atomics (a locked add per wake was a measurable part
	 * of this program): the kernel runs sched_waking under the woken
	 * task's pi_lock, so two wakes of one thread do not write its entry
	 * at once. The one exception is a task waking itself, which takes no
	 * lock; a wake from another CPU within the same few instructions
	 * could then lose one count. */
	struct task_struct *cur = typed_current(btf);
	__u64 id = current_pid_tgid(cur, btf);
	bool irq = in_interrupt(ctx, btf, cur);
	bool of_target = !irq && (__u32)(id >> 32) == tgid;
	__u32 source = irq ? WM_WAKE_INTERRUPT : of_target ? WM_WAKE_TARGET : WM_WAKE_OTHER;
	if (!(parts_off & WM_PART_WAKERS))
		note_waker(st, id, irq, of_target, btf);
	/* Last, after a barrier: the task iterator's mark (entry_mark) reads
	 * wakes_by, so a walk that sees the new count sees the slots too. */
	WM_BARRIER();
	if (source < WM_WAKE_SOURCES) /* always true; bounds the index for the verifier */
		st->wakes_by[source] += 1;
	return 0;
}

SEC("tp_btf/sched_waking")
int tpbtf_sched_waking(__u64 *ctx) { return on_waking(ctx, true); }

SEC("raw_tp/sched_waking")
int rawtp_sched_waking(__u64 *ctx) { return on_waking(ctx, false); }

/* --- sched_process_exit(task *p, ...): runs in the exiting thread, after
 * do_exit has counted it out of its process's live threads --- */

static __always_inline int on_exit(__u64 *ctx, const bool btf)
{
	/* `p` is the current task: its ids come from it on the typed path. */
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u64 id = current_pid_tgid(p, btf);
	__u32 tgid = (__u32)(id >> 32);
	if (!is_watched(tgid))
		return 0;
	if (WM_TASK_STORE(btf))
		forget_stored(p);
	else
		forget_thread(&threads, (__u32)id);
	struct wm_target *t = bpf_map_lookup_elem(&targets, &tgid);
	if (!t)
		return 0;
	__sync_fetch_and_add(&t->exits, 1);
	struct signal_struct *signal = NULL;
	WM_READ(btf, signal, p->signal);
	int live = 1;
	if (signal)
		WM_READ(btf, live, signal->live.counter);
	if (live == 0)
		t->dead = 1;
	return 0;
}

SEC("tp_btf/sched_process_exit")
int tpbtf_sched_process_exit(__u64 *ctx) { return on_exit(ctx, true); }

SEC("raw_tp/sched_process_exit")
int rawtp_sched_process_exit(__u64 *ctx) { return on_exit(ctx, false); }

/* --- sched_process_exec(task *p, pid_t old_pid, linux_binprm *bprm) ---
 *
 * Runs in the thread that called execve, after the new program is in place.
 * When that thread was not the leader, the kernel has killed every other
 * thread and given it the leader's id (the tgid); its old id disappears
 * without an exit of its own. Its entry is moved to the new id, so the
 * counters follow the task as procfs's do, and no ghost entry stays behind.
 * Events seen between the id change and this program (a switch while the
 * new program was being loaded) created an entry under the new id already:
 * the old counters are added to it. */

/* wm_thread as an array of u64: the cumulative counters are words
 * [WM_W_SCHED, WM_W_SCHED_END) and [WM_W_SYSCALL, WM_W_COMM), and the
 * futex counts appended after the wakers; the other words are state of
 * the moment (kept from the newer entry), comm and wakers (the old
 * entry's wakers were the threads the exec killed). */
#define WM_W_SCHED (__builtin_offsetof(struct wm_thread, wakeups) / 8)
#define WM_W_SCHED_END (__builtin_offsetof(struct wm_thread, sc_block_nr) / 8)
#define WM_W_SYSCALL (__builtin_offsetof(struct wm_thread, poll_calls) / 8)
#define WM_W_COMM (__builtin_offsetof(struct wm_thread, comm) / 8)

static __always_inline void add_counters(struct wm_thread *dst, struct wm_thread *src)
{
	__u64 *d = (__u64 *)dst, *s = (__u64 *)src;
	for (__u32 i = WM_W_SCHED; i < WM_W_COMM; i++) {
		if (i >= WM_W_SCHED_END && i < WM_W_SYSCALL)
			continue;
		d[i] += s[i];
	}
	dst->futex_timed_waits += src->futex_timed_waits;
	dst->futex_timeouts += src->futex_timeouts;
}

static __always_inline int on_exec(__u64 *ctx, const bool btf)
{
	/* `p` is the current task: its ids come from it on the typed path. */
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u64 id = current_pid_tgid(p, btf);
	__u32 tgid = (__u32)(id >> 32);
	if (!is_watched(tgid))
		return 0;
	if (WM_TASK_STORE(btf)) {
		/* Task storage follows the task through the id change: only
		 * its name (and its id in the observer's namespace) changed. */
		struct wm_thread *st = stored_entry(p, 0);
		if (st) {
			bpf_get_current_comm(&st->comm, sizeof(st->comm));
			if (pidns_ino)
				st->ns_tid = current_ns_tid(pidns_ino);
		}
		return 0;
	}
	__u32 tid = (__u32)id;
	__u32 old_tid = (__u32)ctx[1];
	if (old_tid == tid)
		return 0;
	struct wm_thread *old = bpf_map_lookup_elem(&threads, &old_tid);
	if (!old)
		return 0;
	struct wm_thread *now = bpf_map_lookup_elem(&threads, &tid);
	bool moved = false;
	if (!now) {
		long err = bpf_map_update_elem(&threads, &tid, old, BPF_NOEXIST);
		moved = !err;
		if (err && err != -WM_EEXIST)
			count_drops(tgid, 1); /* the map is full: the counters are lost */
		now = bpf_map_lookup_elem(&threads, &tid);
	}
	if (now) {
		if (moved) {
			/* The old entry's wakers were the threads the exec killed. */
			for (__u32 i = 0; i < WM_WAKER_SLOTS; i++)
				now->waker_count[i] = 0;
			now->waker_of_target = 0;
		} else {
			add_counters(now, old);
		}
		bpf_get_current_comm(&now->comm, sizeof(now->comm));
		if (pidns_ino)
			now->ns_tid = current_ns_tid(pidns_ino);
	}
	bpf_map_delete_elem(&threads, &old_tid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int tpbtf_sched_process_exec(__u64 *ctx) { return on_exec(ctx, true); }

SEC("raw_tp/sched_process_exec")
int rawtp_sched_process_exec(__u64 *ctx) { return on_exec(ctx, false); }

/* --- sys_exit(pt_regs *regs, long ret): runs in the returning thread ---
 *
 * There is deliberately no sys_enter program. Enabling a raw syscall
 * tracepoint puts every syscall of every process on the machine on the
 * traced path (cost per syscall: BENCHMARKS.md, "Syscall cost for every
 * other process"); one program instead of two halves that. What sys_enter would have told is found elsewhere:
 * the arguments are still in the saved registers at exit, and the moment a
 * poll or sleep call blocks is its first switch-out (on_switch). */

/* The WM_SYS_* index of a poll or sleep syscall, WM_SYSCALLS for others. */
static __always_inline __u32 syscall_index(long nr)
{
	switch (nr) {
#ifdef NR_POLL
	case NR_POLL: return WM_SYS_POLL;
#endif
#ifdef NR_SELECT
	case NR_SELECT: return WM_SYS_SELECT;
#endif
#ifdef NR_EPOLL_WAIT
	case NR_EPOLL_WAIT: return WM_SYS_EPOLL_WAIT;
#endif
	case NR_PPOLL: return WM_SYS_PPOLL;
	case NR_PSELECT6: return WM_SYS_PSELECT6;
	case NR_EPOLL_PWAIT: return WM_SYS_EPOLL_PWAIT;
	case NR_EPOLL_PWAIT2: return WM_SYS_EPOLL_PWAIT2;
	case NR_NANOSLEEP: return WM_SYS_NANOSLEEP;
	case NR_CLOCK_NANOSLEEP: return WM_SYS_CLOCK_NANOSLEEP;
	default: return WM_SYSCALLS;
	}
}

static __always_inline bool interrupted(long ret)
{
	return ret == -WM_EINTR || ret == -WM_ERESTART_RESTARTBLOCK ||
	       (ret <= -WM_ERESTARTSYS && ret >= -WM_ERESTARTNOHAND);
}

/* futex operations (include/uapi/linux/futex.h). */
#define WM_FUTEX_WAIT 0
#define WM_FUTEX_WAIT_BITSET 9
#define WM_FUTEX_CMD_MASK 0x7f /* without FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME */
#define WM_ETIMEDOUT 110

/* Counts a returning futex call of thread `id` when it was a wait with a
 * timeout: its arguments are still in the saved registers. Other futex
 * calls (wakes, untimed waits, the PI and requeue operations) cost the two
 * register reads and no map lookup. */
static __always_inline int futex_returned(__u64 id, long ret, struct pt_regs *regs,
					  const bool btf)
{
	if (!regs)
		return 0;
	__u64 op = 0, timeout = 0;
	WM_READ(btf, op, WM_SYSCALL_ARG1(regs));
	__u64 cmd = op & WM_FUTEX_CMD_MASK;
	if (cmd != WM_FUTEX_WAIT && cmd != WM_FUTEX_WAIT_BITSET)
		return 0;
	WM_READ(btf, timeout, WM_SYSCALL_ARG3(regs));
	if (!timeout)
		return 0;
	struct wm_thread *st = thread_entry((__u32)id, (__u32)(id >> 32), NULL, btf);
	if (!st)
		return 0;
	if (ret == -WM_ETIMEDOUT)
		st->futex_timeouts += 1;
	/* Last, after a barrier: entry_mark reads it. */
	WM_BARRIER();
	st->futex_timed_waits += 1;
	return 0;
}

/* The user's struct pollfd. */
struct wm_pollfd {
	__s32 fd;
	__u16 events;
	__u16 revents;
};

/* Notes which descriptors a poll or ppoll call that returned `ret` ready
 * descriptors without blocking found ready: the array is still where its
 * first argument points. Looked at in one call of WM_READY_SAMPLE (the
 * thread's poll count), so that a loop making 500,000 such calls a second
 * pays the user-memory reads on a few thousand. */
static __always_inline void note_ready_fds(struct wm_thread *st, long ret, struct pt_regs *regs,
					   const bool btf)
{
	if (ret <= 0 || (st->poll_calls % WM_READY_SAMPLE) != 1)
		return;
	__u64 fds = 0, nfds = 0;
	WM_READ(btf, fds, WM_SYSCALL_ARG0(regs));
	WM_READ(btf, nfds, WM_SYSCALL_ARG1(regs));
	if (!fds)
		return;
	__u32 found = 0;
	for (__u32 i = 0; i < WM_READY_SCAN; i++) {
		if (i >= nfds || found >= WM_READY_FDS)
			break;
		struct wm_pollfd p = {};
		if (bpf_probe_read_user(&p, sizeof(p), (void *)(fds + i * sizeof(p))))
			break;
		if (p.revents && p.fd >= 0)
			st->ready_fd[found++ & (WM_READY_FDS - 1)] = p.fd;
	}
	st->ready_fds = found;
}

/* Counts the return of syscall `nr` (result `ret`, saved registers `regs`)
 * by thread `id` (pid_tgid) of the target, the current task `cur` (NULL on
 * the untyped path). */
static __always_inline int syscall_returned(__u64 id, struct task_struct *cur, long nr, long ret,
					    struct pt_regs *regs, const bool btf)
{
	if (nr == NR_FUTEX)
		return futex_returned(id, ret, regs, btf);
	__u32 cls = syscall_class(nr);
	/* The target's other syscalls cost no map lookup. */
	if (cls != WM_SC_POLL && cls != WM_SC_SLEEP && cls != WM_SC_RENAME)
		return 0;

	__u32 tid = (__u32)id;
	struct wm_thread *st = thread_entry(tid, (__u32)(id >> 32), cur, btf);
	if (!st)
		return 0;
	if (cls == WM_SC_RENAME) {
		/* The thread may have a new name: the only moments comm changes
		 * for itself, so the scheduler path never copies it. */
		bpf_get_current_comm(&st->comm, sizeof(st->comm));
		return 0;
	}

	/* A call that blocked: its timeout or request was taken when it first
	 * blocked (ppoll, pselect6 and select write the time left back into
	 * it before returning), and its time counts from that moment. A call
	 * that returned without blocking took well under a microsecond. */
	__u64 took = 0;
	__u64 arg;
	__u64 blocked = st->sc_block_ns;
	bool did_block = blocked && st->sc_block_nr == (__u64)nr;
	if (did_block) {
		__u64 now = bpf_ktime_get_ns();
		took = now > blocked ? now - blocked : 0;
		arg = st->sc_arg_ns;
	} else {
		arg = syscall_arg_ns(nr, regs, btf, 0);
	}
	if (blocked)
		st->sc_block_ns = 0;

	__u32 index = syscall_index(nr);
	if (index < WM_SYSCALLS)
		st->calls_by_syscall[index] += 1;
	if (cls == WM_SC_POLL) {
		if (did_block)
			st->poll_blocked_calls += 1;
		if (ret == 0) {
			st->poll_zero_returns += 1;
			if (!did_block)
				st->poll_idle_nonblocking += 1;
		}
#ifdef NR_POLL
		if (!did_block && regs && (nr == NR_POLL || nr == NR_PPOLL))
#else
		if (!did_block && regs && nr == NR_PPOLL)
#endif
			note_ready_fds(st, ret, regs, btf);
		if (arg == WM_ARG_INFINITE)
			st->poll_infinite_timeouts += 1;
		else if (arg != WM_ARG_UNKNOWN) {
			if (arg == 0)
				st->poll_zero_timeouts += 1;
			hist_add(st->poll_timeout_hist, arg);
		}
		st->poll_time_ns += took;
		/* Last, after a barrier: entry_mark reads the call counts. */
		WM_BARRIER();
		st->poll_calls += 1;
	} else {
		if (arg < WM_ARG_UNKNOWN) {
			st->sleep_requested_ns += arg;
			st->sleep_known_requests += 1;
		}
		st->sleep_actual_ns += took;
		if (interrupted(ret)) {
			st->sleep_interrupted += 1;
			st->sleep_interrupted_ns += took;
		}
		WM_BARRIER();
		st->sleep_calls += 1;
	}
	return 0;
}

static __always_inline int on_sys_exit(__u64 *ctx, const bool btf)
{
	/* Every syscall of every process runs this: the ids come from the
	 * typed current task (inlined), not from a helper call. */
	struct task_struct *cur = typed_current(btf);
	__u64 id = current_pid_tgid(cur, btf);
	if (!is_watched((__u32)(id >> 32)))
		return 0;
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	WM_SYSCALL_NR_T raw_nr = 0;
	WM_READ(btf, raw_nr, WM_SYSCALL_NR(regs));
	return syscall_returned(id, cur, (long)raw_nr, (long)ctx[1], regs, btf);
}

SEC("tp_btf/sys_exit")
int tpbtf_sys_exit(__u64 *ctx) { return on_sys_exit(ctx, true); }

SEC("raw_tp/sys_exit")
int rawtp_sys_exit(__u64 *ctx) { return on_sys_exit(ctx, false); }

/* The same, attached to the per-syscall tracepoints syscalls/sys_exit_<name>
 * of the poll, sleep and rename families, where tracefs is mounted. Those
 * run no program at all for the other syscalls (the kernel tests a bitmap
 * of enabled syscalls first), which makes the machine-wide cost per syscall
 * much smaller. Needs tracefs (for the tracepoint ids) and the 5.15+ BTF
 * helpers; the loader falls back to sys_exit otherwise. */
struct wm_sys_exit_record {
	__u64 common; /* common_type, common_flags, common_preempt_count, common_pid */
	__s32 nr;     /* __syscall_nr, at offset 8 as the events' format files say */
	__s32 pad;
	__s64 ret;    /* at offset 16 */
};

SEC("tracepoint/syscalls/sys_exit")
int tp_sys_exits(struct wm_sys_exit_record *rec)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u64 id = current_pid_tgid(cur, true);
	if (!is_watched((__u32)(id >> 32)))
		return 0;
	struct pt_regs *regs = bpf_task_pt_regs(cur);
	return syscall_returned(id, cur, (long)rec->nr, (long)rec->ret, regs, true);
}

#ifdef WM_WITH_TASK_STORE
/* --- The task iterator: how user space reads task storage ---
 *
 * One walk over every task of the machine. For each task with an entry:
 * the entry of a process that is no longer watched is deleted (it left the
 * set); the others are written out as a struct wm_iter_row when their
 * process is the one iter_ctl asks for (0: all). With iter_ctl's `seed`
 * set, a thread of that process without an entry first gets the one user
 * space left for it in `seeds`. */
/* What changes whenever any counter of an entry does: every program that
 * writes an entry changes one of these words (a switch-out the switch
 * counts and the off-CPU start, a switch-in the on-CPU start, a wake
 * `wakes_by`, a poll or sleep return its call count, a timed futex wait
 * that returns its count, a rename or exec the
 * comm and namespace id), so an equal mark means an equal entry (up to a
 * 64-bit hash collision). */
static __always_inline __u64 entry_mark(const struct wm_thread *st)
{
	const __u64 *comm = (const __u64 *)st->comm;
	__u64 words[] = {
		st->voluntary,	  st->involuntary, st->on_since_ns, st->off_since_ns,
		st->wakes_by[0],  st->wakes_by[1], st->wakes_by[2], st->poll_calls,
		st->sleep_calls,  comm[0],	   comm[1],	    st->ns_tid,
		st->futex_timed_waits,
	};
	__u64 h = 0xcbf29ce484222325ULL; /* FNV-1a offset basis, word-wise */
	for (__u32 i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		h = (h ^ words[i]) * 0x100000001b3ULL;
	return h;
}

SEC("iter/task")
int wm_dump_threads(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	__u32 zero = 0;
	struct wm_iter_ctl *want = bpf_map_lookup_elem(&iter_ctl, &zero);
	if (!want)
		return 0;
	struct wm_thread *st = bpf_task_storage_get(&thread_store, task, 0, 0);
	if (!st && want->seed && (__u32)task->tgid == want->tgid) {
		__u32 tid = (__u32)task->pid;
		struct wm_thread *seed = bpf_map_lookup_elem(&seeds, &tid);
		if (seed)
			st = bpf_task_storage_get(&thread_store, task, seed,
						  BPF_LOCAL_STORAGE_GET_F_CREATE);
	}
	if (!st)
		return 0;
	__u32 tgid = (__u32)st->tgid;
	if (!is_watched(tgid)) {
		bpf_task_storage_delete(&thread_store, task);
		return 0;
	}
	if (want->tgid && tgid != want->tgid)
		return 0;
	struct wm_iter_row row = { .tid = (__u32)task->pid };
	__u64 reader = want->reader;
	__u64 mark = 0;
	if (reader) {
		mark = entry_mark(st);
		if (st->read_by == reader && st->read_mark == mark) {
			row.unchanged = 1;
			bpf_seq_write(ctx->meta->seq, &row, sizeof(row));
			return 0;
		}
	}
	/* The reader has the entry only once both writes fit: a write that
	 * overflows the iterator's buffer (-EOVERFLOW, every dozen or so
	 * entries) is discarded and this task shown again at the next read
	 * of the buffer, which must then write it whole again, not as
	 * unchanged (marked before the write, such an entry reached the
	 * reader as a head it had no copy of, and every walk was whole). */
	if (bpf_seq_write(ctx->meta->seq, &row, sizeof(row)) ||
	    bpf_seq_write(ctx->meta->seq, st, sizeof(*st)))
		return 0;
	if (reader) {
		st->read_by = reader;
		st->read_mark = mark;
	}
	return 0;
}
#endif

/* --- Calibration: an empty program on sched_switch, attached only on request.
 * Its run time per event is the floor (dispatch plus the kernel's own
 * run-time accounting) that every program above pays on this machine. --- */

SEC("tp_btf/sched_switch")
int tpbtf_calibrate(__u64 *ctx) { return 0; }

SEC("raw_tp/sched_switch")
int rawtp_calibrate(__u64 *ctx) { return 0; }

_Static_assert(sizeof(struct wm_thread) == 2504, "wm_thread layout changed: update abi.rs");
_Static_assert(sizeof(struct wm_target) == 24, "wm_target layout changed: update abi.rs");
_Static_assert(sizeof(struct wm_iter_ctl) == 16, "wm_iter_ctl layout changed: update abi.rs");
_Static_assert(sizeof(struct wm_iter_row) == 8, "wm_iter_row layout changed: update abi.rs");
/* The same offsets are asserted in abi.rs. */
_Static_assert(__builtin_offsetof(struct wm_thread, run_delay_mark) == 24, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, wakeups) == 32, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, involuntary) == 56, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, sc_block_nr) == 112, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, sleep_actual_ns) == 192, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, wakes_by) == 240, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, calls_by_syscall) == 264, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, off_hist) == 336, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, poll_timeout_hist) == 1376, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, comm) == 1896, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, waker_tid) == 1912, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, waker_count) == 1976, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, waker_of_target) == 2104, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, waker_comm) == 2112, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, waker_ns_tid) == 2368, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, ns_tid) == 2432, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, tgid) == 2440, "abi.rs");
_Static_assert(__builtin_offsetof(struct wm_thread, read_mark) == 2496, "abi.rs");
/* on_exec's word ranges: counters, state, counters, then comm. */
_Static_assert(__builtin_offsetof(struct wm_thread, sc_arg_ns) / 8 + 1 == WM_W_SYSCALL, "on_exec");
_Static_assert(__builtin_offsetof(struct wm_thread, run_delay_mark) / 8 + 1 == WM_W_SCHED, "on_exec");
