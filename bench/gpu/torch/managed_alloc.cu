// A PyTorch pluggable allocator over cudaMallocManaged, for running an
// unmodified training loop on Unified Memory (issue 5). Loaded with
// torch.cuda.memory.CUDAPluggableAllocator(path, "prescient_um_malloc",
// "prescient_um_free"). A pluggable allocator replaces PyTorch's caching
// allocator, so this one caches by exact size itself: freed blocks are kept
// and handed out again (last freed first), as PyTorch's own allocator does.
// That keeps addresses stable from one iteration to the next, and avoids
// cudaFree, which synchronizes the device.
// Build: nvcc -O2 -shared -Xcompiler -fPIC -o managed_alloc.so managed_alloc.cu
#include <cuda_runtime.h>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <vector>
#include <sys/types.h>

static std::mutex mu;
static std::unordered_map<size_t, std::vector<void*>> free_by_size;
static std::unordered_map<void*, size_t> size_of;
static size_t managed_bytes = 0;

static size_t round_up(size_t n) { return (n + 511) & ~(size_t)511; }

extern "C" {

void* prescient_um_malloc(ssize_t size, int device, cudaStream_t stream) {
  (void)device; (void)stream;
  size_t n = round_up(size > 0 ? (size_t)size : 1);
  std::lock_guard<std::mutex> g(mu);
  auto it = free_by_size.find(n);
  if (it != free_by_size.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  void* p = nullptr;
  if (cudaMallocManaged(&p, n) != cudaSuccess) return nullptr;
  size_of[p] = n;
  managed_bytes += n;
  return p;
}

void prescient_um_free(void* p, ssize_t size, int device, cudaStream_t stream) {
  (void)size; (void)device; (void)stream;
  std::lock_guard<std::mutex> g(mu);
  auto it = size_of.find(p);
  if (it == size_of.end()) return;
  free_by_size[it->second].push_back(p);
}

// Bytes of managed memory allocated so far (kept, not returned).
size_t prescient_um_bytes(void) {
  std::lock_guard<std::mutex> g(mu);
  return managed_bytes;
}
}
