/*
 * python/xsalloc/csrc/adapter: xsalloc as torch's CUDA allocator:
 * c10::cuda::CUDACachingAllocator's CUDAAllocator interface over xsalloc's
 * C API (xsalloc/xsalloc.h, xsalloc/pytorch.h), and install().
 *
 * Design: pip install compiles csrc/ as a torch C++ extension against the
 * torch that is installed (xsalloc.torch.use() does it at first use when
 * pip could not: python/xsalloc/_adapter.py), linked to the package's
 * libxsalloc.so; use() imports it and calls install(), which makes an
 * Adapter torch's allocator the way
 * torch.cuda.memory.change_current_allocator does, and tells torch's own
 * settings what xsalloc's are (torch_settings.cpp).
 * Every call goes straight to the C library; the adapter adds only what the
 * C core cannot hold: torch's own objects. Python stacks (GatheredContext)
 * for snapshots are kept by contexts.cpp, and snapshot.cpp turns xsalloc's
 * snapshots and history into torch's. Pool routing calls torch's
 * std::function filter through a C trampoline, and a MemPool's own
 * allocator becomes xsalloc's alloc/free pair over torch's allocator
 * object. Calls other than malloc/free (which keep the thread's CUDA
 * context themselves, xsa_ctx_*) keep the runtime's current device with a
 * guard, since the driver may make another device's primary context
 * current.
 */
#include <pybind11/pybind11.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cstdio>
#include <atomic>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common.h"
#include "contexts.h"
#include "snapshot.h"
#include "torch_settings.h"

namespace xsalloc_torch {
namespace {

using Filter = std::function<bool(cudaStream_t)>;

void free_block(void* ptr);

// The deleter of getIpcDevPtr's pointer. torch drops it before it
// synchronizes the receiver's stream, so the device's queued work is
// waited for here, before the unmap, as torch's own allocator does.
void close_import(c10::DeviceIndex device, void* base) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaErrorCudartUnloading) return;  // exiting: the driver takes it all back
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fprintf(stderr, "xsalloc: waiting for the work on a CUDA tensor from another process: %s\n", cudaGetErrorString(err));
    (void)cudaGetLastError();
  }
  if (xsa_ipc_close(base) != XSA_SUCCESS)
    fprintf(stderr, "xsalloc: closing a CUDA tensor from another process at %p: %s\n", base, xsa_last_error());
  if (current >= 0) cudaSetDevice(current);
}

// A checkpoint of cudagraph trees (getCheckpointState): the live blocks
// of one pool, what xsa_mempool_restore brings it back to.
struct PoolCheckpoint final : CCA::AllocatorState {
  c10::DeviceIndex device;
  c10::MempoolId_t id;
  std::vector<xsa_live_block> live;
};

// A MemPool's own allocator (torch.cuda.MemPool(allocator)) as xsalloc's
// C pair. The pool owns this record and keeps torch's allocator object
// alive through it until the pool's last segment went back through free
// (xsalloc calls pool_release then), so a tensor freed after the MemPool
// and the Python allocator are gone still frees through it. torch's
// caching allocator calls raw_alloc / raw_delete the same way. xsalloc
// calls these under its device lock.
struct PoolAllocator {
  std::shared_ptr<CCA::CUDAAllocator> allocator;
};

// What the pool's allocator threw in the calling thread's last pool_alloc:
// malloc_on rethrows it when the malloc fails, as torch would let it out.
thread_local std::exception_ptr pool_alloc_error;

void* pool_alloc(void* ctx, size_t size, int device, void* stream) {
  pool_alloc_error = nullptr;
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    return static_cast<PoolAllocator*>(ctx)->allocator->raw_alloc_with_stream(size, static_cast<cudaStream_t>(stream));
  } catch (...) {
    pool_alloc_error = std::current_exception();
    return nullptr;  // out of memory for xsalloc
  }
}

void pool_free(void* ctx, void* ptr, size_t, int device, void*) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    static_cast<PoolAllocator*>(ctx)->allocator->raw_delete(ptr);
  } catch (const std::exception& e) {
    fprintf(stderr, "xsalloc: a MemPool's allocator failed to free %p: %s\n", ptr, e.what());
  }
}

void pool_release(void* ctx) { delete static_cast<PoolAllocator*>(ctx); }

bool call_filter(void* ctx, void* stream) {
  try {
    return (*static_cast<Filter*>(ctx))(static_cast<cudaStream_t>(stream));
  } catch (...) {
    return false;  // a filter that throws accepts nothing
  }
}

class Adapter final : public CCA::CUDAAllocator {
 public:
  // ---- allocation ----
  c10::DataPtr allocate(size_t size) override {
    c10::DeviceIndex device = c10::cuda::current_device();
    void* p = size ? malloc_on(size, device, c10::cuda::getCurrentCUDAStream(device).stream()) : nullptr;
    return {p, p, &free_block, c10::Device(c10::DeviceType::CUDA, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }
  void* raw_alloc(size_t nbytes) override {
    c10::DeviceIndex device = c10::cuda::current_device();
    return raw_alloc_with_stream(nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
  }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    return nbytes ? malloc_on(nbytes, c10::cuda::current_device(), stream) : nullptr;
  }
  void raw_delete(void* ptr) override {
    check("raw_delete", free_tagged(ptr));
  }
  // Called by the deleter of every tensor's memory: it cannot throw.
  void release(void* ptr) {
    if (free_tagged(ptr) != XSA_SUCCESS) fprintf(stderr, "xsalloc: freeing %p: %s\n", ptr, xsa_last_error());
  }

  // ---- device state ----
  void init(int /*device_count: xsalloc counts its own*/) override {
    int count = 0;
    check("init", xsa_device_count(&count));
    initialized_ = true;
  }
  bool initialized() override { return initialized_; }
  // xsalloc's fraction, which per_process_memory_fraction in its settings
  // may have set before torch asked.
  double getMemoryFraction(c10::DeviceIndex device) override {
    double fraction = 1.0;
    check("getMemoryFraction", xsa_get_memory_fraction(device, &fraction));
    return fraction;
  }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    KeepDevice keep;
    check("setMemoryFraction", xsa_set_memory_fraction(fraction, device));
  }
  void enable(bool value) override {
    require(value, "the allocator cannot be disabled; use torch's own allocator instead");
  }
  bool isEnabled() const override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    // xsalloc releases every pool's free memory, released pools' included.
    check("emptyCache", xsa_ctx_empty_cache());
  }
  void cacheInfo(c10::DeviceIndex device, size_t* largest) override {
    size_t cached = 0, big = 0;
    {
      KeepDevice keep;
      check("cacheInfo", xsa_cache_info(device, &cached, &big));
    }
    if (big == 0) {  // as PyTorch: nothing cached, so what the device has free
      size_t free = 0, total = 0;
      c10::cuda::CUDAGuard guard(device);
      C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      big = free;
    }
    *largest = big;
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    void* base = nullptr;
    check("getBaseAllocation", xsa_get_base_allocation(ptr, &base, size));
    return base;
  }
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (!ptr.get() || ptr.get_deleter() != &free_block) return;  // not xsalloc's memory
    check("recordStream", xsa_record_stream(ptr.get(), stream.stream()));
  }
  std::vector<CCA::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override {
    std::map<std::pair<void*, bool>, size_t> sizes;
    each_segment(device, [&](const xsa_snap_segment& s, const xsa_device_snapshot&) {
      if (s.expandable) sizes[{s.stream, !s.large}] += s.total_size;
    });
    std::vector<CCA::StreamSegmentSize> out;
    for (auto& [key, size] : sizes) out.emplace_back(static_cast<cudaStream_t>(key.first), key.second, size);
    return out;
  }

  // ---- statistics ----
  CDA::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    xsa_device_stats s;
    check("getDeviceStats", xsa_get_stats(device, &s));
    CDA::DeviceStats d;
    auto one = [](c10::CachingAllocator::Stat& to, const xsa_stat& from) {
      to.current = from.current, to.peak = from.peak, to.allocated = from.allocated, to.freed = from.freed;
    };
    auto all = [&](c10::CachingAllocator::StatArray& to, const xsa_stat* from) {
      for (int i = 0; i < XSA_STAT_TYPES; i++) one(to[i], from[i]);
    };
    all(d.allocation, s.allocation), all(d.segment, s.segment), all(d.active, s.active);
    all(d.inactive_split, s.inactive_split), all(d.allocated_bytes, s.allocated_bytes);
    all(d.reserved_bytes, s.reserved_bytes), all(d.active_bytes, s.active_bytes);
    all(d.inactive_split_bytes, s.inactive_split_bytes), all(d.requested_bytes, s.requested_bytes);
    one(d.oversize_allocations, s.oversize_allocations), one(d.oversize_segments, s.oversize_segments);
    d.num_alloc_retries = s.num_alloc_retries, d.num_ooms = s.num_ooms;
    d.num_sync_all_streams = s.num_sync_all_streams, d.num_device_alloc = s.num_device_alloc;
    d.num_device_free = s.num_device_free, d.max_split_size = s.max_split_size;
    return d;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check("resetAccumulatedStats", xsa_reset_accumulated_stats(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override { check("resetPeakStats", xsa_reset_peak_stats(device)); }

  // ---- memory pools: CUDA graphs, cudagraph trees, MemPool ----
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id, Filter filter) override {
    auto f = std::make_unique<Filter>(std::move(filter));
    KeepDevice keep;
    std::lock_guard<std::mutex> g(filters_mu_);
    check("beginAllocateToPool", xsa_begin_allocate_to_pool(device, pool_id(id), call_filter, f.get()));
    filters_[{device, id}] = std::move(f);
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id) override {
    KeepDevice keep;
    std::lock_guard<std::mutex> g(filters_mu_);
    xsa_status st = xsa_end_allocate_to_pool(device, pool_id(id));
    filters_.erase({device, id});  // the routing is over even on an error (xsalloc.h)
    check("endAllocateToPool", st);
  }
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) override {
    KeepDevice keep;
    check("releasePool", xsa_mempool_release(device, pool_id(id)));
  }
  // MemPool(allocator): xsalloc caches and splits blocks in segments from
  // that allocator (xsa_mempool_create_with_allocator). xsalloc itself as
  // the allocator is a MemPool of xsalloc's memory.
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id,
                          std::shared_ptr<CCA::CUDAAllocator> allocator) override {
    KeepDevice keep;
    if (!allocator || allocator.get() == this) {
      check("createOrIncrefPool", xsa_mempool_create(device, pool_id(id)));
      return;
    }
    auto own = std::make_unique<PoolAllocator>(PoolAllocator{std::move(allocator)});
    xsa_mempool_allocator pair{pool_alloc, pool_free, pool_release, own.get()};
    check("createOrIncrefPool", xsa_mempool_create_with_allocator(device, pool_id(id), &pair));
    own.release();  // the pool's now: pool_release deletes it
  }
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) override {
    int uses = 0;
    check("getPoolUseCount", xsa_mempool_use_count(device, pool_id(id), &uses));
    return uses;
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t id, bool use_on_oom) override {
    KeepDevice keep;
    check("setUseOnOOM", xsa_mempool_set_use_on_oom(device, pool_id(id), use_on_oom));
  }
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t id) override {
    KeepDevice keep;
    check("setNoSplit", xsa_mempool_set_no_split(device, pool_id(id), true));
  }
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    size_t n = 0;
    bool all_expected = true;
    for (auto& [ptr, size] : live_blocks(device, id)) {
      n++;
      all_expected = all_expected && expected.count(ptr);
    }
    return all_expected && n == expected.size();
  }
  std::shared_ptr<CCA::AllocatorState> getCheckpointState(c10::DeviceIndex device, c10::MempoolId_t id) override {
    xsa_live_block* blocks = nullptr;
    size_t n = 0;
    {
      KeepDevice keep;
      check("getCheckpointState", xsa_mempool_checkpoint(device, pool_id(id), &blocks, &n));
    }
    auto state = std::make_shared<PoolCheckpoint>();
    state->device = device, state->id = id, state->live.assign(blocks, blocks + n);
    xsa_free_buffer(blocks);
    return state;
  }
  // cudagraph trees, before recording or warming up a graph after replays:
  // the pool back to a checkpoint. The delta follows torch's allocator:
  // every block allocated before (it frees them all) and every block of
  // the checkpoint (it allocates them all), as DataPtrs like allocate()'s;
  // torch gives them to the storages still alive and drops the others.
  CCA::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<CCA::AllocatorState> state) override {
    auto* ckpt = dynamic_cast<PoolCheckpoint*>(state.get());
    require(ckpt != nullptr, "setCheckpointPoolState: not a checkpoint of xsalloc's getCheckpointState");
    require(ckpt->device == device, "setCheckpointPoolState: a checkpoint of device " +
                                        std::to_string(int(ckpt->device)) + " restored on device " +
                                        std::to_string(int(device)));
    xsa_restore_delta d{};
    {
      KeepDevice keep;
      check("setCheckpointPoolState",
            xsa_mempool_restore(device, pool_id(ckpt->id), ckpt->live.data(), ckpt->live.size(), &d));
    }
    CCA::CheckpointDelta delta;
    delta.ptrs_freed.assign(d.freed, d.freed + d.n_freed);
    std::unordered_set<void*> fresh(d.allocated, d.allocated + d.n_allocated);
    for (const xsa_live_block& b : ckpt->live) {
      if (!fresh.count(b.ptr)) delta.ptrs_freed.push_back(b.ptr);  // allocated before and after
      delta.dataptrs_allocd.emplace_back(b.ptr, b.ptr, &free_block, c10::Device(c10::DeviceType::CUDA, device));
    }
    contexts_.forget(d.freed, d.n_freed);
    xsa_restore_delta_free(&d);
    return delta;
  }

  // ---- history, snapshots, trackers ----
  bool isHistoryEnabled() override { return contexts_.recording(); }
  void recordHistory(bool enabled, CDA::CreateContextFn recorder, size_t max_entries, CDA::RecordContext when,
                     bool clear, const std::vector<std::string>& skip_actions) override {
    (void)clear;  // xsalloc starts a fresh ring whenever recording starts
    contexts_.record_history(enabled, recorder, max_entries, when, skip_actions);
  }
  CCA::SnapshotInfo snapshot(c10::MempoolId_t id, bool include_traces) override {
    return xsalloc_torch::snapshot(id, include_traces, contexts_, clock_);
  }
  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> g(mu_);
    oom_observers_.push_back(std::move(observer));
  }
  void attachAllocatorTraceTracker(CDA::AllocatorTraceTracker tracker) override {
    // on_trace reads trackers_ under the device locks only: take the
    // callback away (which waits for every device) while the list grows.
    std::lock_guard<std::mutex> g(mu_);
    check("attachAllocatorTraceTracker", xsa_set_trace_callback(nullptr, nullptr));
    trackers_.push_back(std::move(tracker));
    check("attachAllocatorTraceTracker", xsa_set_trace_callback(&Adapter::on_trace, this));
  }

  // ---- several GPUs and processes ----
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    c10::cuda::CUDAGuard guard(dev);
    cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else
      C10_CUDA_CHECK(err);
    // dev reads and writes dev_to_access's expandable segments from now on.
    check("enablePeerAccess", xsa_enable_peer_access(dev_to_access, dev));
  }
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override {
    // Mapped (cuMemMap) memory needs the peer copy unless peer access is on.
    if (p2p_enabled || dst_device == src_device)
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
  }
  // torch.multiprocessing: the sender's storage is shared as xsalloc's
  // byte string (xsa_ipc_share), which any process opens; torch keeps the
  // sender's block alive until every receiver has released it.
  CCA::ShareableHandle shareIpcHandle(void* ptr) override {
    void* bytes = nullptr;
    size_t len = 0, offset = 0;
    xsa_status st;
    {
      KeepDevice keep;
      st = xsa_ipc_share(ptr, &bytes, &len, &offset);
    }
    if (st != XSA_SUCCESS) fail("sending a CUDA tensor to another process: " + last_error());
    std::string handle(static_cast<const char*>(bytes), len);
    xsa_free_buffer(bytes);
    return {static_cast<ptrdiff_t>(offset), std::move(handle)};
  }
  // The receiver: torch adds the offset, and calls this with the tensor's
  // device current. The same bytes open once (xsalloc counts the opens).
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override {
    c10::DeviceIndex device = c10::cuda::current_device();
    void* base = nullptr;
    {
      KeepDevice keep;
      check("opening a CUDA tensor sent by another process", xsa_ipc_open(handle.data(), handle.size(), device, &base));
    }
    return std::shared_ptr<void>(base, [device](void* p) { close_import(device, p); });
  }
  std::string name() override { return "xsalloc"; }

 private:
  void* malloc_on(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
    uint64_t tag = 0;
    Context ctx = contexts_.gather_for_malloc(&tag);
    void* p = nullptr;
    if (tag) xsa_set_trace_tag(tag);
    xsa_status st = xsa_ctx_malloc(&p, size, device, stream);
    if (tag) xsa_set_trace_tag(0);
    if (st == XSA_SUCCESS) {
      if (ctx) contexts_.keep_live(p, std::move(ctx));
      return p;
    }
    if (pool_alloc_error) std::rethrow_exception(std::exchange(pool_alloc_error, nullptr));
    std::string why = last_error();
    if (st == XSA_ERROR_OUT_OF_MEMORY) out_of_memory(device, why);
    fail("allocating " + std::to_string(size) + " bytes on device " + std::to_string(int(device)) + ": " + why);
  }

  [[noreturn]] void out_of_memory(c10::DeviceIndex device, const std::string& why) {
    std::vector<CCA::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> g(mu_);
      observers = oom_observers_;
    }
    // Only observers need the figures: without them no xsalloc call follows
    // the failed malloc, so xsa_last_error() still holds its report (a
    // successful call clears it). Observers may call anything.
    if (!observers.empty()) {
      size_t free = 0, total = 0;
      {
        c10::cuda::CUDAGuard guard(device);
        if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
      }
      xsa_device_stats s;
      size_t allocated = xsa_get_stats(device, &s) == XSA_SUCCESS ? (size_t)s.allocated_bytes[XSA_STAT_ALL].current : 0;
      for (auto& o : observers) o(device, allocated, total, free);
    }
    // xsalloc's report is PyTorch's message, then xsalloc's detail (pool.c):
    // thrown as it is, so torch's text and xsa_last_error() are the same.
    throw c10::OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, why);
  }

  xsa_status free_tagged(void* ptr) {
    bool tagged = contexts_.forget(ptr);
    xsa_status st = xsa_ctx_free(ptr);
    if (tagged) xsa_set_trace_tag(0);  // later events of this thread are not this free's
    return st;
  }

  static void on_trace(int device, const xsa_history_entry* e, void* user) {
    auto* self = static_cast<Adapter*>(user);
    if (e->action == XSA_ACT_RECORD_STREAM) return;
    CDA::TraceEntry t = trace_entry(device, *e, nullptr, c10::getApproximateTime());
    for (auto& tracker : self->trackers_) tracker(t);  // never growing while set (attachAllocatorTraceTracker)
  }

  std::mutex mu_;
  std::atomic<bool> initialized_{false};
  std::vector<CCA::OutOfMemoryObserver> oom_observers_;
  std::vector<CDA::AllocatorTraceTracker> trackers_;

  std::mutex filters_mu_;
  std::map<std::pair<c10::DeviceIndex, c10::MempoolId_t>, std::unique_ptr<Filter>> filters_;

  Contexts contexts_;
  const Clock clock_;

};

// Never destroyed: a tensor's deleter may run on another thread while the
// process exits, after static destructors have started.
Adapter* the_adapter = nullptr;

void free_block(void* ptr) {
  if (ptr) the_adapter->release(ptr);
}

// Makes the adapter torch's CUDA allocator (before CUDA is initialised).
// torch.cuda reaches it through CUDACachingAllocator::get(), which
// changeCurrentAllocator sets; torch.accelerator's memory API (memory_stats,
// empty_cache, ...) through c10::GetAllocator(kCUDA) (getDeviceAllocator),
// which it leaves at torch's own allocator, never initialised: the adapter
// registers there too, at the highest priority, so that no registration of
// torch's own (priority 0) can take the place back.
// The adapter lives for the whole process: torch holds it through a
// shared_ptr whose deleter does nothing.
void install() {
  require(!the_adapter, "the adapter is installed already");
  auto* adapter = new Adapter();
  std::shared_ptr<Adapter> held(adapter, [](Adapter*) {});
  torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(held);
  c10::SetAllocator(c10::DeviceType::CUDA, adapter, std::numeric_limits<uint8_t>::max());
  require(c10::GetAllocator(c10::DeviceType::CUDA) == adapter,
          "c10::SetAllocator(kCUDA) kept another allocator: torch.accelerator's memory API would miss xsalloc");
  the_adapter = adapter;
}

}  // namespace
}  // namespace xsalloc_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "xsalloc as torch's CUDA allocator (CUDAAllocator over libxsalloc.so)";
  m.def("install", &xsalloc_torch::install, "make xsalloc torch's CUDA allocator; before CUDA is initialised");
  m.def("sync_torch_settings", &xsalloc_torch::sync_torch_settings,
        "tell torch's own allocator settings (c10) xsalloc's: what other code reads there is then xsalloc's");
  m.def("torch_settings", &xsalloc_torch::torch_settings,
        "torch's own allocator settings as c10 holds them: (expandable_segments as CUDAAllocatorConfig says, "
        "max_split_size, garbage_collection_threshold, last settings string)");
}
