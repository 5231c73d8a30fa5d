// rdup: what taking a block the GPU only read off the GPU costs, by
// migrating it to the host (what prescientd's workers do: UVM_MIGRATE to
// the CPU) or by dropping a read duplicate (issue 20: the GPU oracle and
// Prescient are bound by UVM's ~20 GB/s evictions to the host on stream and
// FDTD-2D; BENCHMARKS-gpu.md run 123 has the numbers and why those jobs,
// which write every block each step, cannot use the second way).
//
//   rdup MB [CHUNK_MB [CASES]]     CASES: a comma list of the cases below (default all)
//
// Why it might be free: with read duplication on (cudaMemAdviseSetReadMostly,
// UVM_ENABLE_READ_DUPLICATION), a prefetch to the GPU makes a copy and
// leaves the host's valid; turning it off collapses each page to one copy,
// the host's first (uvm_policy.c va_block_unset_read_duplication_locked:
// make_resident to the first processor holding a duplicate), so the GPU's
// copy is dropped without a transfer. A migration to the host with it on
// only duplicates again (uvm_migrate.c uvm_va_block_migrate_locked:
// make_resident_read_duplicate), so it frees nothing.
//
// Cases, each on a fresh managed buffer of MB the CPU filled:
//   migrate      prefetch to the GPU; each CHUNK to the host by prefetch
//   dup-drop     read-mostly; prefetch to the GPU; each CHUNK unset read-mostly
//   dup-cycle    as dup-drop, and each CHUNK set read-mostly again after
//   dup-migrate  read-mostly; prefetch to the GPU; each CHUNK to the host by prefetch
//   dup-write    read-mostly; prefetch to the GPU; a kernel writes all of it
//   dup-keep-write  as dup-write, the GPU the preferred location and read-mostly
//                unset before the kernel (each page collapses to the GPU's copy)
//   plain-write  prefetch to the GPU; the same kernel writes all of it
// Each prints one JSON line: prefetch in, a kernel reading all of it, the
// eviction (or the write), the same read again (slow if the GPU's copy is
// gone: it faults back), cudaMemGetInfo's free bytes after the prefetch and
// after the eviction, and the checksums before and after (equal).
#include "umcommon.cuh"

static const int DEV = 0;

static void advise(void* p, size_t n, cudaMemoryAdvise a) {
#if CUDART_VERSION >= 13000
  cudaMemLocation gpu0 = {cudaMemLocationTypeDevice, DEV};
  CK(cudaMemAdvise(p, n, a, gpu0));
#else
  CK(cudaMemAdvise(p, n, a, DEV));
#endif
}

static void prefetch(void* p, size_t n, bool to_gpu) {
#if CUDART_VERSION >= 13000
  cudaMemLocation loc = to_gpu ? cudaMemLocation{cudaMemLocationTypeDevice, DEV}
                               : cudaMemLocation{cudaMemLocationTypeHost, 0};
  CK(cudaMemPrefetchAsync(p, n, loc, 0, 0));
#else
  CK(cudaMemPrefetchAsync(p, n, to_gpu ? DEV : cudaCpuDeviceId, 0));
#endif
}

__global__ void write_k(uint32_t* buf, size_t n) {
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x)
    buf[j] = buf[j] * 3u + 1u;
}

static size_t gpu_free() {
  size_t fr = 0, tot = 0;
  CK(cudaMemGetInfo(&fr, &tot));
  return fr;
}

// One case on a fresh buffer: see the header.
static void run_case(const char* name, size_t bytes, size_t chunk, unsigned long long* d) {
  bool dup = strncmp(name, "dup", 3) == 0;
  uint32_t* p;
  CK(cudaMallocManaged(&p, bytes));
  size_t n = bytes / 4;
  for (size_t j = 0; j < n; j++) p[j] = (uint32_t)(j * 2654435761u);
  if (dup) advise(p, bytes, cudaMemAdviseSetReadMostly);
  double t0 = now_ms();
  prefetch(p, bytes, true);
  CK(cudaDeviceSynchronize());
  double t1 = now_ms();
  unsigned long long ck0 = checksum(p, n, d);
  double t2 = now_ms();
  size_t free_in = gpu_free();
  bool write = strstr(name, "write") != nullptr;
  double t3 = now_ms();
  if (write) {
    if (strcmp(name, "dup-keep-write") == 0) {
      advise(p, bytes, cudaMemAdviseSetPreferredLocation);
      advise(p, bytes, cudaMemAdviseUnsetReadMostly);
    }
    write_k<<<1024, 256>>>(p, n);
  } else {
    for (size_t off = 0; off < bytes; off += chunk) {
      char* c = (char*)p + off;
      size_t len = std::min(chunk, bytes - off);
      if (strcmp(name, "migrate") == 0 || strcmp(name, "dup-migrate") == 0) {
        prefetch(c, len, false);
      } else {
        advise(c, len, cudaMemAdviseUnsetReadMostly);
        if (strcmp(name, "dup-cycle") == 0) advise(c, len, cudaMemAdviseSetReadMostly);
      }
    }
  }
  CK(cudaDeviceSynchronize());
  double t4 = now_ms();
  size_t free_out = gpu_free();
  double t5 = now_ms();
  unsigned long long ck1 = checksum(p, n, d);
  double t6 = now_ms();
  printf("{\"event\":\"rdup\",\"case\":\"%s\",\"mb\":%zu,\"chunk_mb\":%zu,\"prefetch_in_ms\":%.3f,"
         "\"read_ms\":%.3f,\"evict_ms\":%.3f,\"evict_gbps\":%.2f,\"read_after_ms\":%.3f,"
         "\"free_in\":%zu,\"free_out\":%zu,\"freed_mb\":%.1f,\"checksum\":\"%llx\",\"checksum_after\":\"%llx\"}\n",
         name, bytes >> 20, chunk >> 20, t1 - t0, t2 - t1, t4 - t3, bytes / 1e6 / (t4 - t3), t6 - t5,
         free_in, free_out, ((double)free_out - (double)free_in) / 1048576.0, ck0, ck1);
  fflush(stdout);
  CK(cudaFree(p));
}

int main(int argc, char** argv) {
  if (argc < 2) { fprintf(stderr, "usage: rdup MB [CHUNK_MB [CASES]]\n"); return 1; }
  size_t mb = atol(argv[1]), chunk_mb = argc > 2 ? atol(argv[2]) : 2;
  if (mb < 2 || chunk_mb < 1) { fprintf(stderr, "rdup: MB >= 2, CHUNK_MB >= 1\n"); return 1; }
  size_t bytes = mb << 20;
  CK(cudaFree(0));
  check_fits(bytes + 4096);
  unsigned long long* d;
  CK(cudaMallocManaged(&d, 4096));
  const char* cases[] = {"migrate", "dup-drop", "dup-cycle", "dup-migrate", "dup-write", "dup-keep-write", "plain-write"};
  // A write to a read duplicate collapses it page by page: 195 s for 2 GiB
  // on an H100 (BENCHMARKS-gpu.md run 123), so it runs only when named.
  const char* want = argc > 3 ? argv[3] : "migrate,dup-drop,dup-cycle,dup-migrate,dup-keep-write,plain-write";
  for (int rep = 0; rep < 2; rep++)
    for (const char* c : cases)
      if (listed(want, c)) run_case(c, bytes, chunk_mb << 20, d);
  return 0;
}
