/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The scheduler events as both programs read them (wakemeter.bpf.c's
 * counters, stacks.bpf.c's stacks): the ids of a tracepoint's task
 * argument, who woke a thread, and the end of a thread. Each program keeps
 * its own SEC() entry points and what it does with an event; the reading
 * is written once, so that the two cannot disagree on, say, which wakeups
 * come from interrupt context.
 *
 * Include after vmlinux_min.h, bpf_min.h, wakemeter.h, sched_classify.h
 * and pid_ns.h.
 */
#ifndef WAKEMETER_SCHED_EVENTS_H
#define WAKEMETER_SCHED_EVENTS_H

/* --- A task argument (sched_switch's `next`, sched_waking's `p`) --- */

/* The process id (tgid) of task `p`, in the initial namespace. */
static __always_inline __u32 task_tgid(struct task_struct *p, const bool btf)
{
	int tgid = 0;
	WM_READ(btf, tgid, p->tgid);
	return (__u32)tgid;
}

/* The thread id of task `p`, in the initial namespace. */
static __always_inline __u32 task_tid(struct task_struct *p, const bool btf)
{
	int pid = 0;
	WM_READ(btf, pid, p->pid);
	return (__u32)pid;
}

/* --- sched_waking(task *p): runs in the waker's context --- */

/* Whether the program runs in interrupt context: then `current` is just the
 * task the interrupt (a timer, an I/O completion, a softirq) happened to
 * land on, not the waker. `ctx` is the program's context: the tracepoint's
 * arguments, which the kernel builds on the stack it runs on.
 * - That stack is not the current task's own kernel stack: an interrupt
 *   stack. The arguments are used, not the BPF frame (r10): on kernels
 *   6.14+ (x86_64) a program whose frame reaches 64 bytes runs on a
 *   private per-CPU stack, which lies off the task's stack in every
 *   context (seen: every wake "[interrupt]" on the raw_tp programs).
 * - x86_64 runs an interrupt that hits user mode on the task's stack; then
 *   the registers saved at its top are user mode ones with orig_ax = -1,
 *   where a syscall or an exception would have a number. On the task's
 *   own stack nothing else runs with orig_ax < 0 (a kernel thread's saved
 *   registers are zeros), so the typed path reads orig_ax alone, through
 *   the task pointer it already has: one helper call and one load where
 *   the untyped path also finds the registers and checks their code
 *   segment (`benches/benches/ebpf/pool.rs` measures the difference).
 *   A typed ksym read of the preempt count would be cheaper still, but
 *   the kernel resolves a per-CPU ksym through kallsyms, which lists no
 *   variables on kernels built without CONFIG_KALLSYMS_ALL (seen:
 *   "failed to find the address for kernel symbol '__preempt_count'"). */
/* `cur` is the current task (bpf_get_current_task_btf()) on the typed
 * path, which callers also read the waker's ids from; unused otherwise. */
static __always_inline bool in_interrupt(const void *ctx, const bool btf,
					 struct task_struct *cur)
{
	__u64 fp;
	asm volatile("%0 = %1" : "=r"(fp) : "r"(ctx));
	if (btf) {
		__u64 base = (__u64)cur->stack;
		if (base && (fp < base || fp > base + WM_THREAD_SIZE))
			return true;
#if defined(__TARGET_ARCH_x86)
		return (long)bpf_task_pt_regs(cur)->orig_ax < 0;
#else
		return false;
#endif
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 base = 0;
	bpf_probe_read_kernel(&base, sizeof(base), &task->stack);
	if (base && (fp < base || fp > base + WM_THREAD_SIZE))
		return true;
#if defined(__TARGET_ARCH_x86)
	struct pt_regs *regs = current_user_regs(btf);
	if (regs) {
		__u64 cs = 0, orig_ax = 0;
		WM_READ(btf, cs, regs->cs);
		if (cs == 0x33 || cs == 0x23) { /* __USER_CS, __USER32_CS */
			WM_READ(btf, orig_ax, regs->orig_ax);
			return (long)orig_ax < 0;
		}
	}
#endif
	return false;
}

/* The current task as the typed path reads it, NULL on the untyped one. */
static __always_inline struct task_struct *typed_current(const bool btf)
{
	return btf ? bpf_get_current_task_btf() : NULL;
}

/* bpf_get_current_pid_tgid() of the current task `cur` (from
 * typed_current()): two loads from the task on the typed path, where the
 * helper would be one more call on every wakeup. */
static __always_inline __u64 current_pid_tgid(struct task_struct *cur, const bool btf)
{
	if (btf)
		return (__u64)(__u32)cur->tgid << 32 | (__u32)cur->pid;
	return bpf_get_current_pid_tgid();
}

/* The waker's name into `comm` (WM_COMM_LEN bytes): the current task's,
 * or "[interrupt]" in interrupt context (see in_interrupt()). */
static __always_inline void waker_comm(char *comm, bool irq)
{
	if (irq)
		__builtin_memcpy(comm, "[interrupt]", 12);
	else
		bpf_get_current_comm(comm, WM_COMM_LEN);
}

/* --- The end of a thread: its final switch-out (prev_state has TASK_DEAD)
 * or sched_process_exit, which runs in the exiting thread --- */

/* Deletes the entry of thread `tid` from a per-thread map keyed by tid, so
 * that the map keeps live threads only and no later event of a reused id
 * finds the dead thread's state. */
static __always_inline void forget_thread(void *map, __u32 tid)
{
	bpf_map_delete_elem(map, &tid);
}

#endif
