/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Minimal eBPF program definitions: section macro, BTF map definition macros
 * and the helper functions the programs call (numbers from the kernel's
 * stable UAPI `enum bpf_func_id`).
 */
#ifndef WAKEMETER_BPF_MIN_H
#define WAKEMETER_BPF_MIN_H

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

/* BTF-defined maps: the loader reads these as types, never as data. */
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

/* Map flags. */
#define BPF_F_NO_PREALLOC (1U << 0)
/* bpf_task_storage_get flags. */
#define BPF_LOCAL_STORAGE_GET_F_CREATE (1ULL << 0)

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

#define WM_EEXIST 17
#define WM_EFAULT 14

/* bpf_get_stackid flags. */
#define BPF_F_USER_STACK (1ULL << 8)

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
				   __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static __u64 (*bpf_ktime_get_boot_ns)(void) = (void *)125;
static long (*bpf_get_stackid)(void *ctx, void *map, __u64 flags) = (void *)27;
static long (*bpf_get_current_comm)(void *buf, __u32 size) = (void *)16;
static __u64 (*bpf_get_current_task)(void) = (void *)35;
static long (*bpf_probe_read_user)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)112;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;
static struct task_struct *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;
static void *(*bpf_task_storage_get)(void *map, struct task_struct *task, void *value,
				     __u64 flags) = (void *)156;
static long (*bpf_task_storage_delete)(void *map, struct task_struct *task) = (void *)157;
static struct pt_regs *(*bpf_task_pt_regs)(struct task_struct *task) = (void *)175;

#endif
