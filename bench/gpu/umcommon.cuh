// What every bench/gpu CUDA workload shares (umbench.cu, fdtd2d.cu): its
// JSON lines, the refusal to allocate more managed memory than half of what
// the GPU has free, the PRESCIENT_GO wait, and the checksum kernel.
#pragma once
#include <cuda_runtime.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>
#include <algorithm>
#include <string>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(2); } } while (0)

static double now_ms() {
  return std::chrono::duration<double, std::milli>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Wall-clock seconds (CLOCK_REALTIME), so that samplers in other processes
// can cut their counters at iteration boundaries ("w0"/"w1" in iter lines).
static double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

static void check_fits(size_t bytes) {
  size_t fr = 0, tot = 0;
  CK(cudaMemGetInfo(&fr, &tot));
  if (bytes > fr / 2) {
    fprintf(stderr, "refusing: %zu managed bytes > half of free GPU memory %zu\n", bytes, fr);
    exit(3);
  }
  printf("{\"event\":\"alloc\",\"managed_bytes\":%zu,\"gpu_free\":%zu,\"gpu_total\":%zu,\"pid\":%d}\n",
         bytes, fr, tot, (int)getpid());
  fflush(stdout);
}

// Does the comma-separated `list` name `name` (FDTD_HOST's fields, rdup's
// cases)?
static bool listed(const char* list, const char* name) {
  return (std::string(",") + list + ",").find(std::string(",") + name + ",") != std::string::npos;
}

// Advises [p, p + bytes) to stay in host memory, mapped to GPU 0 (what a
// user does by hand for data the GPU should read and write there over the
// link instead of migrating it: umbench dnn's DNN_ADVISE, fdtd2d's
// FDTD_HOST).
static void advise_host_mapped(void* p, size_t bytes) {
#if CUDART_VERSION >= 13000
  cudaMemLocation host = {cudaMemLocationTypeHost, 0}, gpu0 = {cudaMemLocationTypeDevice, 0};
  CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, host));
  CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, gpu0));
#else
  CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId));
  CK(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, 0));
#endif
}

static void wait_go() {
  const char* go = getenv("PRESCIENT_GO");
  if (!go) return;
  for (int i = 0; i < 6000; i++) {
    if (access(go, F_OK) == 0) return;
    usleep(10000);
  }
  fprintf(stderr, "PRESCIENT_GO %s never appeared; running anyway\n", go);
}

__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16; return x;
}

__global__ void sum_k(const uint32_t* buf, size_t n, unsigned long long* sum) {
  unsigned long long acc = 0;
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x) acc += buf[j];
  atomicAdd(sum, acc);
}

static unsigned long long checksum(const uint32_t* buf, size_t n, unsigned long long* d) {
  *d = 0;
  sum_k<<<1024, 256>>>(buf, n, d);
  CK(cudaDeviceSynchronize());
  return *d;
}

static void summary(const char* name, std::vector<double>& gpu, std::vector<double>& tot, unsigned long long ck) {
  std::vector<double> g(gpu.begin() + (gpu.size() > 2 ? 2 : 0), gpu.end());
  std::vector<double> t(tot.begin() + (tot.size() > 2 ? 2 : 0), tot.end());
  std::sort(g.begin(), g.end()); std::sort(t.begin(), t.end());
  double gs = 0; for (double x : g) gs += x;
  printf("{\"event\":\"summary\",\"bench\":\"%s\",\"iters\":%zu,\"steady_iters\":%zu,\"median_gpu_ms\":%.3f,"
         "\"mean_gpu_ms\":%.3f,\"median_iter_ms\":%.3f,\"checksum\":\"%llx\"}\n",
         name, gpu.size(), g.size(), g[g.size() / 2], gs / g.size(), t[t.size() / 2], ck);
  fflush(stdout);
}
