// fdtd2d: FDTD-2D from PolyBench/GPU 1.0 (a 2-D finite-difference
// time-domain stencil: three kernels per time step over the fields ex, ey
// and hz), in the cudaMallocManaged form the UVM benchmark suite gives it
// (OSU-STARLAB/UVM_benchmark, UVM_benchmarks/polybench/FDTD-2D/fdtd2d.cu:
// 2048 x 2048, 500 steps). Written here from the algorithm, not copied,
// and enlarged to several GB: NX x NY floats per field (16384 x 16384:
// 3.22 GB managed), the fields initialised by the CPU as the original does.
//
//   fdtd2d ITERS NX NY     one iteration = one time step (the 3 kernels)
//   FDTD_HOST=ex,hz        those fields advised to stay in host memory, the
//                          GPU reading and writing them there over the link
//                          (what a user could do by hand for the part that
//                          does not fit; BENCHMARKS-gpu.md run 125)
//
// Output: umbench's JSON lines (umcommon.cuh): "alloc" with managed_bytes,
// one "iter" per step, a "summary" whose checksum is over the bits of the
// three fields after the last step (the kernels are deterministic: equal
// with and without Prescient).
#include "umcommon.cuh"

// ey[i][j] -= 0.5 (hz[i][j] - hz[i-1][j]); row 0 takes the source fict[t].
__global__ void step1(const float* fict, float* ey, const float* hz, size_t nx, size_t ny, int t) {
  size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t i = blockIdx.y * (size_t)blockDim.y + threadIdx.y;
  if (i >= nx || j >= ny) return;
  ey[i * ny + j] = i == 0 ? fict[t] : ey[i * ny + j] - 0.5f * (hz[i * ny + j] - hz[(i - 1) * ny + j]);
}

// ex[i][j] -= 0.5 (hz[i][j] - hz[i][j-1]) for j >= 1 (ex rows are ny + 1 long).
__global__ void step2(float* ex, const float* hz, size_t nx, size_t ny) {
  size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t i = blockIdx.y * (size_t)blockDim.y + threadIdx.y;
  if (i >= nx || j >= ny || j == 0) return;
  ex[i * (ny + 1) + j] -= 0.5f * (hz[i * ny + j] - hz[i * ny + j - 1]);
}

// hz[i][j] -= 0.7 (ex[i][j+1] - ex[i][j] + ey[i+1][j] - ey[i][j]).
__global__ void step3(const float* ex, const float* ey, float* hz, size_t nx, size_t ny) {
  size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t i = blockIdx.y * (size_t)blockDim.y + threadIdx.y;
  if (i >= nx || j >= ny) return;
  hz[i * ny + j] -= 0.7f * (ex[i * (ny + 1) + j + 1] - ex[i * (ny + 1) + j] + ey[(i + 1) * ny + j] - ey[i * ny + j]);
}

// The original's initial fields, written by the CPU into managed memory.
static void init(float* fict, int iters, float* ex, float* ey, float* hz, size_t nx, size_t ny) {
  for (int t = 0; t < iters; t++) fict[t] = (float)t;
  for (size_t i = 0; i <= nx; i++)
    for (size_t j = 0; j <= ny; j++) {
      if (i < nx) ex[i * (ny + 1) + j] = ((float)i * (j + 1) + 1) / nx;
      if (j < ny) ey[i * ny + j] = ((float)((long)i - 1) * (j + 2) + 2) / nx;
      if (i < nx && j < ny) hz[i * ny + j] = ((float)((long)i - 9) * (j + 4) + 3) / nx;
    }
}

// Advises `p` (field `name`) to stay in host memory, mapped to GPU 0, if
// FDTD_HOST lists it.
static void advise_host(const char* name, void* p, size_t bytes) {
  const char* list = getenv("FDTD_HOST");
  if (!list || !listed(list, name)) return;
  advise_host_mapped(p, bytes);
  printf("{\"event\":\"advise\",\"field\":\"%s\",\"bytes\":%zu,\"preferred\":\"host\",\"accessed_by\":0}\n", name, bytes);
}

int main(int argc, char** argv) {
  if (argc != 4) { fprintf(stderr, "usage: fdtd2d ITERS NX NY\n"); return 1; }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int iters = atoi(argv[1]);
  size_t nx = atol(argv[2]), ny = atol(argv[3]);
  if (iters < 1 || nx < 8 || ny < 32) { fprintf(stderr, "fdtd2d: ITERS >= 1, NX >= 8, NY >= 32\n"); return 1; }
  CK(cudaFree(0));
  size_t nex = nx * (ny + 1), ney = (nx + 1) * ny, nhz = nx * ny;
  check_fits((nex + ney + nhz + iters) * sizeof(float) + 4096);
  float *fict, *ex, *ey, *hz;
  CK(cudaMallocManaged(&fict, iters * sizeof(float)));
  CK(cudaMallocManaged(&ex, nex * sizeof(float)));
  CK(cudaMallocManaged(&ey, ney * sizeof(float)));
  CK(cudaMallocManaged(&hz, nhz * sizeof(float)));
  unsigned long long* d; CK(cudaMallocManaged(&d, 4096));
  init(fict, iters, ex, ey, hz, nx, ny);
  advise_host("ex", ex, nex * sizeof(float));
  advise_host("ey", ey, ney * sizeof(float));
  advise_host("hz", hz, nhz * sizeof(float));
  wait_go();
  dim3 block(32, 8), grid((unsigned)((ny + 31) / 32), (unsigned)((nx + 7) / 8));
  std::vector<double> gpu, tot;
  for (int t = 0; t < iters; t++) {
    double w0 = wall_s(), t0 = now_ms();
    // A synchronisation after each kernel, as the original has.
    step1<<<grid, block>>>(fict, ey, hz, nx, ny, t); CK(cudaDeviceSynchronize());
    step2<<<grid, block>>>(ex, hz, nx, ny); CK(cudaDeviceSynchronize());
    step3<<<grid, block>>>(ex, ey, hz, nx, ny); CK(cudaDeviceSynchronize());
    double t1 = now_ms();
    gpu.push_back(t1 - t0); tot.push_back(t1 - t0);
    printf("{\"event\":\"iter\",\"bench\":\"fdtd2d\",\"iter\":%d,\"gpu_ms\":%.3f,\"w0\":%.6f,\"w1\":%.6f}\n", t, t1 - t0, w0, wall_s());
  }
  unsigned long long ck = checksum((const uint32_t*)ex, nex, d);
  ck = ck * 31 + checksum((const uint32_t*)ey, ney, d);
  ck = ck * 31 + checksum((const uint32_t*)hz, nhz, d);
  summary("fdtd2d", gpu, tot, ck);
  return 0;
}
