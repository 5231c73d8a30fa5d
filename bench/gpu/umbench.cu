// Unified-memory workloads for Prescient, unmodified CUDA programs over
// cudaMallocManaged. Prescient attaches from outside (prescientd attach --pid).
//
//   umbench bw MB                      pinned cudaMemcpy H2D/D2H bandwidth
//   umbench dnn ITERS IN_MB LAYERS LAYER_MB
//       multi-kernel DNN-like loop; the CPU rewrites the input every iteration
//       (DNN_ADVISE=1: the input advised to stay in host memory, read there)
//   umbench stream ITERS NBUF BUF_MB   layered streaming over NBUF buffers
//       (STREAM_HOST=N: the first N buffers advised to stay in host memory)
//   umbench random ITERS MB CPU_FRAC   random page access, CPU rewrites a
//                                      random fraction of blocks each iteration
//   umbench hold MB SECS               MB of managed memory written by the
//                                      CPU, then idle SECS seconds (migbench
//                                      migrates it from outside)
// Every line of output is one JSON object. If PRESCIENT_GO is set, the
// program waits (up to 60 s) for that file to exist after allocating.
#include "umcommon.cuh"


// out[j] = mix of in[j*ratio .. j*ratio+ratio-1] + layer
__global__ void layer_k(const uint32_t* in, size_t nin, uint32_t* out, size_t nout, uint32_t layer) {
  size_t ratio = nin / nout;
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < nout; j += (size_t)gridDim.x * blockDim.x) {
    uint32_t acc = layer;
    for (size_t r = 0; r < ratio; r++) acc = mix(acc ^ in[j * ratio + r]);
    out[j] = acc;
  }
}

// buf[j] = mix(buf[j] ^ prev[j])
__global__ void stream_k(const uint32_t* prev, uint32_t* buf, size_t n, uint32_t it) {
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x)
    buf[j] = mix(buf[j] ^ prev[j] ^ it);
}

__global__ void random_k(const uint32_t* buf, size_t pages, uint32_t seed, unsigned long long* sum, int per_thread) {
  size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  unsigned long long acc = 0;
  uint32_t s = mix(seed ^ (uint32_t)t);
  for (int k = 0; k < per_thread; k++) {
    s = mix(s + k);
    size_t p = s % pages;
    acc += buf[p * 1024 + (s >> 22) % 1024];
  }
  atomicAdd(sum, acc);
}


static int bw(size_t mb) {
  size_t n = mb << 20;
  void *h, *d;
  CK(cudaMallocHost(&h, n)); CK(cudaMalloc(&d, n));
  memset(h, 1, n);
  CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
  double best_h2d = 0, best_d2h = 0;
  for (int r = 0; r < 3; r++) {
    double t0 = now_ms(); CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice)); double t1 = now_ms();
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost)); double t2 = now_ms();
    best_h2d = std::max(best_h2d, n / (t1 - t0) / 1e6);
    best_d2h = std::max(best_d2h, n / (t2 - t1) / 1e6);
  }
  printf("{\"event\":\"bw\",\"bytes\":%zu,\"h2d_gbps\":%.2f,\"d2h_gbps\":%.2f}\n", n, best_h2d, best_d2h);
  return 0;
}

// What a user would do by hand for a buffer the CPU rewrites and the GPU
// reads once per iteration (DNN_ADVISE=1): keep it in host memory and let
// the GPU read it there over the link (no migration in, no eviction out).
static void advise_host_read(void* p, size_t bytes) {
  advise_host_mapped(p, bytes);
  printf("{\"event\":\"advise\",\"bytes\":%zu,\"preferred\":\"host\",\"accessed_by\":0}\n", bytes);
}

static int dnn(int iters, size_t in_mb, int layers, size_t layer_mb) {
  size_t nin = (in_mb << 20) / 4, nl = (layer_mb << 20) / 4;
  check_fits((in_mb << 20) + layers * (layer_mb << 20) + 4096);
  uint32_t* in; CK(cudaMallocManaged(&in, nin * 4));
  std::vector<uint32_t*> buf(layers);
  for (int l = 0; l < layers; l++) CK(cudaMallocManaged(&buf[l], nl * 4));
  unsigned long long* d; CK(cudaMallocManaged(&d, 4096));
  if (getenv("DNN_ADVISE")) advise_host_read(in, nin * 4);
  wait_go();
  std::vector<double> gpu, tot;
  unsigned long long ck = 0;
  for (int it = 0; it < iters; it++) {
    double w0 = wall_s(), t0 = now_ms();
    for (size_t j = 0; j < nin; j++) in[j] = (uint32_t)(j * 2654435761u) ^ (uint32_t)it;  // CPU rewrites input
    double t1 = now_ms();
    layer_k<<<2048, 256>>>(in, nin, buf[0], nl, 1);
    for (int l = 1; l < layers; l++) layer_k<<<2048, 256>>>(buf[l - 1], nl, buf[l], nl, l + 1);
    CK(cudaDeviceSynchronize());
    double t2 = now_ms();
    unsigned long long c = checksum(buf[layers - 1], nl, d);
    ck = ck * 31 + c;
    gpu.push_back(t2 - t1); tot.push_back(t2 - t0);
    printf("{\"event\":\"iter\",\"bench\":\"dnn\",\"iter\":%d,\"cpu_ms\":%.3f,\"gpu_ms\":%.3f,\"checksum\":\"%llx\",\"w0\":%.6f,\"w1\":%.6f}\n",
           it, t1 - t0, t2 - t1, c, w0, wall_s());
    fflush(stdout);
  }
  summary("dnn", gpu, tot, ck);
  return 0;
}

static int stream(int iters, int nbuf, size_t buf_mb) {
  size_t n = (buf_mb << 20) / 4;
  check_fits((size_t)nbuf * (buf_mb << 20) + 4096);
  std::vector<uint32_t*> b(nbuf);
  for (int i = 0; i < nbuf; i++) {
    CK(cudaMallocManaged(&b[i], n * 4));
    for (size_t j = 0; j < n; j += 1) b[i][j] = (uint32_t)(j + i);
  }
  // STREAM_HOST=N: the first N buffers advised to stay in host memory and
  // read and written there by the GPU (what a user could do by hand).
  int nhost = getenv("STREAM_HOST") ? atoi(getenv("STREAM_HOST")) : 0;
  for (int i = 0; i < nhost && i < nbuf; i++) advise_host_read(b[i], n * 4);
  unsigned long long* d; CK(cudaMallocManaged(&d, 4096));
  wait_go();
  std::vector<double> gpu, tot;
  for (int it = 0; it < iters; it++) {
    double w0 = wall_s(), t0 = now_ms();
    for (int i = 1; i < nbuf; i++) stream_k<<<2048, 256>>>(b[i - 1], b[i], n, it);
    stream_k<<<2048, 256>>>(b[nbuf - 1], b[0], n, it);
    CK(cudaDeviceSynchronize());
    double t1 = now_ms();
    gpu.push_back(t1 - t0); tot.push_back(t1 - t0);
    printf("{\"event\":\"iter\",\"bench\":\"stream\",\"iter\":%d,\"gpu_ms\":%.3f,\"w0\":%.6f,\"w1\":%.6f}\n", it, t1 - t0, w0, wall_s());
    fflush(stdout);
  }
  unsigned long long ck = 0;
  for (int i = 0; i < nbuf; i++) ck = ck * 31 + checksum(b[i], n, d);
  summary("stream", gpu, tot, ck);
  return 0;
}

static int randomb(int iters, size_t mb, double cpu_frac) {
  size_t n = (mb << 20) / 4, pages = n / 1024, blocks = (mb << 20) >> 21;
  check_fits((mb << 20) + 4096);
  uint32_t* b; CK(cudaMallocManaged(&b, n * 4));
  for (size_t j = 0; j < n; j++) b[j] = (uint32_t)j;
  unsigned long long* d; CK(cudaMallocManaged(&d, 4096));
  wait_go();
  std::vector<double> gpu, tot;
  unsigned long long ck = 0;
  uint64_t rs = 12345;
  for (int it = 0; it < iters; it++) {
    double w0 = wall_s(), t0 = now_ms();
    size_t k = (size_t)(blocks * cpu_frac);
    for (size_t i = 0; i < k; i++) {  // CPU touches random blocks: they move to the CPU
      rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t blk = (rs >> 33) % blocks;
      b[blk * (1 << 19)] += 1;
    }
    double t1 = now_ms();
    *d = 0;
    random_k<<<1024, 256>>>(b, pages, (uint32_t)it, d, 16);
    CK(cudaDeviceSynchronize());
    double t2 = now_ms();
    ck = ck * 31 + *d;
    gpu.push_back(t2 - t1); tot.push_back(t2 - t0);
    printf("{\"event\":\"iter\",\"bench\":\"random\",\"iter\":%d,\"cpu_ms\":%.3f,\"gpu_ms\":%.3f,\"w0\":%.6f,\"w1\":%.6f}\n",
           it, t1 - t0, t2 - t1, w0, wall_s());
    fflush(stdout);
  }
  summary("random", gpu, tot, ck);
  return 0;
}

// Allocates MB of managed memory, writes it from the CPU (populated,
// resident on the CPU), prints the base of its 2 MB-aligned part and
// sleeps: a live CUDA process whose memory another process migrates
// (migbench, which takes whole 2 MB blocks as prescientd does).
static int hold(size_t mb, int secs) {
  size_t n = mb << 20, blk = 2u << 20;
  check_fits(n + blk);
  uint8_t* raw; CK(cudaMallocManaged(&raw, n + blk));
  uint8_t* b = (uint8_t*)(((uintptr_t)raw + blk - 1) & ~(uintptr_t)(blk - 1));
  memset(raw, 1, n + blk);
  printf("{\"event\":\"hold\",\"base\":\"%p\",\"bytes\":%zu,\"pid\":%d}\n", (void*)b, n, (int)getpid());
  fflush(stdout);
  sleep(secs);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) { fprintf(stderr, "usage: see the header of umbench.cu\n"); return 1; }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CK(cudaFree(0));
  if (!strcmp(argv[1], "bw") && argc == 3) return bw(atol(argv[2]));
  if (!strcmp(argv[1], "dnn") && argc == 6) return dnn(atoi(argv[2]), atol(argv[3]), atoi(argv[4]), atol(argv[5]));
  if (!strcmp(argv[1], "stream") && argc == 5) return stream(atoi(argv[2]), atoi(argv[3]), atol(argv[4]));
  if (!strcmp(argv[1], "random") && argc == 5) return randomb(atoi(argv[2]), atol(argv[3]), atof(argv[4]));
  if (!strcmp(argv[1], "hold") && argc == 4) return hold(atol(argv[2]), atoi(argv[3]));
  fprintf(stderr, "bad arguments\n");
  return 1;
}
