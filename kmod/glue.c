// SPDX-License-Identifier: GPL-2.0
/*
 * prescient.ko, C side: only what the 6.12 `kernel` crate has no abstraction
 * for. The module parameters, kallsyms_lookup_name (the kprobe trick), the
 * kprobe on the driver's uvm_perf_event_notify(), the worker kthread and its
 * irq_work wake-up, the /dev/prescient misc device and its ioctl entry, and
 * struct file references. The driver's layouts and the calls into it are in
 * the driver file (uvm.c); all decisions and state live in Rust
 * (prescient_main.rs), which reaches this file through glue.rs.
 *
 * Locks owned here: none (the driver's own locks are taken inside the
 * uvm_api_* calls; see prescient_main.rs for the module's lock order).
 */
#include <linux/module.h>
#include <linux/kprobes.h>
#include <linux/ptrace.h>
#include <linux/miscdevice.h>
#include <linux/fs.h>
#include <linux/file.h>
#include <linux/kthread.h>
#include <linux/sched.h>
#include <linux/capability.h>
#include <linux/irq_work.h>
#include <linux/shmem_fs.h>
#include <linux/pagemap.h>
#include <linux/rcupdate.h>
#include <linux/delay.h>

#include "glue.h"
#include "uvm.h"

static unsigned int gpu_blocks;
module_param(gpu_blocks, uint, 0444);
MODULE_PARM_DESC(gpu_blocks,
		 "GPU memory in 2 MB blocks: the default residency budget (0 = unknown: no prefetch or pre-eviction until SET_PARAMS sets a residency budget)");
static char *gpu_uuid;
module_param(gpu_uuid, charp, 0444);
MODULE_PARM_DESC(gpu_uuid,
		 "prefetch destination for spaces no SET_GPU named: the GPU's UUID as nvidia-smi -L prints it (GPU-xxxxxxxx-xxxx-...), for one-GPU hosts; none by default (no prefetch without SET_GPU)");
static unsigned int max_table_mib = 256;
module_param(max_table_mib, uint, 0444);
MODULE_PARM_DESC(max_table_mib,
		 "most MiB of prediction tables of all attached spaces together (SET_PARAMS beyond it: EINVAL; ATTACH: ENOMEM)");
static unsigned int enable = 1;
module_param(enable, uint, 0444);
MODULE_PARM_DESC(enable, "prefetch and pre-evict from the start (0 = observe only)");
static unsigned int exec_poll_us = 50;
module_param(exec_poll_us, uint, 0444);
MODULE_PARM_DESC(exec_poll_us,
		 "while execution-id pages are written, the worker reads them every exec_poll_us..2*exec_poll_us microseconds (kernels that do not fault are seen only so; faults read them too); 0 = busy poll (a CPU while ids flow)");
static unsigned int track_evictions = 1;
module_param(track_evictions, uint, 0444);
MODULE_PARM_DESC(track_evictions,
		 "follow the driver's own evictions (MIGRATION events, cause EVICTION) in the residency ledger (0 = faults and own migrations only)");

/* ----- symbol lookup ----- */
typedef unsigned long (*kln_t)(const char *);
static kln_t kln;

int prescient_kallsyms_init(void)
{
	struct kprobe kp = { .symbol_name = "kallsyms_lookup_name" };
	int ret = register_kprobe(&kp);

	if (ret)
		return ret;
	kln = (kln_t)kp.addr;
	unregister_kprobe(&kp);
	return kln ? 0 : -ENOENT;
}

unsigned long prescient_kallsyms(const char *name)
{
	return kln(name);
}

/* ----- driver hook ----- */
static struct kprobe notify_kp;

/*
 * regs_get_kernel_argument is the architecture's own calling convention
 * (x86-64, arm64, ...): no register names here. An architecture without it
 * cannot build this file.
 */
#ifndef CONFIG_HAVE_REGS_AND_STACK_ACCESS_API
#error "prescient.ko needs regs_get_kernel_argument (CONFIG_HAVE_REGS_AND_STACK_ACCESS_API)"
#endif

static int notify_pre(struct kprobe *p, struct pt_regs *regs)
{
	/* uvm_perf_event_notify(events *, uvm_perf_event_t id, uvm_perf_event_data_t *data) */
	uvm_perf_event(regs_get_kernel_argument(regs, 0), (u32)regs_get_kernel_argument(regs, 1),
			  (const void *)regs_get_kernel_argument(regs, 2), track_evictions);
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

/*
 * Execution-id pages are being written: a kernel that does not fault is
 * seen only by polling its page. Polls without the state mutex (the pages
 * are read as the fault path reads them, inside an RCU read-side section)
 * until one finds a new id, a kick (a fault) comes, or 10 ms have passed;
 * then the worker takes a step. exec_poll_us = 0: no sleep between polls
 * (a busy poll, yielding to anyone runnable).
 */
static void poll_pages(void)
{
	unsigned int us = min(exec_poll_us, 100000u);
	unsigned long until = jiffies + max(HZ / 100, 1);
	bool found = false;

	while (!found && !kthread_should_stop() && !atomic_read(&kicked) &&
	       time_before(jiffies, until)) {
		if (us)
			usleep_range_state(us, 2 * us, TASK_INTERRUPTIBLE);
		else
			cond_resched();
		rcu_read_lock();
		found = prescient_rs_poll();
		rcu_read_unlock();
	}
}

static int worker_fn(void *unused)
{
	while (!kthread_should_stop()) {
		int r;

		atomic_set(&kicked, 0);
		r = prescient_rs_work();
		if (r == 1) {
			cond_resched();	/* a step holds the state mutex; let others in */
			continue;	/* more to do: faults or prefetches pending */
		}
		if (r == 2) {
			poll_pages();
			continue;
		}
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
unsigned int prescient_c_max_table_mib(void) { return max_table_mib; }

/*
 * The gpu_uuid parameter as 16 bytes: 0 if unset, 1 if set, -EINVAL (one
 * line logged) if it is not "GPU-" and 32 hex digits (dashes anywhere).
 */
int prescient_c_default_gpu(u8 *out)
{
	const char *p = gpu_uuid;
	char hex[33];
	int n = 0;

	if (!p || !*p)
		return 0;
	if (strncmp(p, "GPU-", 4) == 0)
		p += 4;
	for (; *p && n < 32; p++)
		if (*p != '-')
			hex[n++] = *p;
	hex[n] = 0;
	if (n != 32 || *p || hex2bin(out, hex, 16)) {
		pr_err("prescient: gpu_uuid '%s' is not GPU- and 32 hex digits: refusing to load\n",
		       gpu_uuid);
		return -EINVAL;
	}
	return 1;
}
void prescient_c_cond_resched(void) { cond_resched(); }
u64 prescient_c_jiffies(void) { return get_jiffies_64(); }
unsigned int prescient_c_hz(void) { return HZ; }
unsigned int prescient_c_enable(void) { return enable; }
int prescient_c_capable_admin(void) { return capable(CAP_SYS_ADMIN); }

void prescient_c_log_bad(unsigned int cmd, int err)
{
	pr_warn_ratelimited("prescient: ioctl %#x from pid %d rejected: %d\n", cmd,
			    task_tgid_nr(current), err);
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

/* ----- execution-id pages (SET_EXEC_PAGE) ----- */

/*
 * The first page of the memfd behind the caller's descriptor `fd`, held by a
 * folio reference (it cannot be freed, and reclaim and migration leave a
 * folio with an extra reference where it is), and its kernel address in
 * *words. The file itself is not kept: closing or truncating the memfd
 * leaves us reading a page nobody writes (stale ids, never freed memory).
 * EBADF: no such descriptor or not open for reading; EINVAL: not a shmem
 * (memfd or tmpfs) file, smaller than `bytes`, or in high memory.
 * The format (magic, slot count) is checked by the caller, in Rust.
 */
void *prescient_c_exec_page_get(int fd, u64 bytes, void **words, int *err)
{
	struct file *f = fget(fd);
	struct folio *folio;

	if (!f) {
		*err = -EBADF;
		return NULL;
	}
	if (!(f->f_mode & FMODE_READ)) {
		*err = -EBADF;
		goto out;
	}
	if (!shmem_file(f) || i_size_read(file_inode(f)) < bytes || bytes > PAGE_SIZE) {
		*err = -EINVAL;
		goto out;
	}
	folio = shmem_read_folio(f->f_mapping, 0);
	if (IS_ERR(folio)) {
		*err = PTR_ERR(folio);
		goto out;
	}
	if (folio_test_highmem(folio)) {
		folio_put(folio);
		*err = -EINVAL;
		goto out;
	}
	fput(f);
	*words = folio_address(folio);
	return folio;
out:
	fput(f);
	return NULL;
}

/*
 * Drops the reference of prescient_c_exec_page_get. The caller has
 * unpublished the page's address from the fault path first; the fault path
 * (a kprobe handler, preemption off: an RCU read-side section) may still be
 * reading it, so wait for every such reader before the page can go.
 */
void prescient_c_exec_page_put(void *folio)
{
	synchronize_rcu();
	folio_put(folio);
}

/*
 * After Rust accepted the version: resolve symbols for `branch`, start the
 * worker and the hook, and only then the device, so that no fd can be
 * opened on a module whose init may still fail (the loader frees a failed
 * module whatever fds exist).
 */
int prescient_c_start(int branch)
{
	unsigned long notify_addr;
	int ret;

	ret = uvm_resolve(branch, &notify_addr);
	if (ret)
		return ret;
	worker = kthread_run(worker_fn, NULL, "prescient");
	if (IS_ERR(worker)) {
		ret = PTR_ERR(worker);
		worker = NULL;
		return ret;
	}
	memset(&notify_kp, 0, sizeof(notify_kp));
	notify_kp.addr = (kprobe_opcode_t *)notify_addr;
	notify_kp.pre_handler = notify_pre;
	ret = register_kprobe(&notify_kp);
	if (ret) {
		pr_err("prescient: cannot hook uvm_perf_event_notify: %d\n", ret);
		goto stop;
	}
	ret = misc_register(&prescient_misc);
	if (ret) {
		pr_err("prescient: cannot register /dev/prescient: %d\n", ret);
		goto unhook;
	}
	return 0;
unhook:
	unregister_kprobe(&notify_kp);
stop:
	irq_work_sync(&kick_work);
	kthread_stop(worker);
	worker = NULL;
	return ret;
}

/* Undo prescient_c_start: no fault callback, ioctl or worker runs afterwards. */
void prescient_c_stop(void)
{
	misc_deregister(&prescient_misc);	/* no new open; open fds pin the module */
	unregister_kprobe(&notify_kp);	/* waits for running handlers */
	irq_work_sync(&kick_work);	/* no kick can run after this */
	if (worker)
		kthread_stop(worker);
	worker = NULL;
}
