/* SPDX-License-Identifier: (GPL-2.0-only WITH Linux-syscall-note) OR Apache-2.0 */
/*
 * Prescient /dev/prescient ioctl ABI, for C clients.
 * The Rust definition (uapi/src/abi.rs) is the source; tests/header.rs checks
 * that this header has the same sizes, offsets and ioctl numbers.
 */
#ifndef PRESCIENT_UAPI_H
#define PRESCIENT_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PRESCIENT_ABI_VERSION 4
#define PRESCIENT_IOC_MAGIC 'P'
#define PRESCIENT_MAX_SPACES 8
#define PRESCIENT_MAX_INFLIGHT 1024
#define PRESCIENT_MAX_RANGE_LEN (1ull << 40)

#define PRESCIENT_MODE_TRANSPARENT 0u  /* unmodified jobs: one table learnt from faults */
#define PRESCIENT_MODE_EXEC_ID     1u  /* a runtime calls SET_EXEC_ID before each kernel */

#define PRESCIENT_VERSION_FLAG_BOUND   1u
#define PRESCIENT_VERSION_FLAG_ENABLED 2u
#define PRESCIENT_VERSION_FLAG_GPU_SIZE_KNOWN 4u  /* else: no prefetch, no pre-eviction */
#define PRESCIENT_VERSION_FLAG_DISCARD 8u         /* the driver branch has uvm_api_discard */

#define PRESCIENT_GPU_UNKNOWN  0u  /* no SET_GPU yet: no prefetch */
#define PRESCIENT_GPU_SET      1u
#define PRESCIENT_GPU_REJECTED 2u  /* the driver refused the UUID */

#define PRESCIENT_EXEC_PAGE_NONE 0u  /* no execution-id page registered */
#define PRESCIENT_EXEC_PAGE_SET  1u  /* SET_EXEC_PAGE: ids read at each fault */

struct prescient_version {
	__u32 abi_version;
	__u32 flags;            /* PRESCIENT_VERSION_FLAG_* */
	__u32 max_spaces;
	__u32 reserved0;
	__u64 driver_version;   /* major << 32 | minor << 16 | patch, 0 = not bound */
};

struct prescient_params {
	__u32 rows;             /* power of two */
	__u32 assoc;
	__u32 succs;
	__u32 lookahead;
	__u32 inflight_limit;   /* 1..PRESCIENT_MAX_INFLIGHT */
	__u32 pre_evict_watermark_pct; /* 1..100 */
	__u64 residency_budget_bytes;  /* multiple of 2 MiB, 0 = GPU size */
	__u32 enabled;          /* 0 or 1 */
	__u32 mode;             /* PRESCIENT_MODE_* */
	__u64 reserved1;        /* must be 0 */
};

struct prescient_space_stats {
	__u64 handle;           /* 0 = unused entry */
	__u64 pid;
	__u64 faults;
	__u64 prefetched;
	__u64 resident_blocks;
	__u64 pre_evictions;
	__u64 discards;
	__u64 migrate_errors;
	__u64 gpu;              /* PRESCIENT_GPU_*: the fallback destination */
	__u64 fault_gpus;       /* GPUs whose faults named them in this space */
	__u64 exec_page;        /* PRESCIENT_EXEC_PAGE_* */
	__u64 exec_ids;         /* ids read from the page */
	__u64 exec_faults;      /* faults the page attributed to an id */
	__u64 populated;        /* discarded blocks MARK_ALIVE brought back (ABI 4) */
};

struct prescient_stats_head {
	__u64 faults_seen;
	__u64 blocks_prefetched;
	__u64 prefetches_used;
	__u64 late_prefetches;
	__u64 pre_evictions;
	__u64 discards;
	__u64 table_bytes;
	__u64 queue_drops;
	__u64 inflight;
	__u64 migrate_errors;
	__u64 cpu_faults;       /* counted only */
	__u64 unattached_faults;
	__u64 populated;        /* discarded blocks MARK_ALIVE brought back (ABI 4) */
	__u32 n_spaces;
	__u32 exec_pages;       /* execution-id pages pinned now */
};

struct prescient_stats {
	struct prescient_stats_head head;
	struct prescient_space_stats spaces[PRESCIENT_MAX_SPACES];
};

#define PRESCIENT_TARGET_FD     0u  /* id = fd of /dev/nvidia-uvm in the caller */
#define PRESCIENT_TARGET_PID    1u  /* id = process id */
#define PRESCIENT_TARGET_HANDLE 2u  /* handle (DETACH only) */

struct prescient_target {
	__u32 kind;
	__u32 id;
	__u64 handle;           /* ATTACH: out (in: 0); DETACH: in for TARGET_HANDLE */
};

struct prescient_exec_id {
	__u64 handle;
	__u32 exec_id;
	__u32 reserved0;
};

struct prescient_range {
	__u64 handle;
	__u64 addr;             /* 4 KiB aligned */
	__u64 len;              /* 4 KiB multiple, > 0 */
	__u64 flags;            /* PRESCIENT_MARK_* (ABI 4), others refused */
};

/* MARK_ALIVE: alive, but do not populate what the module discarded (a revocation) */
#define PRESCIENT_MARK_NO_POPULATE 1ULL

/* SET_GPU: the driver's processor UUID of the GPU prefetches go to */
struct prescient_gpu {
	__u64 handle;
	__u64 uuid_lo;          /* UUID bytes 0-7, little-endian */
	__u64 uuid_hi;          /* UUID bytes 8-15 */
};

/* SET_EXEC_PAGE: the runtime's execution-id page (a memfd) of an attached space */
struct prescient_exec_page {
	__u64 handle;
	__u32 fd;               /* the caller's descriptor of the memfd */
	__u32 flags;            /* must be 0 */
};

/* CLEAR_EXEC_PAGE */
struct prescient_handle {
	__u64 handle;
};

#define PRESCIENT_IOC_GET_VERSION  _IOR(PRESCIENT_IOC_MAGIC, 0x00, struct prescient_version)
#define PRESCIENT_IOC_GET_PARAMS   _IOR(PRESCIENT_IOC_MAGIC, 0x01, struct prescient_params)
#define PRESCIENT_IOC_SET_PARAMS   _IOW(PRESCIENT_IOC_MAGIC, 0x02, struct prescient_params)
#define PRESCIENT_IOC_GET_STATS    _IOR(PRESCIENT_IOC_MAGIC, 0x03, struct prescient_stats)
#define PRESCIENT_IOC_RESET_TABLES _IO(PRESCIENT_IOC_MAGIC, 0x04)
#define PRESCIENT_IOC_ATTACH       _IOWR(PRESCIENT_IOC_MAGIC, 0x05, struct prescient_target)
#define PRESCIENT_IOC_DETACH       _IOW(PRESCIENT_IOC_MAGIC, 0x06, struct prescient_target)
#define PRESCIENT_IOC_SET_EXEC_ID  _IOW(PRESCIENT_IOC_MAGIC, 0x07, struct prescient_exec_id)
#define PRESCIENT_IOC_MARK_DEAD    _IOW(PRESCIENT_IOC_MAGIC, 0x08, struct prescient_range)
#define PRESCIENT_IOC_MARK_ALIVE   _IOW(PRESCIENT_IOC_MAGIC, 0x09, struct prescient_range)
#define PRESCIENT_IOC_SET_GPU      _IOW(PRESCIENT_IOC_MAGIC, 0x0a, struct prescient_gpu)
#define PRESCIENT_IOC_SET_EXEC_PAGE   _IOW(PRESCIENT_IOC_MAGIC, 0x0b, struct prescient_exec_page)
#define PRESCIENT_IOC_CLEAR_EXEC_PAGE _IOW(PRESCIENT_IOC_MAGIC, 0x0c, struct prescient_handle)

#endif /* PRESCIENT_UAPI_H */
