/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Thread ids as a PID namespace other than the initial one numbers them.
 *
 * The scheduler tracepoints and bpf_get_current_pid_tgid() give ids of the
 * initial namespace. An observer in a container (a pod without hostPID, or
 * `unshare -p`) knows its target by the ids of its own /proc. The loader
 * finds the target's initial-namespace ids once at attach (the task
 * iterator of pid_ns.bpf.c), so every program keeps filtering on a plain id
 * comparison, the one path every process on the machine pays. Only the
 * target's own events then translate the ids they report, and the counters
 * program does it once per thread, when its entry is created.
 *
 * Why not bpf_get_ns_current_pid_tgid(): it translates the current task
 * only, while sched_switch's `next` and sched_waking's `p` are other tasks,
 * so the walk below is needed anyway; one way for every task keeps the two
 * from disagreeing.
 */
#ifndef WAKEMETER_PID_NS_H
#define WAKEMETER_PID_NS_H

/* Deepest nesting of PID namespaces the kernel allows (MAX_PID_NS_LEVEL). */
#define WM_MAX_PID_NS_LEVEL 32

/* Scratch of task_ns_tid, per CPU rather than on the BPF stack, which
 * keeps the programs' frames small. */
struct wm_pid_ns_scratch {
	struct pid *pid;
	struct pid_namespace *ns;
	unsigned int level;
	unsigned int inum;
	int nr;
	int pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_pid_ns_scratch);
} pid_ns_scratch SEC(".maps");

/* The id of `task` in the PID namespace whose nsfs inode is `ns_ino`, 0 when
 * the task is not in that namespace or below it. nsfs is one pseudo
 * filesystem, so the inode alone names a namespace. Every read goes through
 * bpf_probe_read_kernel: numbers[] is indexed by a variable, which direct
 * BTF loads do not allow. Its stride is the local sizeof(struct upid), an
 * int and a pointer since the kernel has had PID namespaces.
 *
 * A function of its own (a BPF-to-BPF call), not inlined, so its registers
 * and stack stay out of the frame of the sched_waking programs, which must
 * stay under 64 bytes for the same reason as the scratch above. */
static __attribute__((noinline)) __u32 task_ns_tid(struct task_struct *task, __u64 ns_ino)
{
	__u32 zero = 0;
	struct wm_pid_ns_scratch *s = bpf_map_lookup_elem(&pid_ns_scratch, &zero);
	if (!s || !task)
		return 0;
	s->pid = NULL;
	if (bpf_probe_read_kernel(&s->pid, sizeof(s->pid), &task->thread_pid) || !s->pid)
		return 0;
	if (bpf_probe_read_kernel(&s->level, sizeof(s->level), &s->pid->level))
		return 0;
	for (__u32 i = 0; i < WM_MAX_PID_NS_LEVEL; i++) {
		if (i > s->level)
			break;
		struct upid *number = &s->pid->numbers[i];
		s->ns = NULL;
		if (bpf_probe_read_kernel(&s->ns, sizeof(s->ns), &number->ns) || !s->ns)
			return 0;
		if (bpf_probe_read_kernel(&s->inum, sizeof(s->inum), &s->ns->ns.inum))
			return 0;
		if (s->inum == ns_ino) {
			if (bpf_probe_read_kernel(&s->nr, sizeof(s->nr), &number->nr))
				return 0;
			return (__u32)s->nr;
		}
	}
	return 0;
}

/* The current task's id in that namespace. */
static __always_inline __u32 current_ns_tid(__u64 ns_ino)
{
	return task_ns_tid((struct task_struct *)bpf_get_current_task(), ns_ino);
}

/* The id of `task` in that namespace, of the current task when `task` is
 * NULL. */
static __always_inline __u32 task_or_current_ns_tid(struct task_struct *task, __u64 ns_ino)
{
	return task ? task_ns_tid(task, ns_ino) : current_ns_tid(ns_ino);
}

#endif
