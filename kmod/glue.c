// SPDX-License-Identifier: GPL-2.0
/*
 * prescient.ko, C side: only what the 6.12 `kernel` crate has no abstraction
 * for. Symbol lookup (kallsyms via the kprobe trick), the kprobe on the
 * driver's uvm_perf_event_notify(), the /dev/prescient misc device and its
 * ioctl entry, the worker kthread, struct file references, and the calls
 * into nvidia-uvm with their driver-580 argument layouts. All decisions and
 * state live in Rust (prescient_main.rs).
 *
 * Locks owned here: none (the driver's own locks are taken inside the
 * uvm_api_* calls; see prescient_main.rs for the module's lock order).
 */
#include <linux/module.h>
#include <linux/kprobes.h>
#include <linux/miscdevice.h>
#include <linux/fs.h>
#include <linux/file.h>
#include <linux/fdtable.h>
#include <linux/kthread.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/pid.h>
#include <linux/capability.h>
#include <linux/namei.h>
#include <linux/slab.h>
#include <linux/irq_work.h>

#include "glue.h"

static unsigned int gpu_blocks = 24;
module_param(gpu_blocks, uint, 0444);
MODULE_PARM_DESC(gpu_blocks, "GPU memory in 2 MB blocks: the default residency budget");
static unsigned int enable = 1;
module_param(enable, uint, 0444);
MODULE_PARM_DESC(enable, "prefetch and pre-evict from the start (0 = observe only)");
static unsigned int track_evictions = 1;
module_param(track_evictions, uint, 0444);
MODULE_PARM_DESC(track_evictions,
		 "follow the driver's own evictions (MIGRATION events, cause EVICTION) in the residency ledger (0 = faults and own migrations only)");

/* Implemented in Rust. */
void prescient_rs_fault(u64 va_space, u64 events, u64 block_start, u64 timestamp, u32 access);
void prescient_rs_evicted(u64 events, u64 block_start);
long prescient_rs_ioctl(unsigned int cmd, unsigned long arg);
int prescient_rs_work(void);

/* ----- driver 580 layouts (the only version table entry so far) ----- */
#define UVM_PERF_EVENT_FAULT 6
#define UVM_PERF_EVENT_MIGRATION 7
/* uvm_perf_event_data_t.migration: block* @8, dst (uvm_processor_id_t) @16, cause @52 */
#define MIGRATION_DATA_BLOCK 8
#define MIGRATION_DATA_DST 16
#define MIGRATION_DATA_CAUSE 52
#define UVM_ID_CPU_VALUE 0
#define UVM_MAKE_RESIDENT_CAUSE_EVICTION 4
#define UVM_FD_VA_SPACE 2
#define UVM_FD_TYPE_MASK 0x7ul
#define FAULT_DATA_BLOCK 0
#define FAULT_DATA_ENTRY 16
#define ENTRY_TIMESTAMP 8
#define ENTRY_TYPE_WORD 44
#define ENTRY_VA_SPACE 48
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
static unsigned long notify_addr;
static struct module *uvm_mod;
static dev_t uvm_rdev;

/* ----- symbol lookup ----- */
typedef unsigned long (*kln_t)(const char *);
static kln_t kln;

static int find_kallsyms_lookup_name(void)
{
	struct kprobe kp = { .symbol_name = "kallsyms_lookup_name" };
	int ret = register_kprobe(&kp);

	if (ret)
		return ret;
	kln = (kln_t)kp.addr;
	unregister_kprobe(&kp);
	return kln ? 0 : -ENOENT;
}

/* Address of nvidia_uvm's `name`, or 0 if absent or not inside that module. */
static unsigned long uvm_sym(const char *name)
{
	char full[96];
	unsigned long a;

	snprintf(full, sizeof(full), "nvidia_uvm:%s", name);
	a = kln(full);
	if (!a || !within_module(a, uvm_mod)) {
		pr_err("prescient: nvidia_uvm has no symbol %s: refusing to bind\n", name);
		return 0;
	}
	return a;
}

/* ----- fault hook ----- */
static struct kprobe notify_kp;

static int notify_pre(struct kprobe *p, struct pt_regs *regs)
{
	/* uvm_perf_event_notify(events *, uvm_perf_event_t id, uvm_perf_event_data_t *data) */
	const u8 *data = (const u8 *)regs->dx;
	const struct uvm580_va_block_head *blk;
	const u8 *entry;

	if (!data)
		return 0;
	if (regs->si == UVM_PERF_EVENT_MIGRATION) {
		/*
		 * The driver evicted a block to make room (on the fault path or
		 * inside a migration): Prescient's ledger must drop it. Other
		 * migrations are Prescient's own or follow a fault it sees.
		 */
		if (!track_evictions ||
		    *(const u32 *)(data + MIGRATION_DATA_CAUSE) != UVM_MAKE_RESIDENT_CAUSE_EVICTION ||
		    *(const u32 *)(data + MIGRATION_DATA_DST) != UVM_ID_CPU_VALUE)
			return 0;
		blk = *(const struct uvm580_va_block_head *const *)(data + MIGRATION_DATA_BLOCK);
		if (blk)
			prescient_rs_evicted(regs->di, blk->start);
		return 0;
	}
	if (regs->si != UVM_PERF_EVENT_FAULT)
		return 0;
	blk = *(const struct uvm580_va_block_head *const *)(data + FAULT_DATA_BLOCK);
	entry = *(const u8 *const *)(data + FAULT_DATA_ENTRY);
	if (!blk || !entry)
		return 0;
	prescient_rs_fault(*(const u64 *)(entry + ENTRY_VA_SPACE), regs->di, blk->start,
			   *(const u64 *)(entry + ENTRY_TIMESTAMP),
			   (*(const u32 *)(entry + ENTRY_TYPE_WORD) >> 6) & 0xf);
	return 0;
}

/* ----- worker ----- */
static struct task_struct *worker;
static atomic_t kicked = ATOMIC_INIT(0);

/*
 * The kprobe handler runs in int3 context, which lockdep rightly treats like
 * NMI: it may take no lock, so it cannot wake the worker itself (pi_lock).
 * irq_work_queue is NMI-safe; the irq_work then wakes the worker.
 */
static void kick_fn(struct irq_work *w)
{
	struct task_struct *t = READ_ONCE(worker);

	if (t)
		wake_up_process(t);
}
static DEFINE_IRQ_WORK(kick_work, kick_fn);

void prescient_c_kick(void)
{
	if (atomic_xchg(&kicked, 1) == 0)
		irq_work_queue(&kick_work);
}

static int worker_fn(void *unused)
{
	while (!kthread_should_stop()) {
		atomic_set(&kicked, 0);
		if (prescient_rs_work())
			continue;	/* more to do: faults or prefetches pending */
		set_current_state(TASK_INTERRUPTIBLE);
		if (!atomic_read(&kicked) && !kthread_should_stop())
			schedule_timeout(HZ / 10);
		__set_current_state(TASK_RUNNING);
	}
	return 0;
}

/* ----- /dev/prescient ----- */
static long prescient_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	return prescient_rs_ioctl(cmd, arg);
}

static const struct file_operations prescient_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = prescient_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice prescient_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "prescient",
	.fops = &prescient_fops,
	.mode = 0666,
};

/* ----- helpers called from Rust ----- */
unsigned int prescient_c_gpu_blocks(void) { return gpu_blocks; }
unsigned int prescient_c_enable(void) { return enable; }
int prescient_c_capable_admin(void) { return capable(CAP_SYS_ADMIN); }
int prescient_c_tgid(void) { return task_tgid_nr(current); }

void prescient_c_log_bad(unsigned int cmd, int err)
{
	pr_warn_ratelimited("prescient: ioctl %#x from pid %d rejected: %d\n", cmd,
			    task_tgid_nr(current), err);
}

static bool is_uvm_va_space_file(struct file *f)
{
	struct inode *ino = file_inode(f);

	return S_ISCHR(ino->i_mode) && ino->i_rdev == uvm_rdev &&
	       ((unsigned long)READ_ONCE(f->private_data) & UVM_FD_TYPE_MASK) == UVM_FD_VA_SPACE;
}

/* A VA-space file of /dev/nvidia-uvm, referenced; *va_space and *pid set. */
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

void prescient_c_file_put(void *f)
{
	fput(f);
}

/* True when only Prescient still holds the file: its process has gone. */
int prescient_c_file_orphaned(void *f)
{
	return file_count((struct file *)f) == 1;
}

/* Migrate [base, base+len) of the file's va_space to the GPU (to_cpu=0) or the CPU. */
u32 prescient_c_migrate(void *f, u64 base, u64 len, int to_cpu)
{
	uvm580_migrate_params *p;
	uvm580_thread_context ctx;
	u32 st;

	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p)
		return 0x51;	/* NV_ERR_NO_MEMORY */
	p->base = base;
	p->length = len;
	memcpy(p->destinationUuid, to_cpu ? uuid_cpu : uuid_gpu, 16);
	p->flags = 1;		/* UVM_MIGRATE_FLAG_ASYNC */
	p->cpuNumaNode = (u32)-1;
	memset(&ctx, 0, sizeof(ctx));
	if (!p_ctx_add(&ctx)) {
		kfree(p);
		return 0x40;	/* NV_ERR_INVALID_STATE */
	}
	st = p_migrate(p, f);
	p_ctx_remove(&ctx);
	if (!st)
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
		return 0x40;
	st = p_discard(&p, f);
	p_ctx_remove(&ctx);
	return st ? st : p.rmStatus;
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

	ret = find_kallsyms_lookup_name();
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

/* After Rust accepted the version: resolve symbols, start worker, device, hook. */
int prescient_c_start(void)
{
	int ret;

	p_migrate = (void *)uvm_sym("uvm_api_migrate");
	p_discard = (void *)uvm_sym("uvm_api_discard");
	p_ctx_add = (void *)uvm_sym("uvm_thread_context_add");
	p_ctx_remove = (void *)uvm_sym("uvm_thread_context_remove");
	notify_addr = uvm_sym("uvm_perf_event_notify");
	if (!p_migrate || !p_discard || !p_ctx_add || !p_ctx_remove || !notify_addr)
		return -ENOENT;

	worker = kthread_run(worker_fn, NULL, "prescient");
	if (IS_ERR(worker)) {
		ret = PTR_ERR(worker);
		worker = NULL;
		return ret;
	}
	ret = misc_register(&prescient_misc);
	if (ret)
		goto stop;
	memset(&notify_kp, 0, sizeof(notify_kp));
	notify_kp.addr = (kprobe_opcode_t *)notify_addr;
	notify_kp.pre_handler = notify_pre;
	ret = register_kprobe(&notify_kp);
	if (ret) {
		pr_err("prescient: cannot hook uvm_perf_event_notify: %d\n", ret);
		goto dereg;
	}
	return 0;
dereg:
	misc_deregister(&prescient_misc);
stop:
	kthread_stop(worker);
	worker = NULL;
	return ret;
}

/* Undo prescient_c_start: no fault callback, ioctl or worker runs afterwards. */
void prescient_c_stop(void)
{
	unregister_kprobe(&notify_kp);	/* waits for running handlers */
	misc_deregister(&prescient_misc);
	irq_work_sync(&kick_work);	/* no kick can run after this */
	if (worker)
		kthread_stop(worker);
	worker = NULL;
}
