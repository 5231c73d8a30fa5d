/* A stand-in libcuda.so.1 for prescient-runtime's tests. Its behaviour
 * follows the CUDA driver API as cuda.h (CUDA 13.0) and the driver API
 * reference describe it, not the runtime under test:
 * - cuGetProcAddress[_v2] map a base name, a CUDA version and the
 *   per-thread flag to the entry point whose ABI began at the highest
 *   version not above the one asked for (cuda.h's `#define cuMemAlloc
 *   cuMemAlloc_v2` from 3020 on, `__CUDA_API_PTSZ` variants); unknown
 *   names give CUDA_ERROR_NOT_FOUND with CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
 *   too old a version CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT.
 * - work on a stream runs at once (a trivially stream-ordered device);
 *   under stream capture it is recorded instead of run.
 * - stream memops accept only registered host memory mapped for the
 *   device, never managed memory ("None of the operations accepts pointers
 *   to managed memory").
 * - cuMemPrefetchAsync (the _v2 ABI from 12.2, a CUmemLocation by value,
 *   flags 0) accepts only managed ranges.
 * - a CUkernel (what CUDA 12+'s runtime launches, cast to a CUfunction)
 *   is refused by cuFuncGetParamInfo with CUDA_ERROR_INVALID_HANDLE at
 *   its first parameter and answered by cuKernelGetParamInfo: measured on
 *   driver 580.159.04 for every kernel of FDTD-2D, dnn and a PyTorch
 *   transformer (BENCHMARKS-gpu.md run 66). cuKernelGetParamInfo on a
 *   CUfunction was not measured; here it refuses the handle the same way.
 * The fake_* functions let the tests look inside. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define OK 0
#define INVALID_VALUE 1
#define INVALID_HANDLE 400
#define NOT_FOUND 500
#define ALREADY_REGISTERED 712
#define PER_THREAD 2

static int capturing;
static long seq;
static struct { void *stream; int ptsz; long seq; uint64_t value; } last_write;
static long launches, launches_after_write, captured_writes;
static struct { char *p; size_t n; unsigned flags; } reg[8];
static int nreg;
static struct { CUdeviceptr p; size_t n; int managed; } allocs[256];
static int nallocs;

struct fake_fn { const char *name; int nparams; size_t sizes[4]; int kernel; };
/* k2, k3: the parameter sizes of two PyTorch kernels, as
 * cuFuncGetParamInfo reports them (ATen/native/cuda/CUDALoops.cuh,
 * MultiTensorApply.cuh):
 * - vectorized_elementwise_kernel<4, CUDAFunctor_add<float>,
 *   at::detail::Array<char*, 3>>(int N, func_t f, array_t data): 4, 4 (the
 *   functor's float alpha), 24 (three tensor addresses);
 * - multi_tensor_apply_kernel<TensorListMetadata<2>, BinaryOpListAlphaFunctor,
 *   std::plus, float>(T tl, U callable, ArgTypes... args): 3144 (const void*
 *   addresses[2][64], int64_t numel_for_tensor[64], unsigned char
 *   block_to_tensor[320], int block_to_chunk[320], int
 *   start_tensor_this_launch; 3140 bytes, 8-aligned), 1, 1, 4. */
/* k4: a CUkernel taking a pointer and a 64-bit scalar (a random-number
 * offset, or a time step, that changes on every launch). */
static struct fake_fn fns[5] = {{"k0", 2, {8, 4}, 0}, {"k1", 1, {16}, 0},
    {"vectorized_elementwise_kernel", 3, {4, 4, 24}, 0},
    {"multi_tensor_apply_kernel", 4, {3144, 1, 1, 4}, 0},
    {"k4", 2, {8, 8}, 1}};

void *fake_function(int k) { return &fns[k]; }
void fake_set_capturing(int on) { capturing = on; }
long fake_launches(void) { return launches; }
long fake_launches_after_write(void) { return launches_after_write; }
long fake_captured_writes(void) { return captured_writes; }
int fake_next_symbol(void) { return 2; }

int fake_is_managed(CUdeviceptr p) {
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].p == p) return allocs[i].managed;
    return -1;
}

static CUresult record_alloc(CUdeviceptr *d, size_t n, int managed) {
    if (!d || n == 0 || nallocs == 256) return INVALID_VALUE;
    void *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (!p) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *d = (CUdeviceptr)(uintptr_t)p;
    allocs[nallocs].p = *d; allocs[nallocs].n = n; allocs[nallocs].managed = managed; nallocs++;
    return OK;
}

CUresult cuInit(unsigned flags) { return flags == 0 ? OK : INVALID_VALUE; }
/* Devices: FAKE_DEVICES of them, as cuDeviceGetCount says. The calling
 * thread's current context is device 0's until fake_set_current(d), the
 * stand-in for cuCtxSetCurrent with device d's primary context (-1: no
 * current context). cuMemGetInfo answers for the current context's device
 * (driver API reference: "the free and total amount of memory available
 * for allocation by the CUDA context"): device 0 has 80 GiB (70 free),
 * device 1 40 GiB (30 free); with no current context it is
 * CUDA_ERROR_INVALID_CONTEXT, as is cuCtxGetDevice. cuDeviceGetUuid[_v2]
 * write the device's 16 bytes (fa 4e 00 .. 00 d+1); an ordinal out of
 * range is CUDA_ERROR_INVALID_DEVICE. */
#define FAKE_DEVICES 2
#define INVALID_DEVICE 101
#define INVALID_CONTEXT 201
static __thread int current_dev = -1;
void fake_set_current(int d) { current_dev = d; }
/* The loading (main) thread starts with device 0's context current, as a
 * CUDA program's has once it used the device; a thread it starts has none
 * until cuCtxSetCurrent (the driver API: "the calling CPU thread's current
 * context"). */
__attribute__((constructor)) static void main_thread_current(void) { current_dev = 0; }
typedef struct { char bytes[16]; } CUuuid;
static CUresult device_uuid(CUuuid *u, int dev) {
    if (!u) return INVALID_VALUE;
    if (dev < 0 || dev >= FAKE_DEVICES) return INVALID_DEVICE;
    memset(u->bytes, 0, 16);
    u->bytes[0] = (char)0xfa; u->bytes[1] = 0x4e; u->bytes[15] = (char)(dev + 1);
    return OK;
}
CUresult cuDeviceGetUuid(CUuuid *u, int dev) { return device_uuid(u, dev); }
CUresult cuDeviceGetUuid_v2(CUuuid *u, int dev) { return device_uuid(u, dev); }
CUresult cuDeviceGetCount(int *n) { if (!n) return INVALID_VALUE; *n = FAKE_DEVICES; return OK; }
CUresult cuFakeNewerEntry(void) { return OK; }
CUresult cuMemAlloc(unsigned *d, unsigned n) { (void)d; (void)n; return INVALID_VALUE; /* 32-bit ABI: never used */ }
CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) { return record_alloc(d, n, 0); }
CUresult cuMemAllocManaged(CUdeviceptr *d, size_t n, unsigned flags) {
    if (flags != 1 && flags != 2) return INVALID_VALUE; /* CU_MEM_ATTACH_GLOBAL or _HOST */
    return record_alloc(d, n, 1);
}
CUresult cuMemAllocPitch_v2(CUdeviceptr *d, size_t *pitch, size_t w, size_t h, unsigned e) {
    if (e != 4 && e != 8 && e != 16) return INVALID_VALUE;
    *pitch = (w + 511) / 512 * 512;
    return record_alloc(d, *pitch * h, 0);
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].p == p) { free((void *)(uintptr_t)p); allocs[i] = allocs[--nallocs]; return OK; }
    return INVALID_VALUE;
}
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    if (!free_b || !total) return INVALID_VALUE;
    if (current_dev < 0) return INVALID_CONTEXT;
    size_t gib = current_dev == 0 ? 80 : 40;
    *free_b = (gib - 10) << 30; *total = gib << 30; return OK;
}
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
    for (int i = 0; i < nreg; i++) if (reg[i].p == p) return ALREADY_REGISTERED;
    if (!p || n == 0 || nreg == 8) return INVALID_VALUE;
    reg[nreg].p = p; reg[nreg].n = n; reg[nreg].flags = flags; nreg++;
    return OK;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
    if (flags != 0) return INVALID_VALUE;
    for (int i = 0; i < nreg; i++)
        if ((char *)p >= reg[i].p && (char *)p < reg[i].p + reg[i].n && (reg[i].flags & 2)) {
            *d = (CUdeviceptr)(uintptr_t)p; /* unified addressing: same address */
            return OK;
        }
    return INVALID_VALUE;
}
/* CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER (1): "This flag is not
 * supported in the v2 API" (cuda.h), so the _v2 entry points refuse it. */
static long refused_flags;
long fake_refused_write_flags(void) { return refused_flags; }
static CUresult write64(void *stream, CUdeviceptr addr, uint64_t v, unsigned flags, int ptsz, int v2) {
    if (flags != 0 && flags != 1) return INVALID_VALUE;
    if (v2 && flags != 0) { refused_flags++; return INVALID_VALUE; }
    if (addr % 8) return INVALID_VALUE;
    if (fake_is_managed(addr) == 1) return INVALID_VALUE;
    int ok = 0;
    for (int i = 0; i < nreg; i++)
        if ((char *)(uintptr_t)addr >= reg[i].p && (char *)(uintptr_t)addr + 8 <= reg[i].p + reg[i].n) ok = 1;
    if (!ok) return INVALID_VALUE;
    if (capturing) { captured_writes++; return OK; }
    __atomic_store_n((uint64_t *)(uintptr_t)addr, v, __ATOMIC_RELEASE);
    last_write.stream = stream; last_write.ptsz = ptsz; last_write.seq = ++seq; last_write.value = v;
    return OK;
}
CUresult cuStreamWriteValue64_v2(void *s, CUdeviceptr a, uint64_t v, unsigned f) { return write64(s, a, v, f, 0, 1); }
CUresult cuStreamWriteValue64_v2_ptsz(void *s, CUdeviceptr a, uint64_t v, unsigned f) { return write64(s, a, v, f, 1, 1); }
CUresult cuStreamWriteValue64(void *s, CUdeviceptr a, uint64_t v, unsigned f) { return write64(s, a, v, f, 0, 0); }
CUresult cuStreamWriteValue64_ptsz(void *s, CUdeviceptr a, uint64_t v, unsigned f) { return write64(s, a, v, f, 1, 0); }
CUresult cuStreamIsCapturing(void *s, int *st) { (void)s; *st = capturing; return OK; }
CUresult cuStreamIsCapturing_ptsz(void *s, int *st) { (void)s; *st = capturing; return OK; }
static CUresult param_info(struct fake_fn *fn, size_t i, size_t *off, size_t *size) {
    if (!fn || (int)i >= fn->nparams) return INVALID_VALUE;
    size_t o = 0;
    for (size_t k = 0; k < i; k++) o += fn->sizes[k];
    *off = o; *size = fn->sizes[i];
    return OK;
}
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) {
    struct fake_fn *fn = f;
    if (fn && fn->kernel) return INVALID_HANDLE;
    return param_info(fn, i, off, size);
}
CUresult cuKernelGetParamInfo(void *k, size_t i, size_t *off, size_t *size) {
    struct fake_fn *fn = k;
    if (fn && !fn->kernel) return INVALID_HANDLE;
    return param_info(fn, i, off, size);
}
static CUresult launch(void *stream, int ptsz) {
    if (capturing) return OK;
    launches++;
    /* the write just before this launch, on the same stream and flavour */
    if (last_write.seq == seq && last_write.stream == stream && last_write.ptsz == ptsz) launches_after_write++;
    seq++;
    return OK;
}
#define LK_ARGS void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sm, void *s
CUresult cuLaunchKernel(LK_ARGS, void **p, void **e) { (void)f;(void)gx;(void)gy;(void)gz;(void)bx;(void)by;(void)bz;(void)sm;(void)p;(void)e; return launch(s, 0); }
CUresult cuLaunchKernel_ptsz(LK_ARGS, void **p, void **e) { (void)f;(void)gx;(void)gy;(void)gz;(void)bx;(void)by;(void)bz;(void)sm;(void)p;(void)e; return launch(s, 1); }
CUresult cuLaunchCooperativeKernel(LK_ARGS, void **p) { (void)f;(void)gx;(void)gy;(void)gz;(void)bx;(void)by;(void)bz;(void)sm;(void)p; return launch(s, 0); }
CUresult cuLaunchCooperativeKernel_ptsz(LK_ARGS, void **p) { (void)f;(void)gx;(void)gy;(void)gz;(void)bx;(void)by;(void)bz;(void)sm;(void)p; return launch(s, 1); }
typedef struct { unsigned g[3], b[3], sm; void *stream; void *attrs; unsigned nattrs; } CUlaunchConfig;
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, void *f, void **p, void **e) { (void)f;(void)p;(void)e; return launch(c->stream, 0); }
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, void *f, void **p, void **e) { (void)f;(void)p;(void)e; return launch(c->stream, 1); }
CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, void *s) { (void)s; return record_alloc(d, n, 0); }

/* Prefetches: only of managed ranges; the _v2 ABI takes a CUmemLocation
 * ({type, id}, CU_MEM_LOCATION_TYPE_DEVICE = 1) by value and flags 0. */
typedef struct { int type; int id; } CUmemLocation;
static struct { long n; CUdeviceptr p; size_t bytes; int type, id; void *stream; } prefetched;
long fake_prefetches(void) { return prefetched.n; }
CUdeviceptr fake_prefetch_addr(void) { return prefetched.p; }
size_t fake_prefetch_bytes(void) { return prefetched.bytes; }
int fake_prefetch_device(void) { return prefetched.type == 1 ? prefetched.id : -1; }
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, int device, void *st) {
    (void)p; (void)n; (void)device; (void)st; return INVALID_VALUE; /* the 8.0 ABI: never used here */
}
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, void *st) {
    if (flags != 0 || fake_is_managed(p) != 1) return INVALID_VALUE;
    if (loc.type == 1 && loc.id != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE: one device */
    if (capturing) return 901; /* CUDA_ERROR_STREAM_CAPTURE_IMPLICIT */
    prefetched.n++; prefetched.p = p; prefetched.bytes = n; prefetched.type = loc.type; prefetched.id = loc.id;
    prefetched.stream = st;
    return OK;
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, void *s) { (void)s; return record_alloc(d, n, 0); }

/* Advice: cuMemAdvise (the 8.0 ABI, a CUdevice, CU_DEVICE_CPU = -1) and
 * cuMemAdvise_v2 (12.2 on, a CUmemLocation by value: CU_MEM_LOCATION_TYPE_DEVICE
 * = 1, _HOST = 2, _HOST_NUMA = 3, _HOST_NUMA_CURRENT = 4). Both take only
 * ranges inside one managed allocation (the driver also takes pageable
 * host memory where the system has HMM; this stand-in has none) and the
 * advice values 1-6 (CU_MEM_ADVISE_SET_READ_MOSTLY .. _UNSET_ACCESSED_BY). */
static long advised;
long fake_advised(void) { return advised; }
static int in_managed(CUdeviceptr p, size_t n) {
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].managed == 1 && p >= allocs[i].p && p + n <= allocs[i].p + allocs[i].n) return 1;
    return 0;
}
CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, int device) {
    if (!in_managed(p, n) || advice < 1 || advice > 6 || (device != -1 && device != 0)) return INVALID_VALUE;
    advised++;
    return OK;
}
CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
    if (!in_managed(p, n) || advice < 1 || advice > 6 || loc.type < 1 || loc.type > 4) return INVALID_VALUE;
    if (loc.type == 1 && loc.id != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE: one device */
    advised++;
    return OK;
}

/* name, ABI start version, per-thread variant?, entry point */
/* Events: work runs at once here, so a recorded event has completed.
 * cuCtxGetDevice's ABI changed in CUDA 13.0 (cuCtxGetDevice_v2 takes the
 * context as a second parameter): the 13.0 entry point reads a context the
 * caller must pass; this one answers device 7 for any non-null one, so a
 * caller that asks at 13.0 and passes one argument sees the wrong device. */
static long events_recorded;
static __thread int capture_mode; /* per thread, as the driver keeps it */
long fake_events_recorded(void) { return events_recorded; }
CUresult cuEventCreate(void **e, unsigned flags) { static long n; (void)flags; *e = (void *)(++n); return OK; }
CUresult cuEventRecord(void *e, void *s) { (void)e; (void)s; events_recorded++; return OK; }
/* Every call below needs a current context, as the driver API's calls do;
 * contexts are device d's primary context, handle d + 1. */
CUresult cuEventQuery(void *e) { (void)e; return current_dev < 0 ? INVALID_CONTEXT : OK; }
CUresult cuCtxGetCurrent(void **c) {
    if (!c) return INVALID_VALUE;
    *c = current_dev < 0 ? NULL : (void *)(uintptr_t)(current_dev + 1);
    return OK;
}
CUresult cuCtxSetCurrent(void *c) { current_dev = c ? (int)(uintptr_t)c - 1 : -1; return OK; }
CUresult cuEventDestroy_v2(void *e) { (void)e; return OK; }
CUresult cuThreadExchangeStreamCaptureMode(int *m) { int t = capture_mode; capture_mode = *m; *m = t; return OK; }
CUresult cuCtxGetDevice(int *d) {
    if (!d) return INVALID_VALUE;
    if (current_dev < 0) return INVALID_CONTEXT;
    *d = current_dev; return OK;
}
CUresult cuCtxGetDevice_v2(int *d, void *ctx) { *d = ctx ? 7 : current_dev; return OK; }

static const struct { const char *name; int version; int ptsz; void *fn; } table[] = {
    {"cuInit", 2000, 0, cuInit},
    {"cuDeviceGetCount", 2000, 0, cuDeviceGetCount},
    {"cuDeviceGetUuid", 9020, 0, cuDeviceGetUuid},
    {"cuDeviceGetUuid", 11040, 0, cuDeviceGetUuid_v2},
    {"cuFakeNewerEntry", 13010, 0, cuFakeNewerEntry},
    {"cuMemAlloc", 2000, 0, cuMemAlloc},
    {"cuMemAlloc", 3020, 0, cuMemAlloc_v2},
    {"cuMemAllocManaged", 6000, 0, cuMemAllocManaged},
    {"cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2},
    {"cuMemFree", 3020, 0, cuMemFree_v2},
    {"cuMemGetInfo", 3020, 0, cuMemGetInfo_v2},
    {"cuMemHostRegister", 6050, 0, cuMemHostRegister_v2},
    {"cuMemHostGetDevicePointer", 3020, 0, cuMemHostGetDevicePointer_v2},
    {"cuStreamWriteValue64", 9000, 0, cuStreamWriteValue64},
    {"cuStreamWriteValue64", 9000, 1, cuStreamWriteValue64_ptsz},
    {"cuStreamWriteValue64", 11070, 0, cuStreamWriteValue64_v2},
    {"cuStreamWriteValue64", 11070, 1, cuStreamWriteValue64_v2_ptsz},
    {"cuStreamIsCapturing", 10000, 0, cuStreamIsCapturing},
    {"cuStreamIsCapturing", 10000, 1, cuStreamIsCapturing_ptsz},
    {"cuFuncGetParamInfo", 12040, 0, cuFuncGetParamInfo},
    {"cuKernelGetParamInfo", 12040, 0, cuKernelGetParamInfo},
    {"cuLaunchKernel", 4000, 0, cuLaunchKernel},
    {"cuLaunchKernel", 7000, 1, cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11060, 0, cuLaunchKernelEx},
    {"cuLaunchKernelEx", 11060, 1, cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", 9000, 0, cuLaunchCooperativeKernel},
    {"cuLaunchCooperativeKernel", 9000, 1, cuLaunchCooperativeKernel_ptsz},
    {"cuEventCreate", 2000, 0, cuEventCreate},
    {"cuEventRecord", 2000, 0, cuEventRecord},
    {"cuEventQuery", 2000, 0, cuEventQuery},
    {"cuEventDestroy", 4000, 0, cuEventDestroy_v2},
    {"cuThreadExchangeStreamCaptureMode", 10010, 0, cuThreadExchangeStreamCaptureMode},
    {"cuCtxGetDevice", 2000, 0, cuCtxGetDevice},
    {"cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent},
    {"cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent},
    {"cuCtxGetDevice", 13000, 0, cuCtxGetDevice_v2},
    {"cuMemAllocAsync", 11020, 0, cuMemAllocAsync},
    {"cuMemAllocAsync", 11020, 1, cuMemAllocAsync_ptsz},
    {"cuMemPrefetchAsync", 8000, 0, cuMemPrefetchAsync},
    {"cuMemPrefetchAsync", 12020, 0, cuMemPrefetchAsync_v2},
    {"cuMemAdvise", 8000, 0, cuMemAdvise},
    {"cuMemAdvise", 12020, 0, cuMemAdvise_v2},
};

static CUresult lookup(const char *sym, void **pfn, int version, unsigned long long flags, int *status) {
    int best = -1, known = 0;
    int want_ptsz = (flags & PER_THREAD) != 0;
    if (!sym || !pfn) return INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, sym)) continue;
        known = 1;
        if (table[i].version > version) continue;
        if (table[i].ptsz && !want_ptsz) continue;
        /* the per-thread variant wins over the default one of the same version */
        if (best < 0 || table[i].version > table[best].version ||
            (table[i].version == table[best].version && table[i].ptsz))
            best = (int)i;
    }
    if (best < 0) { if (status) *status = known ? 2 : 1; return NOT_FOUND; }
    *pfn = table[best].fn;
    if (status) *status = 0;
    return OK;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, unsigned long long flags, int *status) {
    if (sym && !strcmp(sym, "cuGetProcAddress")) {
        /* _v2 from 12.0, the original from 11.3 */
        *pfn = version >= 12000 ? (void *)cuGetProcAddress_v2 : version >= 11030 ? (void *)cuGetProcAddress : NULL;
        if (status) *status = *pfn ? 0 : 2;
        return *pfn ? OK : NOT_FOUND;
    }
    return lookup(sym, pfn, version, flags, status);
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags) {
    return lookup(sym, pfn, version, flags, NULL);
}
/* The real address of an entry point, for pass-through checks. */
void *fake_real(const char *sym, int version, unsigned long long flags) {
    void *p = NULL; int st;
    cuGetProcAddress_v2(sym, &p, version, flags, &st);
    return p;
}
