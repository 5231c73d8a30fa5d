/* Drives the fake libcuda the way CUDA's libraries do (dlopen, dlsym of
 * cuGetProcAddress_v2, then lookups by base name, version and flags) and
 * prints one `key=value` line per check for the Rust test to assert on. */
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
typedef CUresult (*gpa1_t)(const char *, void **, int, unsigned long long);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*pitch_t)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*info_t)(size_t *, size_t *);
typedef CUresult (*lk_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
typedef CUresult (*coop_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **);
typedef struct { unsigned g[3], b[3], sm; void *stream; void *attrs; unsigned nattrs; } CUlaunchConfig;
typedef CUresult (*lkex_t)(const CUlaunchConfig *, void *, void **, void **);

static void *h;
static gpa2_t gpa2;
#define FAKE(name, type) ((type)dlsym(h, name))

/* the symbol the exe defines, looked up with RTLD_NEXT below */
int fake_next_symbol(void) { return 1; }

static void *get(const char *sym, int version, unsigned long long flags) {
    void *p = NULL; int st = -1;
    CUresult rc = gpa2(sym, &p, version, flags, &st);
    return rc == 0 ? p : NULL;
}

#include "page.h"

/* The write flags the v2 memops refused. */
static void flags_check(void) {
    long (*refused)(void) = FAKE("fake_refused_write_flags", long (*)(void));
    printf("refused_write_flags=%ld\n", refused());
}

int main(int argc, char **argv) {
    h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    gpa2 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
    gpa1_t gpa1 = (gpa1_t)dlsym(h, "cuGetProcAddress");
    void *(*fake_real)(const char *, int, unsigned long long) = FAKE("fake_real", void *(*)(const char *, int, unsigned long long));
    int (*is_managed)(CUdeviceptr) = FAKE("fake_is_managed", int (*)(CUdeviceptr));
    void (*capture)(int) = FAKE("fake_set_capturing", void (*)(int));
    long (*launches)(void) = FAKE("fake_launches", long (*)(void));
    long (*after_write)(void) = FAKE("fake_launches_after_write", long (*)(void));
    long (*captured)(void) = FAKE("fake_captured_writes", long (*)(void));
    void *(*fn)(int) = FAKE("fake_function", void *(*)(int));

    /* RTLD_NEXT from the exe must start after the exe: at the preloaded dlsym. */
    printf("rtld_next_dlsym_is_first=%d\n", dlsym(RTLD_NEXT, "dlsym") == (void *)dlsym);
    printf("gpa2_wrapped=%d\n", (void *)gpa2 != fake_real("cuGetProcAddress", 12000, 0));
    void *gpa_self = get("cuGetProcAddress", 12000, 0);
    printf("gpa2_self_wrapped=%d\n", gpa_self == (void *)gpa2);

    /* Allocations: every way of asking for cuMemAlloc_v2 gets memory the
     * fake says is managed; the 32-bit ABI passes through untouched. */
    CUdeviceptr d = 0;
    alloc_t a1 = (alloc_t)get("cuMemAlloc", 12000, 0);
    CUresult arc = a1(&d, 1 << 20);
    printf("alloc_rc=%d alloc_managed=%d\n", arc, is_managed(d));
    /* A fresh allocation is prefetched to the device (without a budget). */
    long (*prefetches)(void) = FAKE("fake_prefetches", long (*)(void));
    CUdeviceptr (*pf_addr)(void) = FAKE("fake_prefetch_addr", CUdeviceptr (*)(void));
    size_t (*pf_bytes)(void) = FAKE("fake_prefetch_bytes", size_t (*)(void));
    int (*pf_dev)(void) = FAKE("fake_prefetch_device", int (*)(void));
    printf("placed=%ld placed_range=%d placed_device=%d\n", prefetches(), pf_addr() == d && pf_bytes() == 1 << 20, pf_dev());
    /* ... but not while a stream captures (it would join the capture). */
    CUdeviceptr dc = 0;
    long p0 = prefetches();
    capture(1);
    a1(&dc, 4096);
    capture(0);
    printf("placed_under_capture=%ld\n", prefetches() - p0);
    ((free_t)get("cuMemFree", 12000, 0))(dc);
    /* The execution-id page exists from the first allocation on. */
    printf("page_before_launch=%d\n", page() != NULL);
    alloc_t a2 = (alloc_t)dlsym(h, "cuMemAlloc_v2");
    CUdeviceptr d2 = 0;
    printf("dlsym_alloc_managed=%d\n", a2(&d2, 4096) == 0 && is_managed(d2) == 1);
    alloc_t a3 = (alloc_t)get("cuMemAlloc", 3020, 2);
    CUdeviceptr d3 = 0;
    printf("ptsz_flag_alloc_managed=%d\n", a3(&d3, 4096) == 0 && is_managed(d3) == 1);
    void *old = get("cuMemAlloc", 3000, 0);
    printf("v1_abi_passthrough=%d\n", old != NULL && old == fake_real("cuMemAlloc", 3000, 0));
    void *via_v1 = NULL;
    gpa1("cuMemAlloc", &via_v1, 12000, 0);
    CUdeviceptr d4 = 0;
    printf("gpa1_alloc_managed=%d\n", ((alloc_t)via_v1)(&d4, 64) == 0 && is_managed(d4) == 1);
    CUdeviceptr dp = 0; size_t pitch = 0;
    pitch_t pf = (pitch_t)get("cuMemAllocPitch", 12000, 0);
    CUresult prc = pf(&dp, &pitch, 1000, 3, 4);
    printf("pitch_rc=%d pitch=%zu pitch_managed=%d\n", prc, pitch, is_managed(dp));
    printf("pitch_bad_element_rc=%d\n", pf(&dp, &pitch, 1000, 3, 3));
    free_t ff = (free_t)get("cuMemFree", 12000, 0);
    printf("free_rc=%d\n", ff(d) | ff(d2) | ff(d3) | ff(d4) | ff(dp));
    size_t fr = 0, tot = 0;
    info_t mi = (info_t)get("cuMemGetInfo", 12000, 0);
    CUresult irc = mi(&fr, &tot);
    printf("info_rc=%d free=%zu total=%zu\n", irc, fr, tot);

    /* Unknown and newer names pass through exactly. */
    printf("unknown_passthrough=%d\n", get("cuDeviceGetCount", 12000, 0) == fake_real("cuDeviceGetCount", 12000, 0));
    printf("newer_passthrough=%d\n", get("cuFakeNewerEntry", 13010, 0) == fake_real("cuFakeNewerEntry", 13010, 0));
    printf("dlsym_passthrough=%d\n", dlsym(h, "cuDeviceGetCount") == fake_real("cuDeviceGetCount", 12000, 0));
    void *none = (void *)1; int st = -1;
    CUresult nrc = gpa2("cuNoSuchEntry", &none, 12000, 0, &st);
    printf("missing_rc=%d missing_status=%d missing_null=%d\n", nrc, st, none == NULL);
    nrc = gpa2("cuLaunchKernelEx", &none, 11000, 0, &st);
    printf("too_old_rc=%d too_old_status=%d\n", nrc, st);

    /* Launches: the first one is captured, before the page exists. */
    void *stream = (void *)0x7000;
    /* Two managed buffers (cuMemAlloc is managed under the runtime): ids
     * hash the arguments that point into them. */
    CUdeviceptr m1 = 0, m2 = 0;
    a1(&m1, 4 << 20);
    a1(&m2, 4 << 20);
    uint64_t a = m1, b = 7;
    void *params[2] = {&a, &b};
    lk_t lk = (lk_t)get("cuLaunchKernel", 12000, 0);
    capture(1);
    lk(fn(0), 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
    capture(0);
    printf("captured_first_unmarked=%d\n", captured() == 0 && page() == NULL);
    printf("captured_first_marked=%d\n", captured() == 1);
    long l0 = launches(), w0 = after_write();
    lk(fn(0), 4, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    uint64_t v1 = slot_value(0x7000);
    lk(fn(0), 4, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    uint64_t v2 = slot_value(0x7000);
    a = m2;
    lk(fn(0), 4, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    uint64_t v3 = slot_value(0x7000);
    lk(fn(0), 8, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    uint64_t v4 = slot_value(0x7000);
    printf("id_written=%d id_same_launch_same=%d id_args_differ=%d id_shape_differs=%d\n", v1 != 0, v1 == v2, v1 != v3, v3 != v4);
    /* A scalar argument (k0's 4-byte second one) that changes. */
    b = 8;
    lk(fn(0), 8, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    printf("id_scalar_differs=%d\n", slot_value(0x7000) != v4);
    /* A CUkernel (cuFuncGetParamInfo refuses it): its pointer argument
     * still tells launches apart, its 64-bit scalar only with all bytes. */
    uint64_t ka = m1, ks = 1;
    void *kparams[2] = {&ka, &ks};
    lk(fn(4), 4, 1, 1, 128, 1, 1, 0, stream, kparams, NULL);
    uint64_t k1 = slot_value(0x7000);
    ks = 2;
    lk(fn(4), 4, 1, 1, 128, 1, 1, 0, stream, kparams, NULL);
    uint64_t k2 = slot_value(0x7000);
    ka = m2;
    lk(fn(4), 4, 1, 1, 128, 1, 1, 0, stream, kparams, NULL);
    uint64_t k3 = slot_value(0x7000);
    printf("kernel_id_pointer_differs=%d kernel_id_scalar_differs=%d\n", k3 != k2, k2 != k1);
    ff(m1);
    ff(m2);
    /* A reader asks for ids (the page's control word, bit 0). */
    want_ids(1);
    lk(fn(0), 3, 1, 1, 128, 1, 1, 0, (void *)0xA000, params, NULL);
    printf("id_after_want=%d\n", slot_value(0xA000) != 0);
    lk_t lkp = (lk_t)get("cuLaunchKernel", 12000, 2);
    lkp(fn(0), 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL);
    coop_t cp = (coop_t)get("cuLaunchCooperativeKernel", 12000, 0);
    cp(fn(1), 2, 1, 1, 64, 1, 1, 0, stream, params);
    coop_t cpp = (coop_t)get("cuLaunchCooperativeKernel", 12000, 2);
    cpp(fn(1), 2, 1, 1, 64, 1, 1, 0, (void *)0x8000, params);
    lkex_t ex = (lkex_t)get("cuLaunchKernelEx", 12000, 0);
    CUlaunchConfig c = {{1, 1, 1}, {32, 1, 1}, 0, (void *)0x9000, NULL, 0};
    ex(&c, fn(1), params, NULL);
    lkex_t exp = (lkex_t)get("cuLaunchKernelEx", 12000, 2);
    c.stream = NULL;
    exp(&c, fn(1), params, NULL);
    printf("launches=%ld launches_after_own_write=%ld\n", launches() - l0, after_write() - w0);
    printf("streams_have_slots=%d\n", slot_value(0x8000) != 0 && slot_value(0x9000) != 0);
    /* Under capture, the write is captured like the launch. */
    long c0 = captured();
    capture(1);
    lk(fn(0), 4, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    capture(0);
    printf("captured_write=%ld\n", captured() - c0);
    /* Many streams: more than the page's slots, all still marked. */
    long m0 = after_write();
    for (uintptr_t s = 1; s <= 300; s++)
        lk(fn(0), 1, 1, 1, 1, 1, 1, 0, (void *)(0x100000 + s * 16), params, NULL);
    printf("many_streams_after_write=%ld\n", after_write() - m0);
    flags_check();

    /* cuMemGetInfo in each device's context, then with none current. */
    void (*set_current)(int) = FAKE("fake_set_current", void (*)(int));
    for (int dev = 0; dev < 2; dev++) {
        set_current(dev);
        irc = mi(&fr, &tot);
        printf("info_dev%d_rc=%d info_dev%d_free=%zu info_dev%d_total=%zu\n", dev, irc, dev, fr, dev, tot);
    }
    set_current(-1);
    printf("info_nocontext_rc=%d\n", mi(&fr, &tot));
    set_current(0);
    return 0;
}
