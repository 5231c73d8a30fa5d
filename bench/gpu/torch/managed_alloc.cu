// A PyTorch pluggable allocator over cudaMallocManaged, for running an
// unmodified training loop on Unified Memory (issue 5). Loaded with
// torch.cuda.memory.CUDAPluggableAllocator(path, "prescient_um_malloc",
// "prescient_um_free"). A pluggable allocator replaces PyTorch's caching
// allocator, so this one caches by exact size itself: freed blocks are kept
// and handed out again (last freed first), as PyTorch's own allocator does.
// That keeps addresses stable from one iteration to the next, and avoids
// cudaFree, which synchronizes the device.
//
// Dead marks (DeepUM 5.3.2), when PRESCIENT_MARKS_SOCKET names the socket
// of `prescientd attach --pid PID --marks-socket PATH` (or the service's control
// socket): a cached block holds no live data, so under a residency budget
// Prescient discards it (no copy) instead of evicting it, and migrates it
// back with no copy when it is handed out again. The rules (daemon/src/marks.rs):
// - a block is marked dead only after the GPU work queued before its free
//   has completed: an event is recorded on the free's stream, and the mark
//   is sent once the event has completed (checked on later calls);
// - a block handed out again before its mark was sent is simply taken off
//   the pending list; one whose dead mark was sent is marked alive, and the
//   allocator waits for the daemon's reply before returning it (after that
//   reply no discard of it can be in flight);
// - only the 2 MB blocks wholly inside an allocation are marked;
// - if the daemon cannot be reached or refuses, marks stop being sent
//   (nothing is discarded without them) and the job goes on.
// Like PyTorch's allocator without record_stream, this assumes a freed block
// is not in use on a stream other than its own.
//
// Build: nvcc -O2 -shared -Xcompiler -fPIC -o managed_alloc.so managed_alloc.cu
#include <cuda_runtime.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

static std::mutex mu;
static std::unordered_map<size_t, std::vector<void*>> free_by_size;
static std::unordered_map<void*, size_t> size_of;
static size_t managed_bytes = 0;

static size_t round_up(size_t n) { return (n + 511) & ~(size_t)511; }

// ---- dead / alive marks -------------------------------------------------
static const uint64_t BLOCK = 2ull << 20;
static const size_t MAX_RANGES_PER_REQUEST = 64;  // < the daemon's 4 KiB line

struct Pending {
  void* p;
  uint64_t base, len;  // the whole 2 MB blocks inside the allocation
  cudaEvent_t ev;
};

static int marks_fd = -1;
static bool marks_off = false;  // no socket configured, or the daemon gave up
static std::chrono::steady_clock::time_point next_connect;
static std::deque<Pending> pending;                 // freed, event not yet seen
static std::unordered_map<void*, std::pair<uint64_t, uint64_t>> sent_dead;
static std::vector<cudaEvent_t> event_pool;
static uint64_t stat_dead_blocks = 0, stat_alive_blocks = 0, stat_requests = 0;
static uint64_t stat_alive_wait_ns = 0, stat_errors = 0;

static const char* marks_path = nullptr;  // PRESCIENT_MARKS_SOCKET

// Whether marks are wanted at all (PRESCIENT_MARKS_SOCKET set); read once.
static bool marks_wanted() {
  static int wanted = -1;
  if (wanted < 0) {
    marks_path = getenv("PRESCIENT_MARKS_SOCKET");
    wanted = marks_path && *marks_path ? 1 : 0;
    if (!wanted) marks_off = true;
  }
  return wanted == 1 && !marks_off;
}

static void marks_give_up(const char* why) {
  fprintf(stderr, "managed_alloc: dead marks off: %s\n", why);
  if (marks_fd >= 0) close(marks_fd);
  marks_fd = -1;
  marks_off = true;
}

static bool marks_connect() {
  if (marks_fd >= 0) return true;
  if (!marks_wanted()) return false;
  auto now = std::chrono::steady_clock::now();
  if (now < next_connect) return false;
  next_connect = now + std::chrono::seconds(1);  // the daemon may not be up yet
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  strncpy(a.sun_path, marks_path, sizeof(a.sun_path) - 1);
  if (connect(fd, (sockaddr*)&a, sizeof(a)) != 0) {
    close(fd);
    return false;
  }
  marks_fd = fd;
  return true;
}

// write(2) of all of `s`, retrying EINTR (a signal handler without
// SA_RESTART must not end the marks).
static bool write_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += (size_t)n;
  }
  return true;
}

// One reply line (at most 4 KiB kept), retrying EINTR.
static bool read_line(int fd, std::string& reply) {
  char c;
  while (true) {
    ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    if (reply.size() < 4096) reply += c;
  }
}

static bool marks_send(bool dead, const std::vector<std::pair<uint64_t, uint64_t>>& r,
                       std::string& reply);

// One request line, one reply line. Returns true if the daemon applied it.
// A "busy" reply (the daemon's queue is full) is retried a few times.
static bool marks_call(bool dead, const std::vector<std::pair<uint64_t, uint64_t>>& r) {
  for (int attempt = 0; attempt < 20; attempt++) {
    std::string reply;
    if (!marks_send(dead, r, reply)) return false;
    if (reply.compare(0, 6, "{\"ok\":") == 0) return true;
    stat_errors++;
    if (reply.find("\"busy\"") != std::string::npos) {
      if (dead) return false;  // a dead mark not taken is safe: not sent
      usleep(1000 << (attempt < 6 ? attempt : 6));
      continue;
    }
    // Not attached (yet), or refused: nothing was applied. A refusal other
    // than "not attached" will not change: stop asking.
    if (reply.find("not-found") == std::string::npos) marks_give_up(reply.c_str());
    return false;
  }
  return false;
}

// Sends one request and reads its reply; false if the socket failed.
static bool marks_send(bool dead, const std::vector<std::pair<uint64_t, uint64_t>>& r,
                       std::string& reply) {
  if (r.empty() || !marks_connect()) return false;
  std::string s = dead ? "{\"cmd\":\"mark\",\"dead\":true,\"ranges\":["
                       : "{\"cmd\":\"mark\",\"dead\":false,\"ranges\":[";
  for (size_t i = 0; i < r.size(); i++) {
    char b[64];
    snprintf(b, sizeof b, "%s[%llu,%llu]", i ? "," : "", (unsigned long long)r[i].first,
             (unsigned long long)r[i].second);
    s += b;
  }
  s += "]}\n";
  if (!write_all(marks_fd, s) || !read_line(marks_fd, reply)) {
    marks_give_up("the daemon closed the socket");
    return false;
  }
  stat_requests++;
  return true;
}

// Sends dead marks for blocks whose free's event has completed.
static void marks_flush_pending() {
  if (pending.empty()) return;
  std::vector<std::pair<uint64_t, uint64_t>> r;
  std::vector<void*> ps;
  for (auto it = pending.begin(); it != pending.end() && r.size() < MAX_RANGES_PER_REQUEST;) {
    if (cudaEventQuery(it->ev) != cudaSuccess) {
      ++it;  // not yet (or an error: retried later, never marked early)
      continue;
    }
    r.push_back({it->base, it->len});
    ps.push_back(it->p);
    event_pool.push_back(it->ev);
    it = pending.erase(it);
  }
  if (marks_call(true, r)) {
    for (size_t i = 0; i < r.size(); i++) {
      sent_dead[ps[i]] = r[i];
      stat_dead_blocks += r[i].second / BLOCK;
    }
  }
}

// A cached block is about to be handed out again: returns whether it may
// be. A block marked dead whose alive mark the daemon did not confirm may
// still be discarded, so it must never hold live data again: the caller
// frees it instead (said once).
static bool marks_revive(void* p) {
  for (auto it = pending.begin(); it != pending.end(); ++it) {
    if (it->p == p) {  // its mark was never sent
      event_pool.push_back(it->ev);
      pending.erase(it);
      return true;
    }
  }
  auto d = sent_dead.find(p);
  if (d == sent_dead.end()) return true;
  auto t0 = std::chrono::steady_clock::now();
  // Waits for the daemon: after its reply no discard of p can be in flight.
  bool alive = marks_call(false, {d->second});
  if (alive) stat_alive_blocks += d->second.second / BLOCK;
  stat_alive_wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
  sent_dead.erase(d);
  if (!alive) {
    static bool said = false;
    if (!said) {
      fprintf(stderr,
              "managed_alloc: an alive mark was not confirmed; blocks marked dead are freed "
              "instead of reused (said once)\n");
      said = true;
    }
  }
  return alive;
}

static void marks_on_free(void* p, size_t n, cudaStream_t stream) {
  if (!marks_wanted()) return;
  uint64_t a = (uint64_t)p, lo = (a + BLOCK - 1) / BLOCK * BLOCK, hi = (a + n) / BLOCK * BLOCK;
  if (hi <= lo) return;  // no whole 2 MB block inside
  cudaEvent_t ev;
  if (!event_pool.empty()) {
    ev = event_pool.back();
    event_pool.pop_back();
  } else if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
    return;
  }
  if (cudaEventRecord(ev, stream) != cudaSuccess) {
    event_pool.push_back(ev);
    return;
  }
  pending.push_back({p, lo, hi - lo, ev});
}

extern "C" {

void* prescient_um_malloc(ssize_t size, int device, cudaStream_t stream) {
  (void)device; (void)stream;
  size_t n = round_up(size > 0 ? (size_t)size : 1);
  std::lock_guard<std::mutex> g(mu);
  if (marks_wanted()) marks_flush_pending();
  auto it = free_by_size.find(n);
  if (it != free_by_size.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    if (marks_revive(p)) return p;
    // Possibly still dead to the daemon: never reused.
    cudaFree(p);
    size_of.erase(p);
    managed_bytes -= n;
  }
  void* p = nullptr;
  if (cudaMallocManaged(&p, n) != cudaSuccess) return nullptr;
  size_of[p] = n;
  managed_bytes += n;
  return p;
}

void prescient_um_free(void* p, ssize_t size, int device, cudaStream_t stream) {
  (void)size; (void)device;
  std::lock_guard<std::mutex> g(mu);
  auto it = size_of.find(p);
  if (it == size_of.end()) return;
  free_by_size[it->second].push_back(p);
  marks_on_free(p, it->second, stream);
  if (marks_wanted()) marks_flush_pending();
}

// Bytes of managed memory allocated so far (kept, not returned).
size_t prescient_um_bytes(void) {
  std::lock_guard<std::mutex> g(mu);
  return managed_bytes;
}

// Mark counters: dead blocks sent, alive blocks sent, requests answered,
// nanoseconds spent waiting for alive replies, refusals; and whether marks
// are on.
void prescient_um_mark_stats(uint64_t out[6]) {
  std::lock_guard<std::mutex> g(mu);
  if (marks_wanted()) marks_flush_pending();
  out[0] = stat_dead_blocks;
  out[1] = stat_alive_blocks;
  out[2] = stat_requests;
  out[3] = stat_alive_wait_ns;
  out[4] = stat_errors;
  out[5] = marks_wanted() ? 1 : 0;
}
}
