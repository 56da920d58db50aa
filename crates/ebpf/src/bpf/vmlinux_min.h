/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The few kernel types the programs touch, trimmed by hand.
 *
 * `preserve_access_index` makes clang emit CO-RE relocations for every field
 * access, so the loader rewrites offsets against the running kernel's BTF:
 * only the field names and types here must match the kernel, not the layout.
 */
#ifndef WAKEMETER_VMLINUX_MIN_H
#define WAKEMETER_VMLINUX_MIN_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef _Bool bool;
#define true 1
#define false 0
#define NULL ((void *)0)

/* A task's ids in every PID namespace from the initial one (level 0)
 * down to its own (`level`): numbers[i] is its id in namespace i. */
struct ns_common {
	unsigned int inum; /* the namespace's inode in nsfs, as /proc/<pid>/ns/pid shows it */
} __attribute__((preserve_access_index));
struct pid_namespace {
	struct ns_common ns;
} __attribute__((preserve_access_index));
struct upid {
	int nr;
	struct pid_namespace *ns;
} __attribute__((preserve_access_index));
struct pid {
	unsigned int level;
	struct upid numbers[1];
} __attribute__((preserve_access_index));

/* Threads of a process that have not yet exited: 0 once the last one is
 * in do_exit (the whole process is dead). */
typedef struct {
	int counter;
} atomic_t;
struct signal_struct {
	atomic_t live;
} __attribute__((preserve_access_index));

/* The kernel's run-queue accounting of a task (CONFIG_SCHED_INFO, which
 * /proc/<pid>/schedstat needs too): run_delay is the task's total wait on
 * a run queue in ns, grown each time it gets a CPU (after sched_switch). */
struct sched_info {
	unsigned long long run_delay;
} __attribute__((preserve_access_index));

struct task_struct {
	void *stack; /* base of the task's kernel stack (THREAD_SIZE bytes) */
	struct signal_struct *signal;
	int pid;  /* TID, in the initial PID namespace */
	int tgid; /* process id, in the initial PID namespace */
	char comm[16];
	struct pid *thread_pid;
	struct sched_info sched_info;
} __attribute__((preserve_access_index));

/* The context of a task iterator program (SEC("iter/task")). */
struct seq_file;
struct bpf_iter_meta {
	struct seq_file *seq; /* where bpf_seq_write appends */
} __attribute__((preserve_access_index));
struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task; /* NULL once the walk is over */
} __attribute__((preserve_access_index));

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long r11;
	unsigned long cx;
	unsigned long di;
	unsigned long si;
	unsigned long dx;
	unsigned long r10;
	unsigned long r8;
	unsigned long r9;
	/* Syscall number; -1 for interrupts; the error code for exceptions. */
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long cs;
	unsigned long flags;
	unsigned long sp;
} __attribute__((preserve_access_index));
/* The user registers stay as the syscall got them until it returns (the
 * x86_64 syscall ABI clobbers only rax, rcx and r11), so sys_exit reads
 * the arguments as sys_enter would. */
#define WM_SYSCALL_NR(r) ((r)->orig_ax)
#define WM_SYSCALL_NR_T unsigned long
#define WM_SYSCALL_ARG0(r) ((r)->di)
#define WM_SYSCALL_ARG1(r) ((r)->si)
#define WM_SYSCALL_ARG2(r) ((r)->dx)
#define WM_SYSCALL_ARG3(r) ((r)->r10)
#define WM_SYSCALL_ARG4(r) ((r)->r8)
#elif defined(__TARGET_ARCH_arm64)
struct user_pt_regs {
	__u64 regs[31];
} __attribute__((preserve_access_index));
struct pt_regs {
	struct user_pt_regs user_regs;
	__u64 orig_x0;
	__s32 syscallno; /* NO_SYSCALL (-1) outside syscalls */
} __attribute__((preserve_access_index));
/* x0 becomes the return value; the kernel keeps the first argument in
 * orig_x0, and x1-x5 stay as the syscall got them until it returns. */
#define WM_SYSCALL_NR(r) ((r)->syscallno)
#define WM_SYSCALL_NR_T __s32
#define WM_SYSCALL_ARG0(r) ((r)->orig_x0)
#define WM_SYSCALL_ARG1(r) ((r)->user_regs.regs[1])
#define WM_SYSCALL_ARG2(r) ((r)->user_regs.regs[2])
#define WM_SYSCALL_ARG3(r) ((r)->user_regs.regs[3])
#define WM_SYSCALL_ARG4(r) ((r)->user_regs.regs[4])
#else
#error "define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

/* Kernel stack size of a task on x86_64 and arm64 (without KASAN). */
#define WM_THREAD_SIZE (16 * 1024)

/* User-space time structs as the syscalls read them (64-bit ABIs). */
struct wm_timespec {
	__s64 tv_sec;
	__s64 tv_nsec;
};
struct wm_timeval {
	__s64 tv_sec;
	__s64 tv_usec;
};

#endif
