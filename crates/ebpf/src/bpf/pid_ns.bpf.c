// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * Finds a task by its id in a PID namespace (`ns_ino`, `ns_tid`, set by the
 * loader) and tells its ids in the initial namespace: a task iterator the
 * loader runs once, before it loads wakemeter.bpf.c or stacks.bpf.c for an
 * observer that is not in the initial namespace (see pid_ns.h).
 */
#include "vmlinux_min.h"
#include "bpf_min.h"
#include "pid_ns.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u64 ns_ino = 0;
const volatile __u32 ns_tid = 0;

/* What was found: the task's tid and tgid in the initial namespace
 * (0, 0 when no task has that id). */
struct wm_host_ids {
	__u32 tid;
	__u32 tgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_host_ids);
} found SEC(".maps");

SEC("iter/task")
int wm_find_task(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task || task_ns_tid(task, ns_ino) != ns_tid)
		return 0;
	__u32 zero = 0;
	struct wm_host_ids *ids = bpf_map_lookup_elem(&found, &zero);
	if (ids) {
		ids->tid = (__u32)task->pid;
		ids->tgid = (__u32)task->tgid;
	}
	return 0;
}

_Static_assert(sizeof(struct wm_host_ids) == 8, "pid_ns.rs");
