// SPDX-License-Identifier: GPL-2.0
/*
 * prescient.ko, the nvidia-uvm side: binding to the module, the branch's
 * layout (struct uvm_layout from the generated kmod/layout/uvm<branch>.h,
 * chosen at bind), decoding its perf events, recognising its VA-space files,
 * and the calls into it (uvm_api_migrate, uvm_api_discard where the branch
 * has it). No offset of the driver's is written in this file.
 * The stand-in (vm-tests/stand-in/nvidia_uvm.c) declares the driver's
 * structs from the same headers and checks them with BUILD_BUG_ON.
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
#include <linux/ptrace.h>
#include <linux/cred.h>
#include <linux/namei.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "glue.h"
#include "uvm.h"

/* NV_STATUS values (nvstatuscodes.h) */
#define NV_OK 0
#define NV_ERR_INVALID_STATE 0x40
#define NV_ERR_NO_MEMORY 0x51
#define NV_ERR_NOT_SUPPORTED 0x56
/* UVM_MIGRATE_PARAMS.cpuNumaNode: no preferred node */
#define UVM_NUMA_NODE_ANY ((u32)-1)
/* The largest params and thread-context buffer a layout may ask for. */
#define UVM_PARAMS_MAX 128
#define UVM_CTX_MAX 256

/* uvm_va_block_t begins: kref, lock (struct mutex of THIS kernel), range*, start, end */
struct uvm_va_block_head {
	struct kref kref;
	struct mutex lock;
	void *managed_range;
	u64 start;
	u64 end;
};

/* The CPU's UUID in UVM_MIGRATE_PARAMS.destinationUuid (NV_PROCESSOR_UUID_CPU_DEFAULT). */
static const u8 uuid_cpu[16] = { 0xa6, 0x5e, 0x0f, 0x4e, 0xd7, 0xd4, 0x7b, 0xa2,
				 0x50, 0x47, 0x41, 0x2c, 0x14, 0x2a, 0x77, 0x73 };

/* Set once at bind, before the kprobe exists; read-only afterwards. */
static const struct uvm_layout *L;
static u32 (*p_migrate)(void *params, struct file *);
static u32 (*p_discard)(void *params, struct file *);
static bool (*p_ctx_add)(void *ctx);
static void (*p_ctx_remove)(void *ctx);
static struct module *uvm_mod;
/* ptrace_may_access is not exported: found by name at bind. */
static bool (*p_ptrace_may_access)(struct task_struct *, unsigned int);
static dev_t uvm_rdev;
/* CPU faults seen (counted, never decoded: cpu.fault_va is a user address). */
static atomic64_t cpu_faults = ATOMIC64_INIT(0);

/* ----- binding ----- */

/* Address of nvidia_uvm's `name`, or 0 if absent or not inside that module. */
static unsigned long uvm_sym(const char *name, bool required)
{
	char full[96];
	unsigned long a;

	snprintf(full, sizeof(full), "nvidia_uvm:%s", name);
	a = prescient_kallsyms(full);
	if (!a || !within_module(a, uvm_mod)) {
		if (required)
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

int uvm_resolve(int branch, unsigned long *notify_addr)
{
	const struct uvm_layout *l = branch == 580 ? &uvm_layout_580 :
				     branch == 550 ? &uvm_layout_550 : NULL;

	if (!l)
		return -EINVAL;
	if (l->migrate_size > UVM_PARAMS_MAX || l->discard_size > UVM_PARAMS_MAX ||
	    l->ctx_size > UVM_CTX_MAX || l->ctx_wrapper_size > UVM_CTX_MAX)
		return -EINVAL;
	p_migrate = (void *)uvm_sym("uvm_api_migrate", true);
	p_discard = l->has_discard ? (void *)uvm_sym("uvm_api_discard", true) : NULL;
	p_ctx_add = (void *)uvm_sym("uvm_thread_context_add", true);
	p_ctx_remove = (void *)uvm_sym("uvm_thread_context_remove", true);
	*notify_addr = uvm_sym("uvm_perf_event_notify", true);
	p_ptrace_may_access = (void *)prescient_kallsyms("ptrace_may_access");
	if (!p_ptrace_may_access) {
		pr_err("prescient: kernel symbol ptrace_may_access not found: refusing to bind\n");
		return -ENOENT;
	}
	if (!p_migrate || (l->has_discard && !p_discard) || !p_ctx_add || !p_ctx_remove ||
	    !*notify_addr)
		return -ENOENT;
	if (!l->has_discard)
		pr_info("prescient: nvidia-uvm branch %d has no uvm_api_discard: dead blocks are migrated to the CPU, not discarded\n",
			l->branch);
	L = l;
	return 0;
}

int prescient_c_has_discard(void)
{
	return L && L->has_discard;
}

u64 prescient_c_cpu_faults(void)
{
	return atomic64_read(&cpu_faults);
}

/* ----- perf events ----- */

static u32 rd32(const u8 *d, int off)
{
	return *(const u32 *)(d + off);
}

static const void *rdptr(const u8 *d, int off)
{
	return *(const void *const *)(d + off);
}

/*
 * The UUID of GPU `proc`, the processor of a GPU fault in `va_space`, into
 * uuid[16], through what the driver holds for that space: `proc` must be in
 * the space's registered-GPU mask, and its uvm_gpu_t comes from the space's
 * own table (550: registered_gpus_table) or is the fault entry's GPU (580:
 * entry->gpu, the GPU whose fault buffer the entry came from), checked to
 * carry that id. We run under the driver's fault-servicing locks (va_space
 * lock, the GPU retained), so these do not change under us; every read is
 * nofault, so a layout that does not match costs an unattributed fault, not
 * an oops. False when any of it cannot be read or does not agree.
 */
static bool fault_gpu_uuid(const struct uvm_layout *l, u64 va_space, const u8 *entry, u32 proc,
			   u8 *uuid)
{
	const u8 *vs = (const u8 *)(unsigned long)va_space;
	const u8 *gpu = NULL;
	unsigned long word;
	u32 id;

	if (l->gpu_uuid < 0 || l->gpu_id < 0 || l->va_space_registered_gpus < 0 ||
	    proc == l->id_cpu || proc < l->id_gpu0 || proc >= l->id_max_processors ||
	    (unsigned long)vs < TASK_SIZE_MAX)
		return false;
	if (get_kernel_nofault(word, (const unsigned long *)(vs + l->va_space_registered_gpus) +
					     proc / BITS_PER_LONG) ||
	    !(word & BIT(proc % BITS_PER_LONG)))
		return false;
	if (l->va_space_registered_gpus_table >= 0) {
		if (get_kernel_nofault(gpu, (const u8 *const *)(vs + l->va_space_registered_gpus_table) +
						    (proc - l->id_gpu0)))
			return false;
	} else if (l->entry_gpu >= 0) {
		if (get_kernel_nofault(gpu, (const u8 *const *)(entry + l->entry_gpu)))
			return false;
	}
	if (!gpu || (unsigned long)gpu < TASK_SIZE_MAX ||
	    get_kernel_nofault(id, (const u32 *)(gpu + l->gpu_id)) || id != proc)
		return false;
	return !copy_from_kernel_nofault(uuid, gpu + l->gpu_uuid, 16);
}

/*
 * The event data is the driver's own kernel struct (on its stack); what it
 * points to is read with get_kernel_nofault, so a layout that does not match
 * the driver costs a wrong number, not an oops.
 */
void uvm_perf_event(u64 events, u32 id, const void *data, bool track_evictions)
{
	const struct uvm_layout *l = READ_ONCE(L);
	const u8 *d = data;
	const struct uvm_va_block_head *blk;
	const u8 *entry;
	u64 start, va_space;
	u8 uuid[16];
	u32 proc;

	if (!d || !l)
		return;
	if (id == l->ev_migration) {
		/*
		 * The driver evicted a block to make room (on the fault path or
		 * inside a migration): Prescient's ledger must drop it. Other
		 * migrations are Prescient's own or follow a fault it sees.
		 */
		if (!track_evictions || rd32(d, l->migration_cause) != l->cause_eviction ||
		    rd32(d, l->migration_dst) != l->id_cpu)
			return;
		blk = rdptr(d, l->migration_block);
		if (blk && !get_kernel_nofault(start, &blk->start))
			prescient_rs_evicted(events, start);
		return;
	}
	if (id != l->ev_fault)
		return;
	/*
	 * A CPU fault carries cpu.fault_va, a USER address, where a GPU fault
	 * has gpu.buffer_entry: never follow it. CPU faults are counted only:
	 * the engine predicts the GPU's faults.
	 */
	if (rd32(d, l->fault_proc_id) == l->id_cpu) {
		atomic64_inc(&cpu_faults);
		return;
	}
	blk = rdptr(d, l->fault_block);
	entry = rdptr(d, l->fault_gpu_buffer_entry);
	if (!blk || !entry || (unsigned long)entry < TASK_SIZE_MAX)
		return;
	if (get_kernel_nofault(va_space, (const u64 *)(entry + l->entry_va_space)) ||
	    get_kernel_nofault(start, &blk->start))
		return;
	proc = rd32(d, l->fault_proc_id);
	prescient_rs_fault(va_space, events, start, proc,
			   fault_gpu_uuid(l, va_space, entry, proc, uuid) ? uuid : NULL);
}

/* ----- VA-space files ----- */

static bool is_uvm_va_space_file(struct file *f)
{
	struct inode *ino = file_inode(f);

	return S_ISCHR(ino->i_mode) && ino->i_rdev == uvm_rdev &&
	       ((unsigned long)READ_ONCE(f->private_data) & L->fd_type_mask) == L->fd_va_space;
}

/* A VA-space file of /dev/nvidia-uvm, referenced; *va_space set. */
static void *take(struct file *f, u64 *va_space)
{
	*va_space = (unsigned long)READ_ONCE(f->private_data) & ~(unsigned long)L->fd_type_mask;
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

/* The thread group of process `nr` in the CALLER's pid namespace, referenced. */
static struct task_struct *task_of_vpid(int nr)
{
	struct task_struct *t;
	struct pid *ps = find_get_pid(nr);

	t = get_pid_task(ps, PIDTYPE_TGID);
	put_pid(ps);
	return t;
}

/*
 * The VA-space file of process `pid` (the caller's pid namespace), and its
 * owner (*owner: a struct pid reference on the thread group). ESRCH: no such
 * process; EPERM: the caller may not ptrace-attach to it; ENOENT: none open.
 */
void *prescient_c_file_from_pid(int pid, u64 *va_space, void **owner, int *err)
{
	struct task_struct *t = task_of_vpid(pid);
	struct file *f = NULL;

	if (!t) {
		*err = -ESRCH;
		return NULL;
	}
	if (!p_ptrace_may_access(t, PTRACE_MODE_ATTACH_REALCREDS)) {
		put_task_struct(t);
		*err = -EPERM;
		return NULL;
	}
	task_lock(t);
	if (t->files)
		iterate_fd(t->files, 0, match_uvm, &f);
	task_unlock(t);
	*owner = get_pid(task_tgid(t));
	put_task_struct(t);
	if (!f) {
		put_pid(*owner);
		*owner = NULL;
		*err = -ENOENT;
		return NULL;
	}
	return take(f, va_space);
}

/* ----- process identities (struct pid: survives pid-number reuse) ----- */

void *prescient_c_pid_current(void)
{
	return get_pid(task_tgid(current));
}

/* The thread group of process `nr` in the caller's namespace; NULL if none. */
void *prescient_c_pid_find(int nr)
{
	struct task_struct *t = task_of_vpid(nr);
	struct pid *p;

	if (!t)
		return NULL;
	p = get_pid(task_tgid(t));
	put_task_struct(t);
	return p;
}

int prescient_c_pid_is_current(void *p)
{
	return task_tgid(current) == p;
}

/* The number of `p` in the caller's pid namespace (0: not visible there). */
int prescient_c_pid_vnr(void *p)
{
	return pid_vnr(p);
}

/* The number of `p` in the initial namespace (log lines). */
int prescient_c_pid_nr(void *p)
{
	return pid_nr(p);
}

/* The real uid of the thread group `p` (-1 if it has exited). */
u32 prescient_c_pid_uid(void *p)
{
	struct task_struct *t = get_pid_task(p, PIDTYPE_TGID);
	u32 uid;

	if (!t)
		return (u32)-1;
	uid = from_kuid(&init_user_ns, task_uid(t));
	put_task_struct(t);
	return uid;
}

void prescient_c_pid_put(void *p)
{
	put_pid(p);
}

/* ----- calls into the driver ----- */

/*
 * Runs `call(params, f)` inside a thread context, as the ioctl path sets one
 * up. The context is allocated at the WRAPPER's size, zeroed: a debug driver
 * or one loaded with uvm_enable_builtin_tests=1 treats it as
 * uvm_thread_context_wrapper_t and writes past the plain context.
 */
static u32 call_in_context(u32 (*call)(void *, struct file *), void *params, struct file *f)
{
	void *ctx = kzalloc(max(L->ctx_size, L->ctx_wrapper_size), GFP_KERNEL);
	u32 st;

	if (!ctx)
		return NV_ERR_NO_MEMORY;
	if (!p_ctx_add(ctx)) {
		kfree(ctx);
		return NV_ERR_INVALID_STATE;
	}
	st = call(params, f);
	p_ctx_remove(ctx);
	kfree(ctx);
	return st;
}

static void put64(u8 *p, int off, u64 v) { memcpy(p + off, &v, 8); }
static void put32(u8 *p, int off, u32 v) { memcpy(p + off, &v, 4); }
static u32 get32(const u8 *p, int off) { u32 v; memcpy(&v, p + off, 4); return v; }

/*
 * Migrate [base, base+len) of the file's va_space to the GPU whose UUID is
 * `gpu_uuid` (16 bytes), or to the CPU when it is NULL.
 */
u32 prescient_c_migrate(void *f, u64 base, u64 len, const u8 *gpu_uuid)
{
	u8 p[UVM_PARAMS_MAX] = { 0 };
	u32 st;

	put64(p, L->migrate_base, base);
	put64(p, L->migrate_length, len);
	memcpy(p + L->migrate_uuid, gpu_uuid ? gpu_uuid : uuid_cpu, 16);
	put32(p, L->migrate_flags, L->migrate_flag_async);
	put32(p, L->migrate_numa, UVM_NUMA_NODE_ANY);
	st = call_in_context(p_migrate, p, f);
	return st != NV_OK ? st : get32(p, L->migrate_status);
}

/*
 * UVM_DISCARD_FLAGS_UNMAP (uvm_types.h). Without it the pages stay mapped,
 * and uvm.h says reads and writes of them are then undefined and never
 * clear the discard status: a block the process reuses after the discard
 * keeps its new data in "discarded" pages, which an eviction (ours or the
 * driver's, which takes discarded pages first) does not copy. With it, the
 * first write faults and clears the status.
 */
#define PRESCIENT_DISCARD_FLAGS_UNMAP 1ULL

/* Discard [base, base+len); NV_ERR_NOT_SUPPORTED where the branch cannot. */
u32 prescient_c_discard(void *f, u64 base, u64 len)
{
	u8 p[UVM_PARAMS_MAX] = { 0 };
	u32 st;

	if (!p_discard)
		return NV_ERR_NOT_SUPPORTED;
	put64(p, L->discard_base, base);
	put64(p, L->discard_length, len);
	put64(p, L->discard_flags, PRESCIENT_DISCARD_FLAGS_UNMAP);
	st = call_in_context(p_discard, p, f);
	return st != NV_OK ? st : get32(p, L->discard_status);
}
