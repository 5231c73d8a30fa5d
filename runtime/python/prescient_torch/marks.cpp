// Prescient's torch helper: forwards PyTorch's caching-allocator events to
// prescient-runtime (preloaded by `prescientctl run`), which turns them into
// dead and alive marks for prescientd (runtime/src/marks/mod.rs states why
// no discard can then hit live memory).
//
// PyTorch has no Python binding for attachAllocatorTraceTracker, so this
// file is compiled at first use against the installed torch's headers
// (prescient_torch/__init__.py) and loaded with ctypes. It is C++ only
// because the tracker is a std::function over a C++ struct; everything
// else happens in the runtime (Rust).
//
// The tracker runs under the allocator's lock ("Callbacks should not include
// any Pytorch call"): it calls only the runtime's C function.
#include <c10/cuda/CUDACachingAllocator.h>

#include <dlfcn.h>
#include <cstdint>

namespace {

using TraceEntry = c10::cuda::CUDACachingAllocator::TraceEntry;
// prescient_allocator_event(action, device, addr, size, stream), marks/mod.rs.
using EventFn = void (*)(int, int, uint64_t, uint64_t, void*);
EventFn sink = nullptr;

// The runtime's numbering (marks/mod.rs EV_*); 0: not forwarded.
int action_of(const TraceEntry& te) {
  switch (te.action_) {
    case TraceEntry::ALLOC:
      return 1;
    case TraceEntry::FREE_COMPLETED:
      return 2;
    case TraceEntry::SEGMENT_ALLOC:
      return 3;
    case TraceEntry::SEGMENT_FREE:
      return 4;
    default:
      return 0;
  }
}

void track(const TraceEntry& te) {
  int a = action_of(te);
  if (a != 0) {
    sink(a, static_cast<int>(te.device_), static_cast<uint64_t>(te.addr_),
         static_cast<uint64_t>(te.size_), (void*)(te.stream_));
  }
}

}  // namespace

// Attaches the tracker to every device's allocator (call after CUDA is
// initialised: before, the allocator has no devices to attach to).
// Returns 0, or -1 when the runtime is not loaded (no marks then).
extern "C" int prescient_torch_attach() {
  sink = reinterpret_cast<EventFn>(dlsym(RTLD_DEFAULT, "prescient_allocator_event"));
  if (sink == nullptr) return -1;
  c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(track);
  return 0;
}
