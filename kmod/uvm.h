/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What glue.c and a driver-branch file (uvm580.c: one file per nvidia-uvm
 * branch, with that branch's layouts) offer each other. The functions the
 * Rust side calls are in glue.h.
 */
#ifndef PRESCIENT_UVM_H
#define PRESCIENT_UVM_H
#include <linux/types.h>

/* glue.c: kallsyms_lookup_name, found through a kprobe (it is not exported). */
int prescient_kallsyms_init(void);
unsigned long prescient_kallsyms(const char *name);

/*
 * uvm580.c: resolve the bound driver's functions; *notify_addr gets the
 * address of uvm_perf_event_notify, which glue.c hooks. 0 or -errno.
 */
int uvm580_resolve(unsigned long *notify_addr);
/*
 * uvm580.c: one call of uvm_perf_event_notify(events, id, data), from the
 * kprobe (int3 context: no locks, no sleeping). Passes faults, and the
 * driver's own evictions when track_evictions is set, to the Rust side.
 */
void uvm580_perf_event(u64 events, u32 id, const void *data, bool track_evictions);
#endif
