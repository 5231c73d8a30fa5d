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

/* The page the runtime made, found as the daemon finds it. */
static volatile uint64_t *page(void) {
    static volatile uint64_t *pg;
    if (pg) return pg;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[512], link[512];
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (strstr(link, "memfd:prescient-exec-page")) {
            int fd = open(path, O_RDWR);
            pg = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            break;
        }
    }
    if (d) closedir(d);
    return pg == MAP_FAILED ? NULL : pg;
}

/* Sets or clears WANT_IDS (the control word's bit 0), as a reader does. */
static void want_ids(int on) {
    volatile uint64_t *pg = page();
    if (!pg) return;
    if (on) __atomic_fetch_or((uint64_t *)&pg[4], 1, __ATOMIC_RELAXED);
    else __atomic_fetch_and((uint64_t *)&pg[4], ~(uint64_t)1, __ATOMIC_RELAXED);
}
#endif
