/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What glue.c and the driver file (uvm.c) offer each other, and the layout
 * of one nvidia-uvm branch as numbers (struct uvm_layout), filled from the
 * generated kmod/layout/uvm<branch>.h by layout_<branch>.c. The functions
 * the Rust side calls are in glue.h.
 *
 * One driver file for every branch, parameterised by the layout chosen at
 * bind: the branches differ only in offsets and one missing call
 * (uvm_api_discard before 580.65.06), so one code path serves both and
 * every test of one exercises the code of the other.
 */
#ifndef PRESCIENT_UVM_H
#define PRESCIENT_UVM_H
#include <linux/types.h>

/* Offsets and sizes in bytes; -1 (UVM_L_ABSENT) where the branch lacks it. */
struct uvm_layout {
	int branch;
	const char *tag;
	int ev_fault, ev_migration, event_data_size;
	int fault_block, fault_proc_id, fault_gpu_buffer_entry, fault_cpu_fault_va;
	int migration_block, migration_dst, migration_cause;
	int id_cpu, cause_eviction;
	int entry_va_space;
	int ctx_size, ctx_wrapper_size;
	int migrate_size, migrate_base, migrate_length, migrate_uuid, migrate_flags,
	    migrate_numa, migrate_status, migrate_flag_async;
	int has_discard;
	int discard_size, discard_base, discard_length, discard_flags, discard_status;
	int fd_va_space, fd_type_mask;
	/* the faulting GPU's UUID, through what the driver holds for the space */
	int va_space_registered_gpus, id_max_processors, id_gpu0;
	int va_space_registered_gpus_table, entry_gpu, gpu_id, gpu_uuid;
};

/* The layout struct of the header included before this macro. */
#define UVM_LAYOUT_FROM_HEADER(name) const struct uvm_layout name = {			\
	.branch = UVM_L_BRANCH, .tag = UVM_L_TAG,					\
	.ev_fault = UVM_L_PERF_EVENT_FAULT, .ev_migration = UVM_L_PERF_EVENT_MIGRATION,	\
	.event_data_size = UVM_L_EVENT_DATA_SIZE,					\
	.fault_block = UVM_L_FAULT_BLOCK, .fault_proc_id = UVM_L_FAULT_PROC_ID,	\
	.fault_gpu_buffer_entry = UVM_L_FAULT_GPU_BUFFER_ENTRY,			\
	.fault_cpu_fault_va = UVM_L_FAULT_CPU_FAULT_VA,					\
	.migration_block = UVM_L_MIGRATION_BLOCK, .migration_dst = UVM_L_MIGRATION_DST,	\
	.migration_cause = UVM_L_MIGRATION_CAUSE,					\
	.id_cpu = UVM_L_ID_CPU, .cause_eviction = UVM_L_CAUSE_EVICTION,		\
	.entry_va_space = UVM_L_ENTRY_VA_SPACE,						\
	.ctx_size = UVM_L_THREAD_CONTEXT_SIZE,						\
	.ctx_wrapper_size = UVM_L_THREAD_CONTEXT_WRAPPER_SIZE,				\
	.migrate_size = UVM_L_MIGRATE_SIZE, .migrate_base = UVM_L_MIGRATE_BASE,	\
	.migrate_length = UVM_L_MIGRATE_LENGTH,						\
	.migrate_uuid = UVM_L_MIGRATE_DESTINATION_UUID,					\
	.migrate_flags = UVM_L_MIGRATE_FLAGS, .migrate_numa = UVM_L_MIGRATE_CPU_NUMA_NODE, \
	.migrate_status = UVM_L_MIGRATE_RM_STATUS,					\
	.migrate_flag_async = UVM_L_MIGRATE_FLAG_ASYNC,					\
	.has_discard = UVM_L_HAS_DISCARD,						\
	.discard_size = UVM_L_DISCARD_SIZE, .discard_base = UVM_L_DISCARD_BASE,	\
	.discard_length = UVM_L_DISCARD_LENGTH, .discard_flags = UVM_L_DISCARD_FLAGS,	\
	.discard_status = UVM_L_DISCARD_RM_STATUS,					\
	.fd_va_space = UVM_L_FD_VA_SPACE, .fd_type_mask = UVM_L_FD_TYPE_MASK,		\
	.va_space_registered_gpus = UVM_L_VA_SPACE_REGISTERED_GPUS,			\
	.id_max_processors = UVM_L_ID_MAX_PROCESSORS, .id_gpu0 = UVM_L_ID_GPU0,		\
	.va_space_registered_gpus_table = UVM_L_VA_SPACE_REGISTERED_GPUS_TABLE,		\
	.entry_gpu = UVM_L_ENTRY_GPU, .gpu_id = UVM_L_GPU_ID, .gpu_uuid = UVM_L_GPU_UUID,	\
}

extern const struct uvm_layout uvm_layout_550, uvm_layout_580;

/* glue.c: kallsyms_lookup_name, found through a kprobe (it is not exported). */
int prescient_kallsyms_init(void);
unsigned long prescient_kallsyms(const char *name);

/*
 * uvm.c: resolve the bound driver's functions for `branch` (550 or 580);
 * *notify_addr gets the address of uvm_perf_event_notify, which glue.c
 * hooks. 0 or -errno (one line logged).
 */
int uvm_resolve(int branch, unsigned long *notify_addr);
/*
 * uvm.c: one call of uvm_perf_event_notify(events, id, data), from the
 * kprobe (int3 context: no locks, no sleeping). Passes GPU faults, and the
 * driver's own evictions when track_evictions is set, to the Rust side;
 * counts CPU faults.
 */
void uvm_perf_event(u64 events, u32 id, const void *data, bool track_evictions);
#endif
