// SPDX-License-Identifier: GPL-2.0
/*
 * TEST DOUBLE of NVIDIA's nvidia-uvm driver (open kernel modules, 580 or 550
 * branch: the layout header uvm_layout.h, a copy of kmod/layout/uvm<branch>.h,
 * says which).
 *
 * This is NOT the NVIDIA driver and drives no GPU. It exists so that the real
 * prescient.ko can be tested in a QEMU guest: it has the same module name, the
 * same symbol names, argument layouts and data layouts as driver 580 for the
 * part of the driver Prescient binds to (see shared/notes/uvm-facts.md):
 *   - uvm_perf_event_notify(), uvm_perf_register_event_callback(),
 *     uvm_perf_unregister_event_callback() with uvm_perf_event_data_t
 *     declared field by field as in the driver's uvm_perf_events.h of the
 *     branch (GPU faults: gpu.buffer_entry; CPU faults: proc_id = CPU and
 *     cpu.fault_va, a USER address, in the same union), every offset checked
 *     with BUILD_BUG_ON against the generated layout header, which is
 *     offsetof on NVIDIA's own headers;
 *   - uvm_fault_buffer_entry_t (fault_address @0, timestamp @8, type word @44,
 *     va_space* @48, gpu* @56, 96 bytes);
 *   - uvm_va_block_t (kref, lock (struct mutex), range*, start, end);
 *   - uvm_api_migrate(UVM_MIGRATE_PARAMS *, struct file *) and, on 580 only,
 *     uvm_api_discard(UVM_DISCARD_PARAMS *, struct file *), which require a
 *     registered uvm_thread_context (uvm_thread_context_add/remove); with
 *     uvm_enable_builtin_tests=1 the context is the 96-byte wrapper, as in
 *     the driver (uvm_thread_context.c), and its tail is written;
 *   - a destination UUID that is neither the CPU's nor one of the space's
 *     registered GPUs' is refused with NV_ERR_INVALID_DEVICE, as
 *     uvm_api_migrate does;
 *   - GPUs (uvm_gpu_t: id and uuid at the driver's offsets): the stand-in
 *     driver has STANDIN_GPUS of them; a space registers GPU 1 at open
 *     (STANDIN_IOCTL_GPUS registers others), as the driver holds it: the
 *     space's registered_gpus mask, and on 550 its registered_gpus_table,
 *     at the driver's offsets; on 580 each GPU fault's entry->gpu names
 *     the faulting GPU; a block is resident on one GPU, and a fault from
 *     another moves it there (no read duplication);
 *   - /dev/nvidia-uvm whose file private_data = va_space | 2;
 *   - MODULE_VERSION = STANDIN_VERSION (580.159.04 unless built otherwise),
 *     visible at /sys/module/nvidia_uvm/version.
 * Like the real driver it EXPORTS NOTHING: a client must find the symbols by
 * name (kallsyms), which is what Prescient does.
 *
 * Simulated GPU: each open of /dev/nvidia-uvm is one address space with a
 * managed range of TRACE_BLOCKS 2 MB blocks at STANDIN_BASE and a GPU memory
 * of gpu_blocks blocks. The driver's own eviction policy is modelled: FIFO by
 * first residency. A fault generator (test-only ioctl STANDIN_IOCTL_REPLAY on
 * the /dev/nvidia-uvm fd) replays the bundled trace (trace.h): for every
 * access to a non-resident block it raises one FAULT perf event exactly like
 * the driver's fault servicing (va_space lock held for reading, one event per
 * coalesced fault, then the block is serviced) and makes the block resident.
 * Migrations and discards take effect when uvm_api_migrate/uvm_api_discard are
 * called (the stand-in completes an ASYNC migration before it returns).
 * Counters: /sys/kernel/debug/nvidia_uvm_standin/stats.
 *
 * Lock order: va_space->lock (rwsem, read for faults and migrations)
 *   -> va_space->gpu_lock (mutex, residency state) ; perf_events.lock (rwsem)
 *   is taken alone or inside va_space->lock; ctx_lock (spinlock) is a leaf.
 */
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/delay.h>
#include <linux/ktime.h>
#include <linux/rwsem.h>
#include <linux/kref.h>
#include <linux/sched/signal.h>
#include <linux/unaligned.h>

#include "trace.h"
#include "uvm_layout.h"

#ifndef STANDIN_VERSION
#define STANDIN_VERSION "580.159.04"
#endif

static unsigned int gpu_blocks = 24;
module_param(gpu_blocks, uint, 0444);
MODULE_PARM_DESC(gpu_blocks, "simulated GPU memory per address space, in 2 MB blocks");
static bool uvm_enable_builtin_tests;
module_param(uvm_enable_builtin_tests, bool, 0444);
MODULE_PARM_DESC(uvm_enable_builtin_tests,
		 "as the driver's: thread contexts are the larger wrapper (its tail is written)");
static unsigned int kernel_us = 200;
module_param(kernel_us, uint, 0644);
MODULE_PARM_DESC(kernel_us, "simulated run time of one GPU kernel (us)");

typedef u32 NV_STATUS;
typedef u64 NvU64;
typedef u32 NvU32;
#define NV_OK 0x0
#define NV_ERR_INVALID_DEVICE 0x26
#define NV_ERR_INVALID_ADDRESS 0x1e
#define NV_ERR_INVALID_ARGUMENT 0x1f
#define NV_ERR_INVALID_STATE 0x40
#define NV_ERR_NO_MEMORY 0x51

#define UVM_PERF_EVENT_FAULT 6
#define UVM_PERF_EVENT_MIGRATION 7
#define UVM_PERF_EVENT_COUNT 16
#define UVM_FD_VA_SPACE 2
/* uvm_fd_type.h: (1 << UVM_FD_TYPE_BITS) - 1; 550 has 2 type bits, 580 has 3 */
#if UVM_L_BRANCH == 550
#define UVM_FD_TYPE_MASK 0x3
#else
#define UVM_FD_TYPE_MASK 0x7
#endif
#define UVM_MIGRATE_FLAG_ASYNC 1
#define STANDIN_BASE 0x7f0000000000ULL
#define BLOCK_SHIFT 21

/* ----- driver 580 data layouts ----- */
typedef struct {
	NvU64 fault_address;		/* @0 */
	NvU64 timestamp;		/* @8 */
	u8 instance_ptr[16];		/* @16 */
	u8 pad0[12];			/* @32 */
	NvU32 type_bits;		/* @44: fault_type [0:6), access_type [6:10) */
	void *va_space;			/* @48 */
	void *gpu;			/* @56 */
	u8 pad1[32];			/* @64 */
} uvm_fault_buffer_entry_t;

typedef struct uvm_va_block_struct {
	struct kref kref;
	struct mutex lock;
	void *managed_range;
	NvU64 start;
	NvU64 end;
	/* stand-in private from here on */
	u32 index;
} uvm_va_block_t;

/*
 * uvm_perf_event_data_t, field by field as in the branch's uvm_perf_events.h
 * (uvm_processor_id_t is { NvU32 val }, CPU = 0). Offsets: BUILD_BUG_ON in
 * standin_init against uvm_layout.h.
 */
typedef union {
	struct {
#if UVM_L_BRANCH == 550
		void *space;				/* uvm_va_space_t* (gone in 580.65.06) */
#endif
		uvm_va_block_t *block;
		NvU32 proc_id;
		NvU32 preferred_location;
		union {
			struct {
				uvm_fault_buffer_entry_t *buffer_entry;
				NvU32 batch_id;
				bool is_duplicate;
			} gpu;
			struct {
				NvU64 fault_va;			/* a USER address */
#if UVM_L_BRANCH == 580
				NvU32 cpu_num;
#endif
				bool is_write;
				NvU64 pc;
			} cpu;
		};
	} fault;
	/*
	 * MIGRATION: raised for every migration, including the driver's own
	 * evictions (uvm_perf_event_notify_migration).
	 */
	struct {
		union {
			void *push;
			NvU64 cpu_start_timestamp;
		};
		uvm_va_block_t *block;
		NvU32 dst;				/* uvm_processor_id_t */
		NvU32 src;
		s16 dst_nid;
		s16 src_nid;
		NvU64 address;
		NvU64 bytes;
		NvU32 transfer_mode;			/* MOVE = 1 */
#if UVM_L_BRANCH == 580
		NvU32 access_counters_buffer_index;
#endif
		NvU32 cause;				/* uvm_make_resident_cause_t */
		void *make_resident_context;
	} migration;
} uvm_perf_event_data_t;

/* uvm_make_resident_cause_t */
#define CAUSE_REPLAYABLE_FAULT 0
#define CAUSE_EVICTION 4
#define CAUSE_API_MIGRATE 6
#define UVM_ID_CPU 0
#define UVM_ID_GPU0 1
/* GPUs of the stand-in driver: processor ids 1..STANDIN_GPUS */
#define STANDIN_GPUS 3

/*
 * uvm_gpu_t as far as Prescient reads it: its id (uvm_gpu_id_t, a u32) and
 * uuid (NvProcessorUuid) at the driver's offsets; the rest is not modelled.
 */
#define GPU_BLOB_SIZE (UVM_L_GPU_ID + 4 > UVM_L_GPU_UUID + 16 ? UVM_L_GPU_ID + 4 : UVM_L_GPU_UUID + 16)
typedef struct { u8 raw[GPU_BLOB_SIZE]; } uvm_gpu_t;
static uvm_gpu_t *standin_gpu[STANDIN_GPUS + 1];	/* by processor id; [0] unused */

/*
 * The head of uvm_va_space_t that Prescient reads: registered_gpus (a
 * bitmap of UVM_ID_MAX_PROCESSORS bits) and, on 550, registered_gpus_table
 * (uvm_gpu_t * by GPU index), at the driver's offsets.
 */
#define VS_MASK_END (UVM_L_VA_SPACE_REGISTERED_GPUS + BITS_TO_LONGS(UVM_L_ID_MAX_PROCESSORS) * sizeof(long))
#define VS_TABLE_END (UVM_L_VA_SPACE_REGISTERED_GPUS_TABLE + (UVM_L_ID_MAX_PROCESSORS - 1) * sizeof(void *))
#define VS_DRV_SIZE (UVM_L_VA_SPACE_REGISTERED_GPUS_TABLE >= 0 && VS_TABLE_END > VS_MASK_END ? VS_TABLE_END : VS_MASK_END)

struct uvm_va_space_struct;
typedef void (*uvm_perf_event_callback_t)(struct uvm_va_space_struct *, int, uvm_perf_event_data_t *);

typedef struct {
	struct list_head event_callbacks[UVM_PERF_EVENT_COUNT];
	struct rw_semaphore lock;
	struct uvm_va_space_struct *va_space;
} uvm_perf_va_space_events_t;

struct perf_cb {
	struct list_head node;
	uvm_perf_event_callback_t cb;
};

typedef struct {
	NvU64 base;			/* @0 */
	NvU64 length;			/* @8 */
	u8 destinationUuid[16];		/* @16 */
	NvU32 flags;			/* @32 */
	NvU32 pad0;
	NvU64 semaphoreAddress;		/* @40 */
	NvU32 semaphorePayload;		/* @48 */
	NvU32 cpuNumaNode;		/* @52 */
	NvU64 userSpaceStart;		/* @56 */
	NvU64 userSpaceLength;		/* @64 */
	NV_STATUS rmStatus;		/* @72 */
	NvU32 pad1;
} UVM_MIGRATE_PARAMS;

#if UVM_L_HAS_DISCARD
typedef struct {
	NvU64 base;			/* @0 */
	NvU64 length;			/* @8 */
	NvU64 flags;			/* @16 */
	NV_STATUS rmStatus;		/* @24 */
	NvU32 pad0;
} UVM_DISCARD_PARAMS;
#endif

static const u8 uuid_cpu[16] = { 0xa6, 0x5e, 0x0f, 0x4e, 0xd7, 0xd4, 0x7b, 0xa2,
				 0x50, 0x47, 0x41, 0x2c, 0x14, 0x2a, 0x77, 0x73 };

/* Why a block was not resident when it faulted (diagnostics, debugfs and FAULTLOG). */
enum { GONE_NEVER, GONE_EVICT_FAULT, GONE_EVICT_MIGRATE, GONE_TO_CPU, GONE_DISCARD, GONE_N };
static const char *const gone_name[GONE_N] = {
	"never_resident", "driver_evicted_for_fault", "driver_evicted_for_migrate",
	"migrated_to_cpu", "discarded",
};
#define STANDIN_LOG 8192
struct standin_fault_rec {
	u16 kernel;	/* kernel index in the trace */
	u8 block;
	u8 cause;	/* GONE_*, | 0x80 if a prefetch landed while the fault was serviced */
	u16 gone_kernel;	/* the kernel that ran when the block left the GPU */
	u16 pad;
};

typedef struct uvm_va_space_struct {
	u8 drv[VS_DRV_SIZE] __aligned(8);	/* registered GPUs, as the driver holds them */
	struct rw_semaphore lock;
	uvm_perf_va_space_events_t perf_events;
	struct mutex gpu_lock;
	uvm_va_block_t *blocks[TRACE_BLOCKS];
	/* residency: resident[i] = the GPU (processor id) it is on, 0 = not on
	 * a GPU; fifo[] = resident blocks, oldest first */
	u8 resident[TRACE_BLOCKS];
	u8 last_fault_gpu[TRACE_BLOCKS];	/* the GPU that faulted last on it, 0 = none */
	u8 prefetched[TRACE_BLOCKS];	/* made resident by uvm_api_migrate, not yet touched */
	u8 gone[TRACE_BLOCKS];		/* why the block is not resident: GONE_* (diagnostics) */
	u16 gone_kernel[TRACE_BLOCKS];	/* and during which kernel it left */
	u32 cur_kernel;			/* the kernel being replayed (diagnostics) */
	struct standin_fault_rec log[STANDIN_LOG];	/* faults since the last FAULTLOG read */
	u32 nlog;
	u32 fifo[TRACE_BLOCKS];
	u32 nres;
	u32 debt_us;			/* kernel time not yet slept (STANDIN_IOCTL_KERNEL) */
	pid_t pid;
	u8 gpu_uuid[16];		/* the space's first GPU (GPU 1), for INFO */
} uvm_va_space_t;

static void gpu_uuid_of(u32 id, u8 *uuid)
{
	memcpy(uuid, "GPU-stand-in", 12);
	put_unaligned_be32(id, uuid + 12);
}

static unsigned long *vs_mask(uvm_va_space_t *vs)
{
	return (unsigned long *)(vs->drv + UVM_L_VA_SPACE_REGISTERED_GPUS);
}

static bool vs_has_gpu(uvm_va_space_t *vs, u32 id)
{
	return id >= UVM_ID_GPU0 && id <= STANDIN_GPUS && test_bit(id, vs_mask(vs));
}

/* Registers exactly the GPUs whose ids are set in `ids` (bit id). */
static void vs_set_gpus(uvm_va_space_t *vs, u32 ids)
{
	u32 id;

	for (id = UVM_ID_GPU0; id <= STANDIN_GPUS; id++) {
		bool on = ids & BIT(id);

		if (on)
			set_bit(id, vs_mask(vs));
		else
			clear_bit(id, vs_mask(vs));
#if UVM_L_VA_SPACE_REGISTERED_GPUS_TABLE >= 0
		((uvm_gpu_t **)(vs->drv + UVM_L_VA_SPACE_REGISTERED_GPUS_TABLE))[id - UVM_ID_GPU0] =
			on ? standin_gpu[id] : NULL;
#endif
	}
}

/* The registered GPU of `vs` whose UUID is `uuid`; 0 if none. */
static u32 vs_gpu_by_uuid(uvm_va_space_t *vs, const u8 *uuid)
{
	u8 u[16];
	u32 id;

	for (id = UVM_ID_GPU0; id <= STANDIN_GPUS; id++) {
		gpu_uuid_of(id, u);
		if (vs_has_gpu(vs, id) && !memcmp(u, uuid, 16))
			return id;
	}
	return 0;
}

/* The driver's global entry points (not exported, found by name). */
NV_STATUS uvm_api_migrate(UVM_MIGRATE_PARAMS *params, struct file *filp);
#if UVM_L_HAS_DISCARD
NV_STATUS uvm_api_discard(UVM_DISCARD_PARAMS *params, struct file *filp);
#endif
NV_STATUS uvm_perf_register_event_callback(uvm_perf_va_space_events_t *ev, int id,
					   uvm_perf_event_callback_t cb);
void uvm_perf_unregister_event_callback(uvm_perf_va_space_events_t *ev, int id,
					uvm_perf_event_callback_t cb);
void uvm_perf_event_notify(uvm_perf_va_space_events_t *ev, int id, uvm_perf_event_data_t *data);

/* global counters (debugfs) */
static atomic64_t c_faults, c_accesses, c_fault_migrations, c_driver_evictions,
	c_migrate_calls, c_migrated_in, c_migrated_out, c_discard_calls, c_discarded,
	c_prefetch_hits, c_no_context, c_bad_args, c_replays, c_spaces, c_fault_raced,
	c_cpu_faults, c_bad_uuid, c_wrong_gpu;
/* migrations to each GPU (by processor id) */
static atomic64_t c_migrated_to[STANDIN_GPUS + 1];
static atomic64_t c_fault_after[GONE_N];

/* ----- thread context (uvm_thread_context_add/remove) ----- */
typedef struct { void *task; u8 opaque[48]; } uvm_thread_context_t;	/* 56 bytes */
/* used instead iff UVM_IS_DEBUG() || uvm_enable_builtin_tests (lock-tracking state after it) */
typedef struct {
	uvm_thread_context_t context;
	u8 context_lock[UVM_L_THREAD_CONTEXT_WRAPPER_SIZE - UVM_L_THREAD_CONTEXT_SIZE];
} uvm_thread_context_wrapper_t;
bool uvm_thread_context_add(uvm_thread_context_t *ctx);
void uvm_thread_context_remove(uvm_thread_context_t *ctx);
#define MAX_CTX 16
static DEFINE_SPINLOCK(ctx_lock);
static struct task_struct *ctx_tasks[MAX_CTX];

noinline bool uvm_thread_context_add(uvm_thread_context_t *ctx)
{
	bool ok = false;
	int i;

	spin_lock(&ctx_lock);
	for (i = 0; i < MAX_CTX; i++)
		if (!ctx_tasks[i]) {
			ctx_tasks[i] = current;
			ok = true;
			break;
		}
	spin_unlock(&ctx_lock);
	ctx->task = current;
	/* As the driver's thread_context_non_interrupt_add: the wrapper's tail is written. */
	if (uvm_enable_builtin_tests)
		memset(container_of(ctx, uvm_thread_context_wrapper_t, context)->context_lock, 0,
		       sizeof(((uvm_thread_context_wrapper_t *)0)->context_lock));
	return ok;
}

noinline void uvm_thread_context_remove(uvm_thread_context_t *ctx)
{
	int i;

	spin_lock(&ctx_lock);
	for (i = 0; i < MAX_CTX; i++)
		if (ctx_tasks[i] == current) {
			ctx_tasks[i] = NULL;
			break;
		}
	spin_unlock(&ctx_lock);
}

static bool has_thread_context(void)
{
	bool ok = false;
	int i;

	spin_lock(&ctx_lock);
	for (i = 0; i < MAX_CTX; i++)
		if (ctx_tasks[i] == current)
			ok = true;
	spin_unlock(&ctx_lock);
	return ok;
}

/* ----- perf events ----- */
noinline NV_STATUS uvm_perf_register_event_callback(uvm_perf_va_space_events_t *ev, int id,
						    uvm_perf_event_callback_t cb)
{
	struct perf_cb *c;

	if (id < 0 || id >= UVM_PERF_EVENT_COUNT)
		return NV_ERR_INVALID_ARGUMENT;
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return NV_ERR_NO_MEMORY;
	c->cb = cb;
	down_write(&ev->lock);
	list_add_tail(&c->node, &ev->event_callbacks[id]);
	up_write(&ev->lock);
	return NV_OK;
}

noinline void uvm_perf_unregister_event_callback(uvm_perf_va_space_events_t *ev, int id,
						 uvm_perf_event_callback_t cb)
{
	struct perf_cb *c, *t;

	if (id < 0 || id >= UVM_PERF_EVENT_COUNT)
		return;
	down_write(&ev->lock);
	list_for_each_entry_safe(c, t, &ev->event_callbacks[id], node)
		if (c->cb == cb) {
			list_del(&c->node);
			kfree(c);
			break;
		}
	up_write(&ev->lock);
}

/* The driver calls this once per coalesced fault, va_space lock held for reading. */
noinline void uvm_perf_event_notify(uvm_perf_va_space_events_t *ev, int id, uvm_perf_event_data_t *data)
{
	struct perf_cb *c;

	if (id < 0 || id >= UVM_PERF_EVENT_COUNT)
		return;
	down_read(&ev->lock);
	list_for_each_entry(c, &ev->event_callbacks[id], node)
		c->cb(ev->va_space, id, data);
	up_read(&ev->lock);
}

/* ----- simulated GPU memory (gpu_lock held) ----- */

/* One MIGRATION perf event, as the driver raises for every block it moves. */
static void notify_migration(uvm_va_space_t *vs, u32 b, u32 gpu, bool to_gpu, u32 cause)
{
	uvm_perf_event_data_t data;

	memset(&data, 0, sizeof(data));
	data.migration.block = vs->blocks[b];
	data.migration.dst = to_gpu ? gpu : UVM_ID_CPU;
	data.migration.src = to_gpu ? UVM_ID_CPU : gpu;
	data.migration.address = vs->blocks[b]->start;
	data.migration.bytes = 1ULL << BLOCK_SHIFT;
	data.migration.transfer_mode = 1;
	data.migration.cause = cause;
	uvm_perf_event_notify(&vs->perf_events, UVM_PERF_EVENT_MIGRATION, &data);
}

static void make_nonresident(uvm_va_space_t *vs, u32 b, u8 why)
{
	u32 i, gpu = vs->resident[b];

	if (!gpu)
		return;
	for (i = 0; i < vs->nres; i++)
		if (vs->fifo[i] == b) {
			memmove(&vs->fifo[i], &vs->fifo[i + 1], (vs->nres - i - 1) * sizeof(u32));
			vs->nres--;
			break;
		}
	vs->resident[b] = 0;
	vs->prefetched[b] = 0;
	vs->gone[b] = why;
	vs->gone_kernel[b] = vs->cur_kernel;
	if (why == GONE_TO_CPU)
		notify_migration(vs, b, gpu, false, CAUSE_API_MIGRATE);
	else if (why == GONE_EVICT_FAULT || why == GONE_EVICT_MIGRATE)
		notify_migration(vs, b, gpu, false, CAUSE_EVICTION);
}

/*
 * `for_fault`: servicing a fault of GPU `gpu` (else uvm_api_migrate to it).
 * A block on another GPU moves (its place in the FIFO kept).
 */
static void make_resident(uvm_va_space_t *vs, u32 b, bool for_fault, u32 gpu)
{
	if (vs->resident[b] == gpu)
		return;
	if (vs->resident[b]) {
		vs->resident[b] = gpu;
		notify_migration(vs, b, gpu, true, for_fault ? CAUSE_REPLAYABLE_FAULT : CAUSE_API_MIGRATE);
		return;
	}
	while (vs->nres >= gpu_blocks && vs->nres > 0) {
		/* the driver's policy: evict the first block that became resident */
		make_nonresident(vs, vs->fifo[0], for_fault ? GONE_EVICT_FAULT : GONE_EVICT_MIGRATE);
		atomic64_inc(&c_driver_evictions);
	}
	vs->resident[b] = gpu;
	vs->fifo[vs->nres++] = b;
	notify_migration(vs, b, gpu, true, for_fault ? CAUSE_REPLAYABLE_FAULT : CAUSE_API_MIGRATE);
}

static uvm_va_space_t *va_space_of(struct file *filp)
{
	unsigned long p;

	if (!filp)
		return NULL;
	p = (unsigned long)filp->private_data;
	if ((p & UVM_FD_TYPE_MASK) != UVM_FD_VA_SPACE)
		return NULL;
	return (uvm_va_space_t *)(p & ~(unsigned long)UVM_FD_TYPE_MASK);
}

/* Blocks of [base, base+len) in the managed range, or false if outside/unaligned. */
static bool range_blocks(NvU64 base, NvU64 len, u32 *first, u32 *last)
{
	NvU64 end;

	if (!len || (base & (PAGE_SIZE - 1)) || (len & (PAGE_SIZE - 1)))
		return false;
	if (check_add_overflow(base, len, &end))
		return false;
	if (base < STANDIN_BASE || end > STANDIN_BASE + ((NvU64)TRACE_BLOCKS << BLOCK_SHIFT))
		return false;
	*first = (base - STANDIN_BASE) >> BLOCK_SHIFT;
	*last = (end - 1 - STANDIN_BASE) >> BLOCK_SHIFT;
	return true;
}

noinline NV_STATUS uvm_api_migrate(UVM_MIGRATE_PARAMS *params, struct file *filp)
{
	uvm_va_space_t *vs = va_space_of(filp);
	bool to_cpu;
	u32 first, last, b, gpu = 0;

	atomic64_inc(&c_migrate_calls);
	if (!has_thread_context()) {
		atomic64_inc(&c_no_context);
		return params->rmStatus = NV_ERR_INVALID_STATE;
	}
	if (!vs || !range_blocks(params->base, params->length, &first, &last) ||
	    (params->flags & ~UVM_MIGRATE_FLAG_ASYNC)) {
		atomic64_inc(&c_bad_args);
		return params->rmStatus = NV_ERR_INVALID_ADDRESS;
	}
	to_cpu = !memcmp(params->destinationUuid, uuid_cpu, 16);
	if (!to_cpu)
		gpu = vs_gpu_by_uuid(vs, params->destinationUuid);
	if (!to_cpu && !gpu) {
		/* uvm_migrate.c: the destination is not a processor of this space */
		atomic64_inc(&c_bad_uuid);
		return params->rmStatus = NV_ERR_INVALID_DEVICE;
	}
	down_read(&vs->lock);
	mutex_lock(&vs->gpu_lock);
	for (b = first; b <= last; b++) {
		if (to_cpu && vs->resident[b]) {
			make_nonresident(vs, b, GONE_TO_CPU);
			atomic64_inc(&c_migrated_out);
		} else if (!to_cpu && vs->resident[b] != gpu) {
			/* a block a GPU faulted on goes to the GPU that faulted last */
			if (vs->last_fault_gpu[b] && vs->last_fault_gpu[b] != gpu)
				atomic64_inc(&c_wrong_gpu);
			make_resident(vs, b, false, gpu);
			vs->prefetched[b] = 1;
			atomic64_inc(&c_migrated_in);
			atomic64_inc(&c_migrated_to[gpu]);
		}
	}
	mutex_unlock(&vs->gpu_lock);
	up_read(&vs->lock);
	return params->rmStatus = NV_OK;
}

#if UVM_L_HAS_DISCARD
noinline NV_STATUS uvm_api_discard(UVM_DISCARD_PARAMS *params, struct file *filp)
{
	uvm_va_space_t *vs = va_space_of(filp);
	u32 first, last, b;

	atomic64_inc(&c_discard_calls);
	if (!has_thread_context()) {
		atomic64_inc(&c_no_context);
		return params->rmStatus = NV_ERR_INVALID_STATE;
	}
	if (!vs || !range_blocks(params->base, params->length, &first, &last) || params->flags > 1) {
		atomic64_inc(&c_bad_args);
		return params->rmStatus = NV_ERR_INVALID_ADDRESS;
	}
	down_read(&vs->lock);
	mutex_lock(&vs->gpu_lock);
	for (b = first; b <= last; b++)
		if (vs->resident[b]) {
			make_nonresident(vs, b, GONE_DISCARD);
			atomic64_inc(&c_discarded);
		}
	mutex_unlock(&vs->gpu_lock);
	up_read(&vs->lock);
	return params->rmStatus = NV_OK;
}
#endif

/* ----- fault generator ----- */
#define STANDIN_IOCTL_REPLAY 0x7e000001u	/* test-only, not a real UVM number */
#define STANDIN_IOCTL_INFO   0x7e000002u
#define STANDIN_IOCTL_STORM  0x7e000003u
#define STANDIN_IOCTL_KERNEL 0x7e000004u	/* arg = kernel index: run that one kernel */
#define STANDIN_IOCTL_FAULTLOG 0x7e000005u	/* copy out and clear the fault log */
#define STANDIN_IOCTL_CPU_FAULTS 0x7e000006u	/* struct standin_cpu_faults: CPU faults */
#define STANDIN_IOCTL_GPUS 0x7e000007u	/* arg: mask of the GPUs the space registers */
#define STANDIN_MAX_ITERS 64
struct standin_replay {
	u32 iterations;
	u32 kernel_us;			/* 0 = module default */
	u64 faults[STANDIN_MAX_ITERS];	/* out: faults per iteration */
	u64 prefetch_hits[STANDIN_MAX_ITERS];	/* out: first touches of prefetched blocks */
};
struct standin_faultlog {
	u32 n;				/* out: records (at most STANDIN_LOG) */
	u32 lost;			/* out: faults not logged (log full) */
	struct standin_fault_rec rec[STANDIN_LOG];
};
struct standin_info {
	u64 base;
	u32 blocks;
	u32 gpu_blocks;
	u32 kernels;
	u32 accesses;
	u8 gpu_uuid[16];		/* the space's GPU, as the driver's processor table names it */
};
struct standin_cpu_faults {
	u64 user_base;			/* a user mapping of the caller (TRACE_BLOCKS x 2 MB) */
	u32 n;				/* faults to raise */
	u32 pad;
};

/* One access of the running kernel: fault (notify + service) if not resident. */
static void access_block(uvm_va_space_t *vs, u32 b, bool write, u32 batch, u32 kernel,
			 u64 *faults, u64 *hits, u32 gpu, bool anon)
{
	uvm_fault_buffer_entry_t entry;
	uvm_perf_event_data_t data;
	u8 why;

	atomic64_inc(&c_accesses);
	mutex_lock(&vs->gpu_lock);
	if (vs->resident[b] == gpu) {
		if (vs->prefetched[b]) {
			vs->prefetched[b] = 0;
			(*hits)++;
			atomic64_inc(&c_prefetch_hits);
		}
		mutex_unlock(&vs->gpu_lock);
		return;
	}
	why = vs->gone[b];
	mutex_unlock(&vs->gpu_lock);

	memset(&entry, 0, sizeof(entry));
	entry.fault_address = STANDIN_BASE + ((u64)b << BLOCK_SHIFT) + 0x1000;
	entry.timestamp = ktime_get_ns();
	entry.type_bits = (write ? 2 : 1) << 6;
	entry.va_space = vs;
	memset(&data, 0, sizeof(data));
#if UVM_L_BRANCH == 550
	data.fault.space = vs;
#endif
	data.fault.block = vs->blocks[b];
	data.fault.proc_id = gpu;
	/* 580's fault entries may carry no GPU (uvm_gpu_replayable_faults.c sets NULL) */
	entry.gpu = anon ? NULL : standin_gpu[gpu];
	data.fault.gpu.buffer_entry = &entry;
	data.fault.gpu.batch_id = batch;
	uvm_perf_event_notify(&vs->perf_events, UVM_PERF_EVENT_FAULT, &data);

	mutex_lock(&vs->gpu_lock);
	vs->last_fault_gpu[b] = gpu;
	if (vs->resident[b] != gpu) {
		make_resident(vs, b, true, gpu);
		atomic64_inc(&c_fault_migrations);
	} else {			/* a prefetch landed while the fault was raised */
		why |= 0x80;
		atomic64_inc(&c_fault_raced);
	}
	vs->prefetched[b] = 0;
	atomic64_inc(&c_fault_after[why & 0x7f]);
	if (vs->nlog < STANDIN_LOG)
		vs->log[vs->nlog] = (struct standin_fault_rec){ kernel, b, why, vs->gone_kernel[b] };
	vs->nlog++;
	mutex_unlock(&vs->gpu_lock);
	(*faults)++;
	atomic64_inc(&c_faults);
}

static long replay(uvm_va_space_t *vs, struct standin_replay __user *uarg)
{
	struct standin_replay *r;
	u32 it, k, i, batch = 0, kus, debt = 0;
	long ret = 0;

	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	if (copy_from_user(r, uarg, sizeof(*r))) {
		ret = -EFAULT;
		goto out;
	}
	if (!r->iterations || r->iterations > STANDIN_MAX_ITERS) {
		ret = -EINVAL;
		goto out;
	}
	kus = r->kernel_us ? r->kernel_us : kernel_us;
	atomic64_inc(&c_replays);
	for (it = 0; it < r->iterations; it++) {
		r->faults[it] = 0;
		r->prefetch_hits[it] = 0;
		for (k = 0; k + 1 < ARRAY_SIZE(trace_kernel); k++) {
			/* one fault batch per kernel, serviced under the va_space lock */
			WRITE_ONCE(vs->cur_kernel, k);
			down_read(&vs->lock);
			for (i = trace_kernel[k]; i < trace_kernel[k + 1]; i++)
				access_block(vs, trace_access[i] >> 1, trace_access[i] & 1, batch, k,
					     &r->faults[it], &r->prefetch_hits[it], UVM_ID_GPU0, false);
			up_read(&vs->lock);
			batch++;
			/*
			 * Kernel run time: the guest has no high-resolution timers, so
			 * sleeps are jiffy-sized; sleep once the debt reaches 4 ms.
			 */
			debt += kus;
			if (debt >= 4000) {
				usleep_range(debt, debt + debt / 4);
				debt = 0;
			}
			if (fatal_signal_pending(current)) {
				ret = -EINTR;
				goto out;
			}
		}
	}
	if (copy_to_user(uarg, r, sizeof(*r)))
		ret = -EFAULT;
out:
	kfree(r);
	return ret;
}

/*
 * A burst of FAULT events with no servicing in between (queue-overflow test).
 * gpu_lock is held throughout, as the driver holds its locks while a fault
 * batch is processed: a client that calls uvm_api_migrate meanwhile waits.
 */
static long storm(uvm_va_space_t *vs, unsigned long n)
{
	uvm_fault_buffer_entry_t entry;
	uvm_perf_event_data_t data;
	unsigned long i;

	if (n > 10000000)
		return -EINVAL;
	memset(&entry, 0, sizeof(entry));
	memset(&data, 0, sizeof(data));
	entry.va_space = vs;
	entry.type_bits = 1 << 6;
#if UVM_L_BRANCH == 550
	data.fault.space = vs;
#endif
	data.fault.proc_id = UVM_ID_GPU0;
	entry.gpu = standin_gpu[UVM_ID_GPU0];
	data.fault.gpu.buffer_entry = &entry;
	down_read(&vs->lock);
	mutex_lock(&vs->gpu_lock);
	for (i = 0; i < n; i++) {
		u32 b = i % TRACE_BLOCKS;

		entry.fault_address = STANDIN_BASE + ((u64)b << BLOCK_SHIFT);
		entry.timestamp = ktime_get_ns();
		data.fault.block = vs->blocks[b];
		data.fault.gpu.batch_id = i;
		uvm_perf_event_notify(&vs->perf_events, UVM_PERF_EVENT_FAULT, &data);
		if ((i & 1023) == 1023)
			cond_resched();
	}
	mutex_unlock(&vs->gpu_lock);
	up_read(&vs->lock);
	atomic64_add(n, &c_faults);
	return 0;
}

/*
 * CPU faults as the driver raises them (uvm_va_block_cpu_fault ->
 * uvm_perf_event_notify_cpu_fault): proc_id = CPU, cpu.fault_va = the
 * faulting USER address (here inside the caller's own mapping at
 * user_base, not yet present), cpu_num, is_write, pc (a user address too),
 * under the va_space lock. A client must never follow these pointers.
 */
static long cpu_faults(uvm_va_space_t *vs, struct standin_cpu_faults __user *uarg)
{
	struct standin_cpu_faults a;
	uvm_perf_event_data_t data;
	u32 i;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.n > 1000000 || !a.user_base || a.user_base >= TASK_SIZE_MAX ||
	    a.user_base + ((u64)TRACE_BLOCKS << BLOCK_SHIFT) > TASK_SIZE_MAX)
		return -EINVAL;
	down_read(&vs->lock);
	for (i = 0; i < a.n; i++) {
		u32 b = i % TRACE_BLOCKS;

		memset(&data, 0, sizeof(data));
#if UVM_L_BRANCH == 550
		data.fault.space = vs;
#endif
		data.fault.block = vs->blocks[b];
		data.fault.proc_id = UVM_ID_CPU;
		data.fault.preferred_location = UVM_ID_CPU;
		data.fault.cpu.fault_va = a.user_base + ((u64)b << BLOCK_SHIFT) + 0x10000;
#if UVM_L_BRANCH == 580
		data.fault.cpu.cpu_num = raw_smp_processor_id();
#endif
		data.fault.cpu.is_write = i & 1;
		data.fault.cpu.pc = a.user_base;
		uvm_perf_event_notify(&vs->perf_events, UVM_PERF_EVENT_FAULT, &data);
		if ((i & 1023) == 1023)
			cond_resched();
	}
	up_read(&vs->lock);
	atomic64_add(a.n, &c_cpu_faults);
	return 0;
}

/*
 * One kernel of the trace, launched by user space (so that a runtime can
 * report the execution id before each launch, as DeepUM's does). `arg`:
 * the kernel's index, and in bits 32-39 the GPU that runs it: 0 = GPU 1,
 * 1..STANDIN_GPUS = that GPU, 0xff = split by block (even blocks on GPU 1,
 * odd on GPU 2: two GPUs that never touch the same block), 0xfe = GPU 1 with
 * fault entries that name no GPU (entry->gpu NULL). The GPU must be
 * registered in the space (the driver services only those). Returns
 * faults | prefetch hits << 16 (each capped to fit an int).
 */
static long run_kernel(uvm_va_space_t *vs, unsigned long arg)
{
	u64 faults = 0, hits = 0, k = arg & 0xffffffff;
	u32 i, sel = (arg >> 32) & 0xff;
	bool anon;

	if (k + 1 >= ARRAY_SIZE(trace_kernel) || arg >> 40)
		return -EINVAL;
	if (sel == 0)
		sel = UVM_ID_GPU0;
	anon = sel == 0xfe;
	if (anon)
		sel = UVM_ID_GPU0;
	if (sel == 0xff ? !vs_has_gpu(vs, 1) || !vs_has_gpu(vs, 2) : !vs_has_gpu(vs, sel))
		return -EINVAL;
	WRITE_ONCE(vs->cur_kernel, k);
	down_read(&vs->lock);
	for (i = trace_kernel[k]; i < trace_kernel[k + 1]; i++)
		access_block(vs, trace_access[i] >> 1, trace_access[i] & 1, k, k, &faults, &hits,
			     sel == 0xff ? 1 + ((trace_access[i] >> 1) & 1) : sel, anon);
	up_read(&vs->lock);
	vs->debt_us += kernel_us;
	if (vs->debt_us >= 4000) {
		usleep_range(vs->debt_us, vs->debt_us + vs->debt_us / 4);
		vs->debt_us = 0;
	}
	return (long)(min_t(u64, faults, 0xffff) | min_t(u64, hits, 0x7fff) << 16);
}

/* Copies the fault log out and clears it (diagnostics). */
static long faultlog(uvm_va_space_t *vs, struct standin_faultlog __user *uarg)
{
	struct standin_faultlog *l;
	long ret = 0;

	l = kvzalloc(sizeof(*l), GFP_KERNEL);
	if (!l)
		return -ENOMEM;
	mutex_lock(&vs->gpu_lock);
	l->n = min_t(u32, vs->nlog, STANDIN_LOG);
	l->lost = vs->nlog - l->n;
	memcpy(l->rec, vs->log, l->n * sizeof(l->rec[0]));
	vs->nlog = 0;
	mutex_unlock(&vs->gpu_lock);
	if (copy_to_user(uarg, l, sizeof(*l)))
		ret = -EFAULT;
	kvfree(l);
	return ret;
}

/* ----- /dev/nvidia-uvm ----- */
static int uvm_open(struct inode *inode, struct file *filp)
{
	uvm_va_space_t *vs;
	u32 b, i;

	vs = kvzalloc(sizeof(*vs), GFP_KERNEL);
	if (!vs)
		return -ENOMEM;
	init_rwsem(&vs->lock);
	init_rwsem(&vs->perf_events.lock);
	for (i = 0; i < UVM_PERF_EVENT_COUNT; i++)
		INIT_LIST_HEAD(&vs->perf_events.event_callbacks[i]);
	vs->perf_events.va_space = vs;
	mutex_init(&vs->gpu_lock);
	for (b = 0; b < TRACE_BLOCKS; b++) {
		uvm_va_block_t *blk = kzalloc(sizeof(*blk), GFP_KERNEL);

		if (!blk) {
			while (b--)
				kfree(vs->blocks[b]);
			kvfree(vs);
			return -ENOMEM;
		}
		kref_init(&blk->kref);
		mutex_init(&blk->lock);
		blk->start = STANDIN_BASE + ((u64)b << BLOCK_SHIFT);
		blk->end = blk->start + (1ULL << BLOCK_SHIFT) - 1;
		blk->index = b;
		vs->blocks[b] = blk;
	}
	vs->pid = task_tgid_nr(current);
	/* GPU 1 registered in every space (a one-GPU process); STANDIN_IOCTL_GPUS for more */
	vs_set_gpus(vs, BIT(UVM_ID_GPU0));
	gpu_uuid_of(UVM_ID_GPU0, vs->gpu_uuid);
	filp->private_data = (void *)((unsigned long)vs | UVM_FD_VA_SPACE);
	atomic64_inc(&c_spaces);
	return 0;
}

static int uvm_release(struct inode *inode, struct file *filp)
{
	uvm_va_space_t *vs = va_space_of(filp);
	struct perf_cb *c, *t;
	u32 b, i;

	if (!vs)
		return 0;
	for (i = 0; i < UVM_PERF_EVENT_COUNT; i++)
		list_for_each_entry_safe(c, t, &vs->perf_events.event_callbacks[i], node)
			kfree(c);
	for (b = 0; b < TRACE_BLOCKS; b++)
		kfree(vs->blocks[b]);
	kvfree(vs);
	atomic64_dec(&c_spaces);
	return 0;
}

/*
 * UVM_PAGEABLE_MEM_ACCESS (uvm_ioctl.h: UVM_IOCTL_BASE(39), params
 * {NvBool pageableMemAccess; NV_STATUS rmStatus}), as 580's uvm.c
 * uvm_api_pageable_mem_access answers it on an initialised VA-space fd:
 * whether pageable memory is GPU-accessible (HMM or ATS: never here), NV_OK.
 * prescientd uses it to tell a VA-space fd from the other nvidia-uvm fds.
 */
#define UVM_PAGEABLE_MEM_ACCESS 39
struct pageable_mem_access_params {
	u8 pageableMemAccess;
	u8 pad[3];
	u32 rmStatus;
};

static long pageable_mem_access(struct pageable_mem_access_params __user *up)
{
	struct pageable_mem_access_params p = { .pageableMemAccess = 0, .rmStatus = 0 };

	return copy_to_user(up, &p, sizeof(p)) ? -EFAULT : 0;
}

/*
 * UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2 (uvm_ioctl.h: UVM_IOCTL_BASE(77),
 * params {u64 tablePtr; NV_STATUS rmStatus}), answered as 580's
 * uvm_tools_get_processor_uuid_table_common does: UVM_ID_MAX_PROCESSORS
 * UUIDs (NV_MAX_DEVICES 32 x 8 sub-processors + the CPU) copied to
 * tablePtr, the CPU's at index 0, each registered GPU at its id value (a
 * first, non-MIG GPU has id 1), zeros elsewhere; an unwritable table is
 * NV_ERR_INVALID_ADDRESS in rmStatus, not an errno. prescientd reads it to
 * learn the UUID the module's prefetches must name (PRESCIENT_IOC_SET_GPU).
 */
#define UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2 77
#define UVM_ID_MAX_PROCESSORS (32 * 8 + 1)
struct uuid_table_params {
	u64 tablePtr;
	u32 rmStatus;
	u32 pad;
};

static long uuid_table(uvm_va_space_t *vs, struct uuid_table_params __user *up)
{
	struct uuid_table_params p;
	u8 (*uuids)[16];
	u32 id;
	size_t len = 16 * UVM_ID_MAX_PROCESSORS;

	if (copy_from_user(&p, up, sizeof(p)))
		return -EFAULT;
	uuids = kzalloc(len, GFP_KERNEL);
	if (!uuids)
		return -ENOMEM;
	memcpy(uuids[UVM_ID_CPU], uuid_cpu, 16);
	for (id = UVM_ID_GPU0; id <= STANDIN_GPUS; id++)
		if (vs_has_gpu(vs, id))
			gpu_uuid_of(id, uuids[id]);
	p.rmStatus = copy_to_user(u64_to_user_ptr(p.tablePtr), uuids, len) ? NV_ERR_INVALID_ADDRESS : 0;
	kfree(uuids);
	return copy_to_user(up, &p, sizeof(p)) ? -EFAULT : 0;
}

static long uvm_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	uvm_va_space_t *vs = va_space_of(filp);

	if (!vs)
		return -EINVAL;
	switch (cmd) {
	case STANDIN_IOCTL_REPLAY:
		return replay(vs, (struct standin_replay __user *)arg);
	case STANDIN_IOCTL_KERNEL:
		return run_kernel(vs, arg);
	case STANDIN_IOCTL_STORM:
		return storm(vs, arg);
	case STANDIN_IOCTL_FAULTLOG:
		return faultlog(vs, (struct standin_faultlog __user *)arg);
	case STANDIN_IOCTL_CPU_FAULTS:
		return cpu_faults(vs, (struct standin_cpu_faults __user *)arg);
	case STANDIN_IOCTL_GPUS:
		/* arg: the GPUs (bit = processor id) the space registers, GPU 1 among them */
		if (!(arg & BIT(UVM_ID_GPU0)) || arg & ~GENMASK(STANDIN_GPUS, UVM_ID_GPU0))
			return -EINVAL;
		down_write(&vs->lock);
		vs_set_gpus(vs, arg);
		up_write(&vs->lock);
		return 0;
	case UVM_PAGEABLE_MEM_ACCESS:
		return pageable_mem_access((struct pageable_mem_access_params __user *)arg);
	case UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2:
		return uuid_table(vs, (struct uuid_table_params __user *)arg);
	case STANDIN_IOCTL_INFO: {
		struct standin_info info = {
			.base = STANDIN_BASE, .blocks = TRACE_BLOCKS, .gpu_blocks = gpu_blocks,
			.kernels = ARRAY_SIZE(trace_kernel) - 1, .accesses = ARRAY_SIZE(trace_access),
		};

		memcpy(info.gpu_uuid, vs->gpu_uuid, 16);
		return copy_to_user((void __user *)arg, &info, sizeof(info)) ? -EFAULT : 0;
	}
	}
	return -ENOTTY;
}

static const struct file_operations uvm_fops = {
	.owner = THIS_MODULE,
	.open = uvm_open,
	.release = uvm_release,
	.unlocked_ioctl = uvm_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice uvm_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvidia-uvm",
	.fops = &uvm_fops,
	.mode = 0666,
};

/* ----- debugfs ----- */
static struct dentry *dbg_dir;

static int stats_show(struct seq_file *m, void *v)
{
#define C(x) seq_printf(m, "%-18s %lld\n", #x, atomic64_read(&c_##x))
	C(faults); C(accesses); C(fault_migrations); C(driver_evictions); C(migrate_calls);
	C(migrated_in); C(migrated_out); C(discard_calls); C(discarded); C(prefetch_hits);
	C(no_context); C(bad_args); C(replays); C(spaces); C(fault_raced); C(cpu_faults);
	C(bad_uuid); C(wrong_gpu);
#undef C
	{
		int id;

		for (id = UVM_ID_GPU0; id <= STANDIN_GPUS; id++)
			seq_printf(m, "migrated_to_gpu%d %lld\n", id, atomic64_read(&c_migrated_to[id]));
	}
	{
		int i;

		for (i = 0; i < GONE_N; i++)
			seq_printf(m, "fault_after_%-26s %lld\n", gone_name[i],
				   atomic64_read(&c_fault_after[i]));
	}
	seq_printf(m, "%-18s %u\n", "gpu_blocks", gpu_blocks);
	seq_printf(m, "%-18s %s\n", "trace", TRACE_NAME);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(stats);

static void free_gpus(void)
{
	u32 id;

	for (id = UVM_ID_GPU0; id <= STANDIN_GPUS; id++) {
		kfree(standin_gpu[id]);
		standin_gpu[id] = NULL;
	}
}

static int __init standin_init(void)
{
	u32 id;
	int ret;

	/* The driver's structs as declared above against offsetof on NVIDIA's headers. */
	BUILD_BUG_ON(sizeof(uvm_fault_buffer_entry_t) != 96);
	BUILD_BUG_ON(offsetof(uvm_fault_buffer_entry_t, timestamp) != UVM_L_ENTRY_TIMESTAMP);
	BUILD_BUG_ON(offsetof(uvm_fault_buffer_entry_t, type_bits) != 44);
	BUILD_BUG_ON(offsetof(uvm_fault_buffer_entry_t, va_space) != UVM_L_ENTRY_VA_SPACE);
	BUILD_BUG_ON(offsetof(uvm_fault_buffer_entry_t, gpu) != 56);
	BUILD_BUG_ON(sizeof(uvm_perf_event_data_t) != UVM_L_EVENT_DATA_SIZE);
#if UVM_L_BRANCH == 550
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.space) != UVM_L_FAULT_SPACE);
#else
	BUILD_BUG_ON(UVM_L_FAULT_SPACE != UVM_L_ABSENT);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.cpu.cpu_num) != UVM_L_FAULT_CPU_CPU_NUM);
#endif
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.block) != UVM_L_FAULT_BLOCK);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.proc_id) != UVM_L_FAULT_PROC_ID);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.preferred_location) !=
		     UVM_L_FAULT_PREFERRED_LOCATION);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.gpu.buffer_entry) !=
		     UVM_L_FAULT_GPU_BUFFER_ENTRY);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.gpu.batch_id) != UVM_L_FAULT_GPU_BATCH_ID);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.cpu.fault_va) != UVM_L_FAULT_CPU_FAULT_VA);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.cpu.is_write) != UVM_L_FAULT_CPU_IS_WRITE);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, fault.cpu.pc) != UVM_L_FAULT_CPU_PC);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.block) != UVM_L_MIGRATION_BLOCK);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.dst) != UVM_L_MIGRATION_DST);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.src) != UVM_L_MIGRATION_SRC);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.address) != UVM_L_MIGRATION_ADDRESS);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.bytes) != UVM_L_MIGRATION_BYTES);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.transfer_mode) !=
		     UVM_L_MIGRATION_TRANSFER_MODE);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.cause) != UVM_L_MIGRATION_CAUSE);
	BUILD_BUG_ON(offsetof(uvm_perf_event_data_t, migration.make_resident_context) !=
		     UVM_L_MIGRATION_MAKE_RESIDENT_CONTEXT);
	BUILD_BUG_ON(UVM_PERF_EVENT_FAULT != UVM_L_PERF_EVENT_FAULT);
	BUILD_BUG_ON(UVM_PERF_EVENT_MIGRATION != UVM_L_PERF_EVENT_MIGRATION);
	BUILD_BUG_ON(CAUSE_EVICTION != UVM_L_CAUSE_EVICTION);
	BUILD_BUG_ON(UVM_ID_CPU != UVM_L_ID_CPU);
	BUILD_BUG_ON(UVM_FD_VA_SPACE != UVM_L_FD_VA_SPACE);
	BUILD_BUG_ON(UVM_FD_TYPE_MASK != UVM_L_FD_TYPE_MASK);
	BUILD_BUG_ON(sizeof(UVM_MIGRATE_PARAMS) != UVM_L_MIGRATE_SIZE);
	BUILD_BUG_ON(offsetof(UVM_MIGRATE_PARAMS, base) != UVM_L_MIGRATE_BASE);
	BUILD_BUG_ON(offsetof(UVM_MIGRATE_PARAMS, length) != UVM_L_MIGRATE_LENGTH);
	BUILD_BUG_ON(offsetof(UVM_MIGRATE_PARAMS, destinationUuid) != UVM_L_MIGRATE_DESTINATION_UUID);
	BUILD_BUG_ON(offsetof(UVM_MIGRATE_PARAMS, flags) != UVM_L_MIGRATE_FLAGS);
	BUILD_BUG_ON(offsetof(UVM_MIGRATE_PARAMS, cpuNumaNode) != UVM_L_MIGRATE_CPU_NUMA_NODE);
	BUILD_BUG_ON(offsetof(UVM_MIGRATE_PARAMS, rmStatus) != UVM_L_MIGRATE_RM_STATUS);
	BUILD_BUG_ON(UVM_MIGRATE_FLAG_ASYNC != UVM_L_MIGRATE_FLAG_ASYNC);
#if UVM_L_HAS_DISCARD
	BUILD_BUG_ON(sizeof(UVM_DISCARD_PARAMS) != UVM_L_DISCARD_SIZE);
	BUILD_BUG_ON(offsetof(UVM_DISCARD_PARAMS, length) != UVM_L_DISCARD_LENGTH);
	BUILD_BUG_ON(offsetof(UVM_DISCARD_PARAMS, flags) != UVM_L_DISCARD_FLAGS);
	BUILD_BUG_ON(offsetof(UVM_DISCARD_PARAMS, rmStatus) != UVM_L_DISCARD_RM_STATUS);
#endif
	BUILD_BUG_ON(sizeof(uvm_thread_context_t) != UVM_L_THREAD_CONTEXT_SIZE);
	BUILD_BUG_ON(sizeof(uvm_thread_context_wrapper_t) != UVM_L_THREAD_CONTEXT_WRAPPER_SIZE);

	BUILD_BUG_ON(UVM_ID_GPU0 != UVM_L_ID_GPU0);
	BUILD_BUG_ON(STANDIN_GPUS >= UVM_L_ID_MAX_PROCESSORS);
#if UVM_L_ENTRY_GPU >= 0
	BUILD_BUG_ON(offsetof(uvm_fault_buffer_entry_t, gpu) != UVM_L_ENTRY_GPU);
#endif

	if (gpu_blocks < 1 || gpu_blocks > TRACE_BLOCKS)
		return -EINVAL;
	for (id = UVM_ID_GPU0; id <= STANDIN_GPUS; id++) {
		standin_gpu[id] = kzalloc(sizeof(uvm_gpu_t), GFP_KERNEL);
		if (!standin_gpu[id]) {
			free_gpus();
			return -ENOMEM;
		}
		memcpy(standin_gpu[id]->raw + UVM_L_GPU_ID, &id, 4);
		gpu_uuid_of(id, standin_gpu[id]->raw + UVM_L_GPU_UUID);
	}
	ret = misc_register(&uvm_misc);
	if (ret) {
		free_gpus();
		return ret;
	}
	dbg_dir = debugfs_create_dir("nvidia_uvm_standin", NULL);
	debugfs_create_file("stats", 0444, dbg_dir, NULL, &stats_fops);
	pr_info("nvidia_uvm: TEST DOUBLE %s (not NVIDIA's driver; layouts of %s), trace %s, %u blocks, gpu %u blocks\n",
		STANDIN_VERSION, UVM_L_TAG, TRACE_NAME, TRACE_BLOCKS, gpu_blocks);
	return 0;
}

static void __exit standin_exit(void)
{
	debugfs_remove_recursive(dbg_dir);
	misc_deregister(&uvm_misc);
	free_gpus();
}

module_init(standin_init);
module_exit(standin_exit);
MODULE_LICENSE("GPL");
MODULE_VERSION(STANDIN_VERSION);
MODULE_DESCRIPTION("TEST DOUBLE of nvidia-uvm's interface for Prescient's VM tests (no GPU)");
