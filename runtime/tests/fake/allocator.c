/* Plays PyTorch's allocator tracker (runtime/python/prescient_torch/marks.cpp)
 * against the runtime and the fake libcuda: finds the driver as CUDA's
 * libraries do, then reports a 4 MB free on a stream, a small allocation
 * elsewhere 5 ms later (the runtime sends the free's dead mark once its
 * fence has passed and its hold, PRESCIENT_MARKS_HOLD_MS, is over) and the
 * 4 MB range handed out again (the runtime marks it alive and waits for the
 * reply, if its dead mark was sent). With a second argument "quiet": the
 * free, then no allocator call for 200 ms (a training step's CPU waiting in
 * a synchronize): its dead mark must still go out, from the runtime's
 * flusher thread, after the default hold of 10 ms. The Rust test serves
 * the marks socket and checks what arrives. Prints ok=1 when every call
 * returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "page.h"

typedef int (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
typedef void (*event_t)(int, int, uint64_t, uint64_t, void *);

int main(int argc, char **argv) {
    void *h = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW);
    if (!h) { printf("dlopen=0\n"); return 1; }
    gpa2_t gpa2 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
    void *init = NULL; int st = 0;
    gpa2("cuInit", &init, 13000, 0, &st);
    event_t ev = (event_t)dlsym(RTLD_DEFAULT, "prescient_allocator_event");
    if (!ev) { printf("runtime=0\n"); return 0; }
    uint64_t mb = 1 << 20;
    typedef int (*alloc_t)(unsigned long long *, size_t);
    alloc_t alloc = NULL;
    gpa2("cuMemAlloc", (void **)&alloc, 13000, 0, &st);
    unsigned long long dptr = 0;
    if (!alloc || alloc(&dptr, 2 * mb) != 0 || !page()) { printf("page=0\n"); return 1; }
    if (argc > 2 && !strcmp(argv[2], "quiet")) {
        want_ids(1);
        ev(2, 0, 8ull << 30, 4 * mb, (void *)0x10);  /* FREE_COMPLETED, then nothing */
        usleep(200000);
        printf("runtime=1 ok=1\n");
        fflush(stdout);
        _exit(0); /* no exit handlers: only the flusher can have sent it */
    }
    /* Nobody asks for ids: this free is not marked dead. */
    ev(2, 0, 6ull << 30, 4 * mb, (void *)0x10);
    usleep(5000);
    ev(1, 0, 9ull << 30, 4096, (void *)0x10);    /* ALLOC elsewhere: flush */
    want_ids(1);
    ev(2, 0, 8ull << 30, 4 * mb, (void *)0x10);  /* FREE_COMPLETED */
    usleep(5000);
    ev(1, 0, 9ull << 30, 4096, (void *)0x10);    /* ALLOC elsewhere: flush */
    ev(1, 0, 8ull << 30, 4 * mb, (void *)0x10);  /* ALLOC of the freed range */
    long (*recorded)(void) = (long (*)(void))dlsym(h, "fake_events_recorded");
    printf("runtime=1 events=%ld ok=1\n", recorded ? recorded() : -1);
    return 0;
}
