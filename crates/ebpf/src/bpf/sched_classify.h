/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Why a thread leaves the CPU, shared by every program that needs it
 * (wakemeter.bpf.c's counters and stacks.bpf.c's off-CPU stacks), so that
 * there is one classification: the syscall the thread blocks in, read from
 * its saved user registers, then its task state.
 *
 * Include after vmlinux_min.h, bpf_min.h and wakemeter.h.
 */
#ifndef WAKEMETER_SCHED_CLASSIFY_H
#define WAKEMETER_SCHED_CLASSIFY_H

/* Scheduler task states (include/linux/sched.h). */
#define TASK_UNINTERRUPTIBLE 0x0002
#define TASK_DEAD 0x0080
#define TASK_NOLOAD 0x0400

#if defined(__TARGET_ARCH_x86)
#define NR_POLL 7
#define NR_SELECT 23
#define NR_NANOSLEEP 35
#define NR_FUTEX 202
#define NR_CLOCK_NANOSLEEP 230
#define NR_EPOLL_WAIT 232
#define NR_PSELECT6 270
#define NR_PPOLL 271
#define NR_EPOLL_PWAIT 281
#define NR_EXECVE 59
#define NR_PRCTL 157
#define NR_EXECVEAT 322
#else /* arm64: the generic syscall table has no poll, select, epoll_wait */
#define NR_EPOLL_PWAIT 22
#define NR_PSELECT6 72
#define NR_PPOLL 73
#define NR_FUTEX 98
#define NR_NANOSLEEP 101
#define NR_CLOCK_NANOSLEEP 115
#define NR_PRCTL 167
#define NR_EXECVE 221
#define NR_EXECVEAT 281
#endif
#define NR_EPOLL_PWAIT2 441
#define NR_FUTEX_WAITV 449

/* Field read that compiles to a direct load for BTF-typed pointers and to a
 * bpf_probe_read_kernel otherwise. `btf` must be a compile-time constant. */
#define WM_READ(btf, dst, src)                                                 \
	do {                                                                   \
		if (btf)                                                       \
			(dst) = (src);                                         \
		else                                                           \
			bpf_probe_read_kernel(&(dst), sizeof(dst), &(src));    \
	} while (0)

/* --- The registers a task entered the kernel with, and its syscall --- */

/* The user registers of the current task, NULL if they cannot be found.
 * tp_btf: the kernel's own task_pt_regs (5.15+ helpers). raw_tp: the top of
 * the kernel stack, checked by its user code segment, where x86_64 FRED
 * kernels leave 16 bytes of padding. */
static __always_inline struct pt_regs *current_user_regs(const bool btf)
{
	if (btf)
		return bpf_task_pt_regs(bpf_get_current_task_btf());
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();
	__u64 base = 0;
	bpf_probe_read_kernel(&base, sizeof(base), &cur->stack);
	if (!base)
		return NULL;
	__u64 size = __builtin_preserve_type_info(*(struct pt_regs *)0, 1 /* size */);
#if defined(__TARGET_ARCH_x86)
	for (int pad = 0; pad <= 16; pad += 16) {
		struct pt_regs *regs = (struct pt_regs *)(base + WM_THREAD_SIZE - pad - size);
		__u64 cs = 0;
		bpf_probe_read_kernel(&cs, sizeof(cs), &regs->cs);
		if (cs == 0x33 || cs == 0x23) /* __USER_CS, __USER32_CS */
			return regs;
	}
	return NULL;
#else
	return (struct pt_regs *)(base + WM_THREAD_SIZE - size);
#endif
}

/* The number in the saved registers' syscall slot (x86_64 orig_ax, arm64
 * syscallno), -1 when there are none or it is negative (an interrupt).
 * On x86_64 orig_ax also holds the error code of an exception: see
 * entered_by_syscall(). */
static __always_inline long saved_syscall_nr(struct pt_regs *regs, const bool btf)
{
	if (!regs)
		return -1;
	WM_SYSCALL_NR_T raw_nr = 0;
	WM_READ(btf, raw_nr, WM_SYSCALL_NR(regs));
	long nr = (long)raw_nr;
	return nr < 0 ? -1 : nr;
}

/* Whether the task entered the kernel with a SYSCALL instruction, told by
 * what the instruction itself left in rcx (the return address) and r11
 * (the flags): the test the kernel makes before returning with SYSRET.
 * Always true on arm64, where syscallno is NO_SYSCALL outside syscalls. */
static __always_inline bool entered_by_syscall(struct pt_regs *regs, const bool btf)
{
#if defined(__TARGET_ARCH_x86)
	unsigned long ip = 0, cx = 0, flags = 0, r11 = 0;
	WM_READ(btf, ip, regs->ip);
	WM_READ(btf, cx, regs->cx);
	WM_READ(btf, flags, regs->flags);
	WM_READ(btf, r11, regs->r11);
	return cx == ip && r11 == flags;
#else
	return true;
#endif
}

/* The number of the syscall the current task is in, -1 if it is in none
 * (an interrupt or an exception such as a page fault). */
static __always_inline long current_syscall(struct pt_regs *regs, const bool btf)
{
	long nr = saved_syscall_nr(regs, btf);
	if (nr < 0 || !entered_by_syscall(regs, btf))
		return -1;
	return nr;
}

static __always_inline __u32 syscall_class(long nr)
{
	switch (nr) {
	case NR_NANOSLEEP:
	case NR_CLOCK_NANOSLEEP:
		return WM_SC_SLEEP;
	case NR_FUTEX:
	case NR_FUTEX_WAITV:
		return WM_SC_LOCK;
	case NR_PRCTL: /* PR_SET_NAME among others */
	case NR_EXECVE:
	case NR_EXECVEAT:
		return WM_SC_RENAME;
#ifdef NR_POLL
	case NR_POLL:
#endif
#ifdef NR_SELECT
	case NR_SELECT:
#endif
#ifdef NR_EPOLL_WAIT
	case NR_EPOLL_WAIT:
#endif
	case NR_EPOLL_PWAIT:
	case NR_EPOLL_PWAIT2:
	case NR_PPOLL:
	case NR_PSELECT6:
		return WM_SC_POLL;
	default:
		return WM_SC_OTHER;
	}
}

/* Why `prev` leaves the CPU at a sched_switch (a WM_OFF_* cause); the
 * caller runs in `prev`'s context (current == prev). `preempt` and
 * `prev_state` are the tracepoint's arguments. For a voluntary switch,
 * `*regs` receives the saved user registers, and `*nr` the syscall it
 * blocks in when that is of the sleep, lock or poll families (-1 for any
 * other), for callers that want more of the call. */
static __always_inline __u32 off_cpu_cause(struct task_struct *prev, bool preempt,
					   __u32 prev_state, const bool btf,
					   struct pt_regs **regs, long *nr)
{
	*regs = NULL;
	*nr = -1;
	if (preempt || prev_state == 0)
		return WM_OFF_PREEMPTED;
	*regs = btf ? bpf_task_pt_regs(prev) : current_user_regs(btf);
	long n = saved_syscall_nr(*regs, btf);
	__u32 cls = syscall_class(n);
	/* Only a number of the sleep, lock or poll families decides the cause,
	 * so only then is it checked to be a syscall's (an exception's error
	 * code in orig_ax may look like one): any other number, syscall or
	 * not, leaves the cause to the task state. That keeps the four loads
	 * of the check off most switches (a read or write that blocks). */
	bool decides = cls == WM_SC_SLEEP || cls == WM_SC_LOCK || cls == WM_SC_POLL;
	if (decides && !entered_by_syscall(*regs, btf))
		decides = false;
	if (decides) {
		*nr = n;
		if (cls == WM_SC_SLEEP)
			return WM_OFF_SLEEP;
		if (cls == WM_SC_LOCK)
			return WM_OFF_LOCK;
		return WM_OFF_POLL;
	}
	if ((prev_state & TASK_UNINTERRUPTIBLE) && !(prev_state & TASK_NOLOAD))
		return WM_OFF_IO;
	return WM_OFF_OTHER;
}

#endif
