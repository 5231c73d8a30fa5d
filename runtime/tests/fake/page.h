/* The runtime's execution-id page, found as prescientd finds it (a memfd
 * named prescient-exec-page among the process's descriptors): shared by the
 * fake drivers of the runtime's tests. */
#ifndef FAKE_PAGE_H
#define FAKE_PAGE_H
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Maps the memfd named `name` among this process's descriptors (as
 * prescientd finds the runtime's page and launch ring), `bytes` long;
 * NULL if there is none. */
static volatile uint64_t *map_memfd(const char *name, size_t bytes) {
    volatile uint64_t *p = NULL;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[512], link[512], want[128];
    snprintf(want, sizeof want, "memfd:%s", name);
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (strstr(link, want)) {
            int fd = open(path, O_RDWR);
            void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            p = m == MAP_FAILED ? NULL : m;
            break;
        }
    }
    if (d) closedir(d);
    return p;
}

/* The page the runtime made, found as the daemon finds it. */
static volatile uint64_t *page(void) {
    static volatile uint64_t *pg;
    if (!pg) pg = map_memfd("prescient-exec-page", 4096);
    return pg;
}

/* The value in the page slot the stream `key` owns (0 if none). */
static inline uint64_t slot_value(uint64_t key) {
    volatile uint64_t *pg = page();
    if (!pg) return 0;
    for (int i = 0; i < 252; i++)
        if (pg[8 + 2 * i] == key) return pg[8 + 2 * i + 1];
    return 0;
}

/* Sets or clears WANT_IDS (the control word's bit 0), as a reader does. */
static void want_ids(int on) {
    volatile uint64_t *pg = page();
    if (!pg) return;
    if (on) __atomic_fetch_or((uint64_t *)&pg[4], 1, __ATOMIC_RELAXED);
    else __atomic_fetch_and((uint64_t *)&pg[4], ~(uint64_t)1, __ATOMIC_RELAXED);
}
#endif
