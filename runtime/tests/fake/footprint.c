/* Launch footprints against the fake libcuda: managed allocations made
 * through the runtime, allocator events as PyTorch's trace tracker sends
 * them, and launches of kernels with PyTorch's parameter layouts (an
 * elementwise kernel's Array<char*, 3>, a foreach kernel's
 * TensorListMetadata<2> by value, the same through the `extra` buffer).
 * Reads the launch ring as prescientd does (the memfd named
 * prescient-launch-ring, layout of prescient_uapi::launchring) and prints
 * `key=value` checks for tests/footprints.rs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*lk_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
typedef void (*event_t)(int, int, uint64_t, uint64_t, void *);

#define RING_HEADER 24
#define RECORD_WORDS 128
#define RING_CAPACITY 4096
/* The host-advice table after the records (launchring/advice.rs). */
#define ADVICE_AT (RING_HEADER + RING_CAPACITY * RECORD_WORDS)
#define RING_BYTES ((ADVICE_AT + 8 + 2 * 64) * 8)

static void *h;
static gpa2_t gpa2;
static void *get(const char *sym, int version) {
    void *p = NULL; int st = -1;
    return gpa2(sym, &p, version, 0, &st) == 0 ? p : NULL;
}

#include "page.h"

/* The launch ring the runtime made, found as the daemon finds it. */
static volatile uint64_t *ring(void) {
    static volatile uint64_t *r;
    if (!r) r = map_memfd("prescient-launch-ring", RING_BYTES);
    return r;
}

/* Prints record `pos`: its id, stream, truncation, guessed flag and ranges. */
static void print_record(const char *name, uint64_t pos) {
    volatile uint64_t *w = ring() + RING_HEADER + (pos % RING_CAPACITY) * RECORD_WORDS;
    int n = (int)(w[4] & 0xff);
    printf("%s_committed=%d %s_id=%llu %s_stream=%llu %s_truncated=%d %s_guessed=%d %s_ranges=",
           name, w[0] == 2 * pos + 2, name, (unsigned long long)w[2], name,
           (unsigned long long)w[3], name, (w[4] >> 8) & 1, name, (w[4] >> 9) & 1, name);
    for (int i = 0; i < n; i++)
        printf("%s%llu:%llu", i ? "," : "", (unsigned long long)(w[5 + i] & 0xffffffff),
               (unsigned long long)(w[5 + i] >> 32));
    printf("\n");
}

/* Prints the host-advice table: sequence, count, left out, ranges. */
static void print_advice(const char *name) {
    volatile uint64_t *t = ring() + ADVICE_AT;
    int n = (int)t[1];
    printf("%s_seq=%llu %s_n=%d %s_left_out=%llu %s_ranges=", name, (unsigned long long)t[0], name, n,
           name, (unsigned long long)t[2], name);
    for (int i = 0; i < n && i < 64; i++)
        printf("%s%llu:%llu", i ? "," : "", (unsigned long long)t[8 + 2 * i], (unsigned long long)t[9 + 2 * i]);
    printf("\n");
}

/* TensorListMetadata<2> as PyTorch lays it out (MultiTensorApply.cuh). */
struct tl2 {
    const void *addresses[2][64];
    int64_t numel_for_tensor[64];
    unsigned char block_to_tensor[320];
    int block_to_chunk[320];
    int start_tensor_this_launch;
};

int main(int argc, char **argv) {
    (void)argc;
    h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    gpa2 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
    void *(*fn)(int) = (void *(*)(int))dlsym(h, "fake_function");
    alloc_t alloc = (alloc_t)get("cuMemAlloc", 12000);
    lk_t lk = (lk_t)get("cuLaunchKernel", 12000);
    CUdeviceptr a = 0, b = 0;
    /* Two managed allocations: PyTorch's caching allocator's segments. */
    if (alloc(&a, 8 << 20) || alloc(&b, 96 << 20)) return 3;
    printf("a=%llu b=%llu sizeof_tl2=%zu\n", a, b, sizeof(struct tl2));
    printf("ring_found=%d ring_pid_ok=%d\n", ring() != NULL, ring() && ring()[3] == (uint64_t)getpid());
    if (!ring()) return 0;
    /* Allocator events: three live tensors (one a 3 MB block). */
    event_t ev = (event_t)dlsym(RTLD_DEFAULT, "prescient_allocator_event");
    printf("events_found=%d\n", ev != NULL);
    if (!ev) return 0;
    ev(1, 0, a, 1 << 20, NULL);
    ev(1, 0, a + (2 << 20), 3 << 20, NULL);
    ev(1, 0, b + (10 << 20), 4096, NULL);
    want_ids(1);
    int n = 1 << 20; float alpha = 1.0f;
    uint64_t data[3] = {a, a + (2 << 20) + 4096, b + (10 << 20)};
    void *p1[3] = {&n, &alpha, data};
    /* No reader asks yet: nothing is written. */
    lk(fn(2), 256, 1, 1, 128, 1, 1, 0, (void *)0x7000, p1, NULL);
    printf("records_unasked=%llu\n", (unsigned long long)ring()[8]);
    ring()[4] |= 1;
    uint64_t head0 = ring()[8];
    lk(fn(2), 256, 1, 1, 128, 1, 1, 0, (void *)0x7000, p1, NULL);
    printf("page_id=%llu\n", (unsigned long long)slot_value(0x7000));
    print_record("elementwise", head0);
    /* The foreach kernel: tensors in both lists, numels after them. */
    static struct tl2 tl;
    memset(&tl, 0, sizeof tl);
    tl.addresses[0][0] = (void *)(uintptr_t)a;
    tl.addresses[0][1] = (void *)(uintptr_t)(b + (40 << 20));
    tl.addresses[1][0] = (void *)(uintptr_t)(b + (90 << 20));
    tl.numel_for_tensor[0] = 1 << 18; tl.numel_for_tensor[1] = 1 << 20;
    char callable = 0, op = 0;
    void *p2[4] = {&tl, &callable, &op, &alpha};
    lk(fn(3), 64, 1, 1, 512, 1, 1, 0, (void *)0x7000, p2, NULL);
    print_record("foreach", head0 + 1);
    /* The same through CU_LAUNCH_PARAM_BUFFER_POINTER. */
    size_t size = sizeof tl;
    void *extra[5] = {(void *)1, &tl, (void *)2, &size, (void *)0};
    lk(fn(3), 64, 1, 1, 512, 1, 1, 0, (void *)0x7000, NULL, extra);
    print_record("extra", head0 + 2);
    /* A tensor freed: its pointer stands for 64 MB of its segment at most. */
    ev(2, 0, b + (10 << 20), 4096, NULL);
    lk(fn(2), 256, 1, 1, 128, 1, 1, 0, (void *)0x7000, p1, NULL);
    print_record("after_free", head0 + 3);
    /* The job's own cuMemAllocManaged (FDTD-2D, a managed pluggable
     * allocator): a pointer into it stands for the allocation from there. */
    typedef CUresult (*am_t)(CUdeviceptr *, size_t, unsigned);
    am_t am = (am_t)get("cuMemAllocManaged", 12000);
    CUdeviceptr c = 0;
    if (!am || am(&c, 6 << 20, 1 /* CU_MEM_ATTACH_GLOBAL */)) return 4;
    uint64_t cp = c + (1 << 20);
    void *p3[2] = {&cp, &n};
    lk(fn(0), 64, 1, 1, 128, 1, 1, 0, (void *)0x7000, p3, NULL);
    printf("c=%llu\n", c);
    print_record("own_managed", head0 + 4);
    /* A CUkernel (CUDA 12+'s runtime launches these): cuFuncGetParamInfo
     * refuses it, cuKernelGetParamInfo sizes its parameters. */
    uint64_t kp = a, ks = 12345;
    void *p4[2] = {&kp, &ks};
    lk(fn(4), 64, 1, 1, 128, 1, 1, 0, (void *)0x7000, p4, NULL);
    print_record("kernel", head0 + 5);
    /* The job's own advice (cudaMemAdvise calls cuMemAdvise at 13.0): c
     * and b to the host, b's middle third back to the GPU, a pointer no
     * allocation holds (refused by the driver: not kept). The next launch
     * publishes the set; freeing c takes its advice away. */
    typedef struct { int type; int id; } CUmemLocation;
    typedef CUresult (*adv_t)(CUdeviceptr, size_t, int, CUmemLocation);
    adv_t adv = (adv_t)get("cuMemAdvise", 13000);
    CUmemLocation host = {2, 0}, gpu0 = {1, 0};
    print_advice("advice_before");
    int r1 = adv(c, 6 << 20, 3, host), r2 = adv(b, 96 << 20, 3, host);
    int r3 = adv(b + (32 << 20), 32 << 20, 3, gpu0), r4 = adv(0x1000, 4096, 3, host);
    printf("adv_rc=%d,%d,%d,%d\n", r1, r2, r3, r4);
    /* cudart before 12.2 asks at its own version and gets the 8.0 ABI (a
     * CUdevice, CU_DEVICE_CPU = -1): a's first MB to the host. */
    typedef CUresult (*adv1_t)(CUdeviceptr, size_t, int, int);
    adv1_t adv1 = (adv1_t)get("cuMemAdvise", 12000);
    printf("adv1_rc=%d\n", adv1(a, 1 << 20, 3, -1));
    lk(fn(0), 64, 1, 1, 128, 1, 1, 0, (void *)0x7000, p3, NULL);
    print_advice("advised");
    typedef CUresult (*free_t)(CUdeviceptr);
    free_t fr = (free_t)get("cuMemFree", 12000);
    printf("free_rc=%d\n", fr(c));
    lk(fn(2), 256, 1, 1, 128, 1, 1, 0, (void *)0x7000, p1, NULL);
    print_advice("after_free_c");
    printf("head=%llu dropped=%llu\n", (unsigned long long)(ring()[8] - head0),
           (unsigned long long)ring()[5]);
    return 0;
}
