/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The boundary between the C side (glue.c, uvm.c) and the Rust side:
 * the C functions Rust calls (mirrored, with safe wrappers, in glue.rs) and
 * the Rust functions C calls (`#[no_mangle]` in ring.rs, state.rs, ioctl.rs).
 */
#ifndef PRESCIENT_GLUE_H
#define PRESCIENT_GLUE_H
#include <linux/types.h>

/* Implemented in C. */
int prescient_c_find_driver(char *ver, int len);
void prescient_c_release_driver(void);
int prescient_c_start(int branch);
void prescient_c_stop(void);
void prescient_c_kick(void);
unsigned int prescient_c_gpu_blocks(void);
unsigned int prescient_c_max_table_mib(void);
int prescient_c_default_gpu(u8 *out);
void prescient_c_cond_resched(void);
u64 prescient_c_jiffies(void);
unsigned int prescient_c_hz(void);
int prescient_c_has_discard(void);
u64 prescient_c_cpu_faults(void);
unsigned int prescient_c_enable(void);
int prescient_c_capable_admin(void);
void prescient_c_log_bad(unsigned int cmd, int err);
void *prescient_c_file_from_fd(int fd, u64 *va_space, int *err);
void *prescient_c_file_from_pid(int pid, u64 *va_space, void **owner, int *err);
void *prescient_c_pid_current(void);
void *prescient_c_pid_find(int nr);
int prescient_c_pid_is_current(void *p);
int prescient_c_pid_vnr(void *p);
int prescient_c_pid_nr(void *p);
u32 prescient_c_pid_uid(void *p);
void prescient_c_pid_put(void *p);
void prescient_c_file_put(void *f);
int prescient_c_file_orphaned(void *f);
u32 prescient_c_migrate(void *f, u64 base, u64 len, const u8 *gpu_uuid);
u32 prescient_c_discard(void *f, u64 base, u64 len);
void *prescient_c_exec_page_get(int fd, u64 bytes, void **words, int *err);
void prescient_c_exec_page_put(void *folio);

/* Implemented in Rust. */
void prescient_rs_fault(u64 va_space, u64 events, u64 block_start, u32 proc_id,
			const u8 *gpu_uuid);
void prescient_rs_evicted(u64 events, u64 block_start);
long prescient_rs_ioctl(unsigned int cmd, unsigned long arg);
int prescient_rs_work(void);
bool prescient_rs_poll(void);
#endif
