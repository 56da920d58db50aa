// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * Stacks of one process (`target_tgid`), or of one of its threads
 * (`target_tid`), counted per distinct stack:
 *
 * - on-CPU: a perf_event program on cpu-clock samples (the loader opens one
 *   software event per CPU at the chosen frequency);
 * - off-CPU: at sched_switch, the stack of the thread going off the CPU and
 *   the cause (the same off_cpu_cause() as wakemeter.bpf.c), counted with
 *   the time until it runs again (switch count and switch duration);
 * - wakeups: at sched_waking of a thread of the target, the waker's stacks.
 *
 * The loader attaches only the programs of the profile asked for. Like
 * wakemeter.bpf.c, every scheduler program exists as tp_btf and raw_tp and
 * tests the process id first.
 */
#include "vmlinux_min.h"
#include "bpf_min.h"
#include "wakemeter.h"
#include "sched_classify.h"
#include "stacks.h"
#include "pid_ns.h"
#include "sched_events.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Process id to observe, set by the loader before load. */
const volatile __u32 target_tgid = 0;
/* One thread of it to observe (0: every thread), set by the loader: on-CPU
 * samples and off-CPU spans of that thread, wakeups of that thread. */
const volatile __u32 target_tid = 0;
/* The nsfs inode of the observer's PID namespace, 0 for the initial one
 * (set by the loader). target_tgid and target_tid are always ids of the
 * initial namespace; when this is set, the ids written into keys (the
 * thread, the waker) are translated into it for the target's events only
 * (see pid_ns.h). */
const volatile __u64 pidns_ino = 0;

/* The id a key reports for `task` (NULL: the current task) whose
 * initial-namespace id is `tid`. */
static __always_inline __u32 key_tid(struct task_struct *task, __u32 tid)
{
	if (!pidns_ino)
		return tid;
	return task_or_current_ns_tid(task, pidns_ino);
}

static __always_inline bool other_thread(__u32 tid)
{
	return target_tid != 0 && tid != target_tid;
}

/* bpf_get_stack (helper 67): the stack copied into buf, its length in
 * bytes or -errno; the rest of buf is zeroed. */
static long (*bpf_get_stack)(void *ctx, void *buf, __u32 size, __u64 flags) = (void *)67;

/* Distinct stacks by id; max_entries is overridden by the loader.
 *
 * Why not a BPF_MAP_TYPE_STACK_TRACE map with bpf_get_stackid: its id is
 * the frames' hash masked to the bucket count, and a second stack that
 * lands in a taken bucket is lost, on every later occurrence too. With
 * 8192 buckets and the ~900 distinct stacks of redis under load, 5% of the
 * samples at 999 Hz were lost that way. Here the id is the low 31 bits of
 * a 64-bit hash of the frames, and a taken id holding another stack (told
 * apart by the full hash) sends the stack to the next id, up to
 * WM_STACK_PROBES ids: a stack is lost only when the map is full. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct wm_stack);
} stacks SEC(".maps");

/* The stack being stored, per CPU: 1 KiB is more than a BPF frame holds. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_stack);
} stack_scratch SEC(".maps");

/* Counts per (thread, kind, cause, stacks); max_entries overridden. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct wm_stack_key);
	__type(value, struct wm_stack_count);
} stack_counts SEC(".maps");

/* Threads of the target that are off the CPU; deleted at switch-in and
 * exit. max_entries overridden (sized from the thread count). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct wm_off_start);
} off_start SEC(".maps");

/* Scratch key of the wakeup program, per CPU rather than on the BPF
 * stack, which keeps the program's frame small. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_stack_key);
} waking_key SEC(".maps");

/* Zero value of a new stack_counts entry (kept off the stack, as above). */
static const struct wm_stack_count zero_count = {};

/* Events whose stacks could not be recorded, per WM_LOST_* and CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WM_LOST_KINDS);
	__type(key, __u32);
	__type(value, __u64);
} stack_lost SEC(".maps");

static __always_inline void count_n(__u32 why, __u64 by)
{
	__u64 *n = bpf_map_lookup_elem(&stack_lost, &why);
	if (n)
		*n += by;
}

static __always_inline void count_lost(__u32 why)
{
	count_n(why, 1);
}

/* The cpu-clock period, ns, set by the loader for on-CPU profiles. */
const volatile __u64 sample_period_ns = 0;

/* See struct wm_cpu_clock. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_cpu_clock);
} cpu_clock SEC(".maps");

/* A thread of the target leaves this CPU's count at `now`: its time since
 * switch-in (or since the last sample, which counted the part before) is
 * added to WM_COUNT_SWITCH_NS. */
static __always_inline void switch_time(struct wm_cpu_clock *c, __u32 tid, __u64 now)
{
	if (c->tid == tid && now > c->since_ns)
		count_n(WM_COUNT_SWITCH_NS, now - c->since_ns);
}

/* The id of the current stack (flags: 0 for the kernel's,
 * BPF_F_USER_STACK for the user's) in `stacks`, stored there if new; a
 * negative -errno when there is none: -EFAULT for an empty stack (not a
 * loss: e.g. no kernel stack for a sample taken in user mode), -EEXIST
 * when every id it may take holds another stack, another error when the
 * map is full; the last two are counted. */
static __always_inline __s32 store_stack(struct wm_stack *st);

static __always_inline __s32 stack_id(void *ctx, __u64 flags)
{
	__u32 zero = 0;
	struct wm_stack *st = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!st)
		return -WM_EFAULT;
	long len = bpf_get_stack(ctx, st->ips, sizeof(st->ips), flags);
	if (len <= 0)
		return -WM_EFAULT;
	return store_stack(st);
}

/* The id of the stack in `st` (frames zero-padded), stored if new; as
 * stack_id(). */
static __always_inline __s32 store_stack(struct wm_stack *st)
{
	/* FNV-1a over the words, then a 64-bit finalizer (MurmurHash3's fmix64)
	 * so that the low bits, the id, depend on every frame. The words past
	 * the stack are zero: hashing all of them keeps the loop free of
	 * branches on data. */
	__u64 h = 0xcbf29ce484222325ULL;
	for (int i = 0; i < WM_STACK_DEPTH; i++) {
		h ^= st->ips[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	st->hash = h;
	for (__u32 probe = 0; probe < WM_STACK_PROBES; probe++) {
		__u32 id = ((__u32)h + probe) & 0x7fffffff;
		struct wm_stack *kept = bpf_map_lookup_elem(&stacks, &id);
		if (kept) {
			if (kept->hash == h)
				return (__s32)id;
			continue;
		}
		long err = bpf_map_update_elem(&stacks, &id, st, BPF_NOEXIST);
		if (!err)
			return (__s32)id;
		if (err != -WM_EEXIST) {
			count_lost(WM_LOST_STACKS_FULL);
			return (__s32)err;
		}
		/* Another CPU stored a stack at this id meanwhile. */
		kept = bpf_map_lookup_elem(&stacks, &id);
		if (kept && kept->hash == h)
			return (__s32)id;
	}
	count_lost(WM_LOST_COLLISION);
	return -WM_EEXIST;
}

/* The unwind table of the target's modules: two halves of leaf_capacity
 * rows each in leaf_rows (0: no table). The loader fills the half not in
 * use, then points leaf_table at it, so a walk in progress never reads a
 * half being written: a module mapped after attach (dlopen) gets rows
 * without stopping the programs. */
const volatile __u32 leaf_capacity = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_leaf_row);
} leaf_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_leaf_table);
} leaf_table SEC(".maps");

/* The target's execs since attach (see on_exec()): a table serves only
 * the image it was built from, the one of leaf_table.execs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} target_execs SEC(".maps");

/* The row covering ip (the last starting at or below it) among the n rows
 * from index first, or NULL. */
static __always_inline struct wm_leaf_row *find_row(__u32 first, __u32 n, __u64 ip)
{
	if (!n || !ip)
		return NULL;
	/* Without branches on the rows: the verifier would otherwise walk
	 * every path of the search. User addresses are below 2^47, so the top
	 * bit of start - ip - 1 is set exactly when start <= ip. */
	__u32 base = first, len = n;
	for (int i = 0; i < WM_LEAF_SEARCH_STEPS; i++) {
		__u32 half = len / 2;
		__u32 mid = base + half;
		struct wm_leaf_row *row = bpf_map_lookup_elem(&leaf_rows, &mid);
		if (!row)
			return NULL;
		__u64 keep = (row->start - ip - 1) >> 63; /* 1: start <= ip */
		/* A multiplication, not a mask: kernels from 6.17 split the
		 * verifier's state on `{-1, 0} & constant`, 2^24 paths here. */
		asm volatile("%[keep] *= %[half]" : [keep] "+r"(keep) : [half] "r"((__u64)half));
		base += (__u32)keep;
		len -= half;
	}
	struct wm_leaf_row *row = bpf_map_lookup_elem(&leaf_rows, &base);
	if (!row || row->start > ip)
		return NULL;
	return row;
}

/* Full user stacks from the table (x86_64): when the table has rows, the
 * user stack is unwound here rather than by the kernel's frame-pointer
 * walk. Each frame is one step: the row of its address gives the CFA
 * (%rsp or %rbp plus an offset), the return address at CFA - 8 and where
 * the caller's %rbp was saved; an address without a row (a module with
 * frame pointers, JIT code) takes the frame-pointer step (return address
 * at %rbp + 8, the caller's %rbp at %rbp). The walk ends at a frame whose
 * return address is undefined (the CFI's outermost frame), a null return
 * address or frame pointer, or WM_STACK_DEPTH frames; it ends early on a
 * read that fails, and then a WM_STOP_* marker is stored as the outermost
 * frame, an address outside every mapping that says why: the stack is marked truncated
 * in user space, never continued with guesses. */
struct wm_unwind {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 n;
	__u32 truncated; /* 0, or the WM_STOP_* that ended the walk */
	/* The half of the table this walk reads, taken once at its start. */
	__u32 first;
	__u32 count;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_unwind);
} unwind_state SEC(".maps");

/* The walk from the table is x86_64's only (see user_stack_id()): on other
 * architectures these two are unused, which -Werror would refuse. */
#if defined(__TARGET_ARCH_x86)
/* The half of the table in use, as first | count << 32 (0: none), when
 * it was built for the target's current image. */
static __always_inline __u64 usable_table(void)
{
	__u32 zero = 0;
	if (!leaf_capacity)
		return 0;
	struct wm_leaf_table *t = bpf_map_lookup_elem(&leaf_table, &zero);
	__u64 *execs = bpf_map_lookup_elem(&target_execs, &zero);
	if (!t || !execs || t->execs != *execs)
		return 0;
	__u64 half = t->half; /* one load: first and count of one half */
	return half >> 32 ? half : 0;
}
#endif

/* One frame of the walk over the per-CPU state: 0 to go on, 1 at the end.
 * A global function: verified once, not once per frame of the caller's
 * loop. */
__attribute__((noinline)) int unwind_step(void)
{
	__u32 zero = 0;
	struct wm_unwind *u = bpf_map_lookup_elem(&unwind_state, &zero);
	struct wm_stack *st = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!u || !st)
		return 1;
	__u32 n = u->n;
	if (n >= WM_STACK_DEPTH - 1) {
		/* Room for the marker only. */
		u->truncated = WM_STOP_DEPTH;
		return 1;
	}
	st->ips[n] = u->ip;
	u->n = n + 1;
	/* A return address is looked up one byte earlier: the call. */
	struct wm_leaf_row *row = find_row(u->first, u->count, n ? u->ip - 1 : u->ip);
	__u32 rule = row ? row->rule : WM_CFA_NONE;
	__u32 kind = rule & 0xff;
	__s64 rbp_at = (short)(rule >> 16);
	__u64 cfa, ra = 0, bp = u->bp;
	if (kind == WM_CFA_END)
		return 1;
	if (kind == WM_CFA_RSP && row) {
		cfa = u->sp + row->ra_offset + 8;
	} else if (kind == WM_CFA_RBP && row) {
		cfa = u->bp + row->ra_offset + 8;
	} else {
		/* A null frame pointer ends a frame-pointer chain; here, with
		 * code without frame pointers around, it may as well be a
		 * register used for data: the stack is marked truncated (the
		 * CFI's own end, WM_CFA_END, is the clean one). */
		if (!u->bp) {
			u->truncated = (rule & WM_RULE_UNENCODED) ? WM_STOP_UNENCODED : WM_STOP_NO_ROW;
			return 1;
		}
		cfa = u->bp + 16;
		rbp_at = -16;
	}
	if (bpf_probe_read_user(&ra, sizeof(ra), (const void *)(cfa - 8))) {
		u->truncated = WM_STOP_RA_UNREADABLE;
		return 1;
	}
	if (rbp_at && bpf_probe_read_user(&bp, sizeof(bp), (const void *)(cfa + rbp_at))) {
		u->truncated = WM_STOP_BP_UNREADABLE;
		return 1;
	}
	if (!ra) {
		/* No caller: not the CFI's end (WM_CFA_END), so not known to be
		 * the outermost frame. */
		u->truncated = WM_STOP_NULL_RA;
		return 1;
	}
	u->ip = ra;
	u->sp = cfa;
	u->bp = bp;
	return 0;
}

#if defined(__TARGET_ARCH_x86)
/* The id of the user stack unwound from (ip, sp, bp) with the table half
 * `table` (usable_table()), as stack_id(). */
static __always_inline __s32 unwound_stack_id(__u64 ip, __u64 sp, __u64 bp, __u64 table)
{
	__u32 zero = 0;
	struct wm_unwind *u = bpf_map_lookup_elem(&unwind_state, &zero);
	struct wm_stack *st = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!u || !st || !ip)
		return -WM_EFAULT;
	__builtin_memset(st->ips, 0, sizeof(st->ips));
	u->ip = ip;
	u->sp = sp;
	u->bp = bp;
	u->n = 0;
	u->truncated = 0;
	u->first = (__u32)table;
	u->count = (__u32)(table >> 32);
	for (int i = 0; i < WM_STACK_DEPTH; i++) {
		if (unwind_step())
			break;
	}
	/* The lookups again: the global function's writes are not tracked. */
	u = bpf_map_lookup_elem(&unwind_state, &zero);
	st = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!u || !st)
		return -WM_EFAULT;
	__u32 n = u->n;
	if (u->truncated) {
		count_lost(WM_LOST_UNWIND_TRUNCATED);
		if (n < WM_STACK_DEPTH)
			st->ips[n] = u->truncated; /* WM_STOP_*: why */
	}
	return store_stack(st);
}
#endif

/* The user stack's id: unwound from the table when it has rows (x86_64),
 * else the kernel's frame-pointer walk. `regs`: the user registers, NULL
 * when unknown (then the walk). */
static __always_inline __s32 user_stack_id(void *ctx, struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	__u64 table = regs ? usable_table() : 0;
	if (table) {
		/* The UAPI struct pt_regs: bp is word 4, ip 16, sp 19. */
		__u64 w[20] = {};
		if (!bpf_probe_read_kernel(w, sizeof(w), regs))
			return unwound_stack_id(w[16], w[19], w[4], table);
	}
#endif
	return stack_id(ctx, BPF_F_USER_STACK);
}

static __always_inline void add_count(struct wm_stack_key *key, __u64 ns)
{
	struct wm_stack_count *c = bpf_map_lookup_elem(&stack_counts, key);
	if (!c) {
		long err = bpf_map_update_elem(&stack_counts, key, &zero_count, BPF_NOEXIST);
		if (err && err != -WM_EEXIST) {
			count_lost(WM_LOST_COUNTS_FULL);
			return;
		}
		c = bpf_map_lookup_elem(&stack_counts, key);
		if (!c)
			return;
	}
	__sync_fetch_and_add(&c->count, 1);
	if (ns)
		__sync_fetch_and_add(&c->total_ns, ns);
}

/* --- on-CPU: a cpu-clock sample on any CPU --- */

SEC("perf_event")
int on_cpu_sample(void *ctx)
{
	__u64 entered = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 zero = 0;
	struct wm_cpu_clock *c = bpf_map_lookup_elem(&cpu_clock, &zero);
	__u64 previous = 0;
	if (c) {
		previous = c->last_sample_ns;
		c->last_sample_ns = entered;
	}
	if ((__u32)(id >> 32) != target_tgid || other_thread((__u32)id))
		return 0;
	count_lost(WM_COUNT_SAMPLES);
	if (c) {
		__u32 tid = (__u32)id;
		__u64 period = sample_period_ns;
		/* On this CPU since before the previous sample: the periods
		 * between the two that had no sample were this thread's. With
		 * per-thread timers (one event per thread of the target) this
		 * holds too: while the thread stays on the CPU only its own
		 * timer runs there, its CPU time is the wall time, and the
		 * previous sample of this CPU was its own. */
		if (c->tid == tid && previous && c->since_ns <= previous && period &&
		    entered > previous + period + period / 2)
			count_n(WM_COUNT_TIMER_SKIPPED, (entered - previous + period / 2) / period - 1);
		/* Count the time so far; a thread on the CPU since before the
		 * attach (no switch-in seen) is counted from its first sample. */
		switch_time(c, tid, entered);
		c->tid = tid;
		c->since_ns = entered;
	}
	struct wm_stack_key key = {};
	key.tid = key_tid(NULL, (__u32)id);
	key.kind = WM_STACK_ON_CPU;
#if defined(__TARGET_ARCH_x86)
	__u64 table = usable_table();
	if (table) {
		/* The sample's registers are the context (the UAPI struct
		 * pt_regs: bp, ip, cs and sp are its words 4, 16, 17 and 19).
		 * Taken in user mode they are the leaf's; in kernel mode, the
		 * user registers are those saved at kernel entry. */
		const __u64 *r = ctx;
		if (r[17] & 3)
			key.user_stack = unwound_stack_id(r[16], r[19], r[4], table);
		else
			key.user_stack = user_stack_id(ctx, current_user_regs(false));
	} else {
		key.user_stack = stack_id(ctx, BPF_F_USER_STACK);
	}
#else
	key.user_stack = stack_id(ctx, BPF_F_USER_STACK);
#endif
	key.kernel_stack = stack_id(ctx, 0);
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	add_count(&key, 0);
	__u64 left = bpf_ktime_get_ns();
	if (left > entered)
		count_n(WM_COUNT_PROGRAM_NS, left - entered);
	return 0;
}

/* --- on-CPU: sched_switch, the target's time between switch-in and
 * switch-out on each CPU (see WM_COUNT_SWITCH_NS) --- */

static __always_inline int on_cpu_switch(__u64 *ctx, const bool btf)
{
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u32 zero = 0;
	struct wm_cpu_clock *c = bpf_map_lookup_elem(&cpu_clock, &zero);
	if (!c)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (c->tid) /* current == prev, a thread of the target */
		switch_time(c, (__u32)bpf_get_current_pid_tgid(), now);
	__u32 tid = 0;
	if (task_tgid(next, btf) == target_tgid) {
		tid = task_tid(next, btf);
		if (other_thread(tid))
			tid = 0;
	}
	c->tid = tid;
	c->since_ns = now;
	return 0;
}

SEC("tp_btf/sched_switch")
int tpbtf_on_cpu_switch(__u64 *ctx) { return on_cpu_switch(ctx, true); }

SEC("raw_tp/sched_switch")
int rawtp_on_cpu_switch(__u64 *ctx) { return on_cpu_switch(ctx, false); }

/* --- off-CPU: sched_switch(bool preempt, task *prev, task *next, unsigned prev_state) --- */

static __always_inline int on_switch(__u64 *ctx, const bool btf)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u32 target = target_tgid;
	__u64 cur = bpf_get_current_pid_tgid(); /* current == prev */
	__u32 next_tgid = task_tgid(next, btf);
	if ((__u32)(cur >> 32) != target && next_tgid != target)
		return 0;

	__u64 now = bpf_ktime_get_ns();
	if ((__u32)(cur >> 32) == target && !other_thread((__u32)cur)) {
		__u32 tid = (__u32)cur;
		__u32 prev_state = (__u32)ctx[3];
		if (prev_state & TASK_DEAD) {
			forget_thread(&off_start, tid);
		} else {
			struct pt_regs *regs;
			long nr;
			struct wm_off_start start = {};
			start.since_ns = now;
			start.key.tid = key_tid(NULL, tid);
			start.key.kind = WM_STACK_OFF_CPU;
			start.key.cause = off_cpu_cause(prev, (bool)ctx[0], prev_state, btf, &regs, &nr);
			/* A preempted thread's cause needs no registers. */
			if (!regs && leaf_capacity)
				regs = current_user_regs(btf);
			start.key.user_stack = user_stack_id(ctx, regs);
			start.key.kernel_stack = stack_id(ctx, 0);
			bpf_get_current_comm(&start.key.comm, sizeof(start.key.comm));
			if (bpf_map_update_elem(&off_start, &tid, &start, BPF_ANY))
				count_lost(WM_LOST_OFF_START_FULL);
		}
	}
	if (next_tgid == target) {
		__u32 tid = task_tid(next, btf);
		struct wm_off_start *start = bpf_map_lookup_elem(&off_start, &tid);
		if (start) {
			__u64 since = start->since_ns;
			struct wm_stack_key key = start->key;
			bpf_map_delete_elem(&off_start, &tid);
			add_count(&key, now > since ? now - since : 0);
		}
	}
	return 0;
}

SEC("tp_btf/sched_switch")
int tpbtf_stack_switch(__u64 *ctx) { return on_switch(ctx, true); }

SEC("raw_tp/sched_switch")
int rawtp_stack_switch(__u64 *ctx) { return on_switch(ctx, false); }

/* --- wakeups: sched_waking(task *p), in the waker's context --- */

static __always_inline int on_waking(__u64 *ctx, const bool btf)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	if (task_tgid(p, btf) != target_tgid)
		return 0;
	__u32 tid = task_tid(p, btf);
	if (other_thread(tid))
		return 0;
	bool irq = in_interrupt(ctx, btf, typed_current(btf));
	__u32 zero = 0;
	struct wm_stack_key *key = bpf_map_lookup_elem(&waking_key, &zero);
	if (!key)
		return 0;
	__builtin_memset(key, 0, sizeof(*key));
	key->tid = key_tid(p, tid);
	key->kind = WM_STACK_WAKEUP;
	bpf_probe_read_kernel(&key->comm, sizeof(key->comm), &p->comm);
	/* In interrupt context the user stack would be the interrupted task's,
	 * not a waker's; the kernel stack shows the interrupt path. */
	key->kernel_stack = stack_id(ctx, 0);
	if (irq) {
		key->user_stack = WM_NO_STACK;
	} else {
		key->waker_tid = key_tid(NULL, (__u32)bpf_get_current_pid_tgid());
		key->user_stack = user_stack_id(ctx, leaf_capacity ? current_user_regs(btf) : NULL);
	}
	waker_comm(key->waker_comm, irq);
	add_count(key, 0);
	return 0;
}

SEC("tp_btf/sched_waking")
int tpbtf_stack_waking(__u64 *ctx) { return on_waking(ctx, true); }

SEC("raw_tp/sched_waking")
int rawtp_stack_waking(__u64 *ctx) { return on_waking(ctx, false); }

/* --- sched_process_exec: the target replaces its image, the table is stale
 * until the loader builds one from the new image's mappings --- */

static __always_inline int on_exec(void)
{
	if ((__u32)(bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	__u32 zero = 0;
	__u64 *execs = bpf_map_lookup_elem(&target_execs, &zero);
	if (execs)
		__sync_fetch_and_add(execs, 1);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int tpbtf_stack_exec(__u64 *ctx) { return on_exec(); }

SEC("raw_tp/sched_process_exec")
int rawtp_stack_exec(__u64 *ctx) { return on_exec(); }

/* --- sched_process_exit: a thread that exits while switched out leaves no entry --- */

static __always_inline int on_exit(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return 0;
	forget_thread(&off_start, (__u32)id);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int tpbtf_stack_exit(__u64 *ctx) { return on_exit(); }

SEC("raw_tp/sched_process_exit")
int rawtp_stack_exit(__u64 *ctx) { return on_exit(); }

_Static_assert(sizeof(struct wm_stack_key) == 64, "stacks_abi.rs");
_Static_assert(sizeof(struct wm_stack_count) == 16, "stacks_abi.rs");
_Static_assert(sizeof(struct wm_off_start) == 72, "stacks_abi.rs");
_Static_assert(sizeof(struct wm_leaf_row) == 16, "stacks_abi.rs");
_Static_assert(sizeof(struct wm_leaf_table) == 16, "stacks_abi.rs");
_Static_assert(sizeof(struct wm_cpu_clock) == 24, "stacks_abi.rs");
_Static_assert(sizeof(struct wm_stack) == 1024, "stacks_abi.rs");
