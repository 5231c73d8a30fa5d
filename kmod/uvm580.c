// SPDX-License-Identifier: GPL-2.0
/*
 * prescient.ko, nvidia-uvm driver branch 580: the layouts of this branch
 * (perf event data, fault buffer entries, va_block head, ioctl parameters,
 * the VA-space file's private_data), binding to the module, recognising its
 * VA-space files, and the calls into it (uvm_api_migrate, uvm_api_discard).
 * Read in source from 580.65.06 and measured on 580.159.04; another branch
 * gets a file of its own beside this one. The stand-in
 * (vm-tests/stand-in/nvidia_uvm.c) declares the same layouts independently
 * and checks its offsets with BUILD_BUG_ON.
 *
 * Locks owned here: none (the driver's own locks are taken inside the
 * uvm_api_* calls; see prescient_main.rs for the module's lock order).
 */
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/file.h>
#include <linux/fdtable.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/pid.h>
#include <linux/namei.h>
#include <linux/slab.h>

#include "glue.h"
#include "uvm.h"

/* uvm_perf_event_t values */
#define UVM_PERF_EVENT_FAULT 6
#define UVM_PERF_EVENT_MIGRATION 7
/* uvm_perf_event_data_t.fault: block* @0, buffer_entry* @16 */
#define FAULT_DATA_BLOCK 0
#define FAULT_DATA_ENTRY 16
/* uvm_fault_buffer_entry_t: the faulting uvm_va_space_t* @48 */
#define ENTRY_VA_SPACE 48
/* uvm_perf_event_data_t.migration: block* @8, dst (uvm_processor_id_t) @16, cause @52 */
#define MIGRATION_DATA_BLOCK 8
#define MIGRATION_DATA_DST 16
#define MIGRATION_DATA_CAUSE 52
#define UVM_ID_CPU_VALUE 0
#define UVM_MAKE_RESIDENT_CAUSE_EVICTION 4
/* file->private_data of /dev/nvidia-uvm: pointer | type in the low 3 bits */
#define UVM_FD_VA_SPACE 2
#define UVM_FD_TYPE_MASK 0x7ul
/* UVM_MIGRATE_PARAMS.flags */
#define UVM_MIGRATE_FLAG_ASYNC 1
/* UVM_MIGRATE_PARAMS.cpuNumaNode: no preferred node */
#define UVM_NUMA_NODE_ANY ((u32)-1)
/* NV_STATUS values (nvstatuscodes.h) */
#define NV_OK 0
#define NV_ERR_INVALID_STATE 0x40
#define NV_ERR_NO_MEMORY 0x51

/* uvm_va_block_t begins: kref, lock (struct mutex of THIS kernel), range*, start, end */
struct uvm580_va_block_head {
	struct kref kref;
	struct mutex lock;
	void *managed_range;
	u64 start;
	u64 end;
};
typedef struct {
	u64 base, length;
	u8 destinationUuid[16];
	u32 flags, pad0;
	u64 semaphoreAddress;
	u32 semaphorePayload, cpuNumaNode;
	u64 userSpaceStart, userSpaceLength;
	u32 rmStatus, pad1;
} uvm580_migrate_params;
typedef struct {
	u64 base, length, flags;
	u32 rmStatus, pad0;
} uvm580_discard_params;
typedef struct { u8 opaque[56]; } uvm580_thread_context;

static const u8 uuid_cpu[16] = { 0xa6, 0x5e, 0x0f, 0x4e, 0xd7, 0xd4, 0x7b, 0xa2,
				 0x50, 0x47, 0x41, 0x2c, 0x14, 0x2a, 0x77, 0x73 };
/* Destination for prefetches: the GPU's UUID (the stand-in takes any non-CPU UUID). */
static u8 uuid_gpu[16] = { 0x47, 0x50, 0x55, 0x2d, 0x73, 0x74, 0x61, 0x6e,
			   0x64, 0x2d, 0x69, 0x6e, 0x00, 0x00, 0x00, 0x01 };

static u32 (*p_migrate)(uvm580_migrate_params *, struct file *);
static u32 (*p_discard)(uvm580_discard_params *, struct file *);
static bool (*p_ctx_add)(uvm580_thread_context *);
static void (*p_ctx_remove)(uvm580_thread_context *);
static struct module *uvm_mod;
static dev_t uvm_rdev;

/* ----- binding ----- */

/* Address of nvidia_uvm's `name`, or 0 if absent or not inside that module. */
static unsigned long uvm_sym(const char *name)
{
	char full[96];
	unsigned long a;

	snprintf(full, sizeof(full), "nvidia_uvm:%s", name);
	a = prescient_kallsyms(full);
	if (!a || !within_module(a, uvm_mod)) {
		pr_err("prescient: nvidia_uvm has no symbol %s: refusing to bind\n", name);
		return 0;
	}
	return a;
}

/*
 * Bind to nvidia-uvm: find it through /dev/nvidia-uvm, pin it, copy its version
 * string into ver[] for Rust to judge. Returns 0 or -errno.
 */
int prescient_c_find_driver(char *ver, int len)
{
	struct file *f;
	struct path path;
	int ret;

	ret = prescient_kallsyms_init();
	if (ret) {
		pr_err("prescient: cannot find kallsyms_lookup_name (CONFIG_KPROBES needed): %d\n", ret);
		return ret;
	}
	ret = kern_path("/dev/nvidia-uvm", LOOKUP_FOLLOW, &path);
	if (ret) {
		pr_err("prescient: /dev/nvidia-uvm not found (load nvidia-uvm first): %d\n", ret);
		return -ENODEV;
	}
	uvm_rdev = d_inode(path.dentry)->i_rdev;
	path_put(&path);
	f = filp_open("/dev/nvidia-uvm", O_RDWR, 0);
	if (IS_ERR(f)) {
		pr_err("prescient: cannot open /dev/nvidia-uvm: %ld\n", PTR_ERR(f));
		return -ENODEV;
	}
	uvm_mod = f->f_op ? f->f_op->owner : NULL;
	if (!uvm_mod || strcmp(module_name(uvm_mod), "nvidia_uvm") || !try_module_get(uvm_mod)) {
		filp_close(f, NULL);
		uvm_mod = NULL;
		pr_err("prescient: /dev/nvidia-uvm does not belong to module nvidia_uvm\n");
		return -ENODEV;
	}
	filp_close(f, NULL);
	strscpy(ver, uvm_mod->version ? uvm_mod->version : "", len);
	return 0;
}

void prescient_c_release_driver(void)
{
	if (uvm_mod)
		module_put(uvm_mod);
	uvm_mod = NULL;
}

int uvm580_resolve(unsigned long *notify_addr)
{
	p_migrate = (void *)uvm_sym("uvm_api_migrate");
	p_discard = (void *)uvm_sym("uvm_api_discard");
	p_ctx_add = (void *)uvm_sym("uvm_thread_context_add");
	p_ctx_remove = (void *)uvm_sym("uvm_thread_context_remove");
	*notify_addr = uvm_sym("uvm_perf_event_notify");
	if (!p_migrate || !p_discard || !p_ctx_add || !p_ctx_remove || !*notify_addr)
		return -ENOENT;
	return 0;
}

/* ----- perf events ----- */

void uvm580_perf_event(u64 events, u32 id, const void *data, bool track_evictions)
{
	const u8 *d = data;
	const struct uvm580_va_block_head *blk;
	const u8 *entry;

	if (!d)
		return;
	if (id == UVM_PERF_EVENT_MIGRATION) {
		/*
		 * The driver evicted a block to make room (on the fault path or
		 * inside a migration): Prescient's ledger must drop it. Other
		 * migrations are Prescient's own or follow a fault it sees.
		 */
		if (!track_evictions ||
		    *(const u32 *)(d + MIGRATION_DATA_CAUSE) != UVM_MAKE_RESIDENT_CAUSE_EVICTION ||
		    *(const u32 *)(d + MIGRATION_DATA_DST) != UVM_ID_CPU_VALUE)
			return;
		blk = *(const struct uvm580_va_block_head *const *)(d + MIGRATION_DATA_BLOCK);
		if (blk)
			prescient_rs_evicted(events, blk->start);
		return;
	}
	if (id != UVM_PERF_EVENT_FAULT)
		return;
	blk = *(const struct uvm580_va_block_head *const *)(d + FAULT_DATA_BLOCK);
	entry = *(const u8 *const *)(d + FAULT_DATA_ENTRY);
	if (!blk || !entry)
		return;
	prescient_rs_fault(*(const u64 *)(entry + ENTRY_VA_SPACE), events, blk->start);
}

/* ----- VA-space files ----- */

static bool is_uvm_va_space_file(struct file *f)
{
	struct inode *ino = file_inode(f);

	return S_ISCHR(ino->i_mode) && ino->i_rdev == uvm_rdev &&
	       ((unsigned long)READ_ONCE(f->private_data) & UVM_FD_TYPE_MASK) == UVM_FD_VA_SPACE;
}

/* A VA-space file of /dev/nvidia-uvm, referenced; *va_space set. */
static void *take(struct file *f, u64 *va_space)
{
	*va_space = (unsigned long)READ_ONCE(f->private_data) & ~UVM_FD_TYPE_MASK;
	return f;
}

void *prescient_c_file_from_fd(int fd, u64 *va_space, int *err)
{
	struct file *f = fget(fd);

	if (!f) {
		*err = -EBADF;
		return NULL;
	}
	if (!is_uvm_va_space_file(f)) {
		fput(f);
		*err = -EINVAL;
		return NULL;
	}
	return take(f, va_space);
}

/* iterate_fd callback, under files->file_lock: the file cannot go away here. */
static int match_uvm(const void *p, struct file *f, unsigned int fd)
{
	if (!is_uvm_va_space_file(f))
		return 0;
	*(struct file **)p = get_file(f);
	return 1;
}

void *prescient_c_file_from_pid(int pid, u64 *va_space, int *err)
{
	struct task_struct *t;
	struct file *f = NULL;
	struct pid *ps = find_get_pid(pid);

	t = get_pid_task(ps, PIDTYPE_TGID);
	put_pid(ps);
	if (!t) {
		*err = -ESRCH;
		return NULL;
	}
	task_lock(t);
	if (t->files)
		iterate_fd(t->files, 0, match_uvm, &f);
	task_unlock(t);
	put_task_struct(t);
	if (!f) {
		*err = -ENOENT;
		return NULL;
	}
	return take(f, va_space);
}

/* ----- calls into the driver ----- */

/* Migrate [base, base+len) of the file's va_space to the GPU (to_cpu=0) or the CPU. */
u32 prescient_c_migrate(void *f, u64 base, u64 len, int to_cpu)
{
	uvm580_migrate_params *p;
	uvm580_thread_context ctx;
	u32 st;

	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p)
		return NV_ERR_NO_MEMORY;
	p->base = base;
	p->length = len;
	memcpy(p->destinationUuid, to_cpu ? uuid_cpu : uuid_gpu, 16);
	p->flags = UVM_MIGRATE_FLAG_ASYNC;
	p->cpuNumaNode = UVM_NUMA_NODE_ANY;
	memset(&ctx, 0, sizeof(ctx));
	/* The uvm_api_* entry points require a thread context, as the ioctl path sets up. */
	if (!p_ctx_add(&ctx)) {
		kfree(p);
		return NV_ERR_INVALID_STATE;
	}
	st = p_migrate(p, f);
	p_ctx_remove(&ctx);
	if (st == NV_OK)
		st = p->rmStatus;
	kfree(p);
	return st;
}

u32 prescient_c_discard(void *f, u64 base, u64 len)
{
	uvm580_discard_params p = { .base = base, .length = len, .flags = 0 };
	uvm580_thread_context ctx;
	u32 st;

	memset(&ctx, 0, sizeof(ctx));
	if (!p_ctx_add(&ctx))
		return NV_ERR_INVALID_STATE;
	st = p_discard(&p, f);
	p_ctx_remove(&ctx);
	return st != NV_OK ? st : p.rmStatus;
}
