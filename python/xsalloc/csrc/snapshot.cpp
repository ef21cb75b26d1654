// python/xsalloc/csrc/snapshot: xsalloc's snapshots and history as torch's
// (design in snapshot.h).
#include "snapshot.h"

#include <time.h>

#include <algorithm>
#include <iterator>

namespace xsalloc_torch {

uint64_t Clock::monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

Clock::Map Clock::now() const {
  Map m{monotonic_ns(), c10::getApproximateTime(), 1.0};
  if (m.mono_now > mono_at_start_)
    m.approx_per_ns = (double)(m.approx_now - approx_at_start_) / (double)(m.mono_now - mono_at_start_);
  return m;
}

CDA::TraceEntry::Action trace_action(xsa_action a) {
  switch (a) {
    case XSA_ACT_ALLOC: return CDA::TraceEntry::ALLOC;
    case XSA_ACT_FREE_REQUESTED: return CDA::TraceEntry::FREE_REQUESTED;
    case XSA_ACT_FREE_COMPLETED: return CDA::TraceEntry::FREE_COMPLETED;
    case XSA_ACT_SEGMENT_ALLOC: return CDA::TraceEntry::SEGMENT_ALLOC;
    case XSA_ACT_SEGMENT_FREE: return CDA::TraceEntry::SEGMENT_FREE;
    case XSA_ACT_SEGMENT_MAP: return CDA::TraceEntry::SEGMENT_MAP;
    case XSA_ACT_SEGMENT_UNMAP: return CDA::TraceEntry::SEGMENT_UNMAP;
    default: return CDA::TraceEntry::OOM;
  }
}

CDA::TraceEntry trace_entry(int device, const xsa_history_entry& e, Context ctx, c10::approx_time_t when) {
  return CDA::TraceEntry(trace_action(e.action), device, e.addr, e.size, e.stream, {0, 0}, when, std::move(ctx));
}

// Called with contexts.mutex() held.
static CDA::SegmentInfo segment_info(int device, const xsa_snap_segment& s, const xsa_snap_block* blocks,
                                     const Contexts& contexts) {
  CDA::SegmentInfo si;
  si.device = device;
  si.address = s.addr, si.total_size = s.total_size, si.requested_size = s.requested_size;
  si.allocated_size = s.allocated_size, si.active_size = s.active_size;
  si.stream = s.stream, si.is_large = s.large, si.is_expandable = s.expandable;
  si.owner_private_pool_id = {s.pool_id.first, s.pool_id.second};
  for (size_t i = 0; i < s.n_blocks; i++) {
    const xsa_snap_block& b = blocks[s.first_block + i];
    CDA::BlockInfo bi;
    bi.size = b.size, bi.requested_size = b.requested;
    bi.allocated = b.state == XSA_SNAP_ALLOCATED, bi.active = b.state != XSA_SNAP_INACTIVE;
    if (bi.active) bi.context_when_allocated = contexts.of_block(reinterpret_cast<void*>(b.addr));
    si.blocks.push_back(std::move(bi));
  }
  return si;
}

CCA::SnapshotInfo snapshot(c10::MempoolId_t id, bool include_traces, Contexts& contexts, const Clock& clock) {
  CCA::SnapshotInfo info;
  int n = 0;
  check("snapshot", xsa_device_count(&n));
  info.device_traces.resize(n);
  Clock::Map at = clock.now();
  {
    std::lock_guard<std::mutex> g(contexts.mutex());
    for (int d = 0; d < n; d++) {
      xsa_device_snapshot s;
      check("snapshot", xsa_device_snapshot_take(d, &s));
      for (size_t i = 0; i < s.n_segments; i++) {
        const xsa_snap_segment& seg = s.segments[i];
        if ((id.first || id.second) && (seg.pool_id.first != id.first || seg.pool_id.second != id.second)) continue;
        info.segments.push_back(segment_info(d, seg, s.blocks, contexts));
      }
      if (include_traces)
        for (size_t i = 0; i < s.n_history; i++) {
          const xsa_history_entry& e = s.history[i];
          if (e.action == XSA_ACT_RECORD_STREAM || contexts.skipped(trace_action(e.action))) continue;
          info.device_traces[d].push_back(trace_entry(d, e, contexts.of_event(e), at(e.time_ns)));
        }
      xsa_device_snapshot_free(&s);
    }
  }
  xsa_settings set;
  check("snapshot", xsa_get_settings(&set));
  auto& c = info.config_metadata;
  c.garbage_collection_threshold = set.garbage_collection_threshold;
  c.max_split_size = set.max_split_size;
  c.pinned_num_register_threads = 1;
  c.expandable_segments = set.expandable_segments;
  c.release_lock_on_malloc = false;
  c.pinned_use_host_register = false;
  c.graph_capture_record_stream_reuse = false;
  c.last_allocator_settings = set.text ? set.text : "";
  c.roundup_power2_divisions.assign(std::begin(set.roundup_power2_divisions), std::end(set.roundup_power2_divisions));
  return info;
}

std::vector<std::pair<void*, size_t>> live_blocks(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::vector<std::pair<void*, size_t>> out;
  each_segment(device, [&](const xsa_snap_segment& seg, const xsa_device_snapshot& s) {
    if (seg.pool_id.first != id.first || seg.pool_id.second != id.second) return;
    for (size_t i = 0; i < seg.n_blocks; i++) {
      const xsa_snap_block& b = s.blocks[seg.first_block + i];
      if (b.state == XSA_SNAP_ALLOCATED) out.emplace_back(reinterpret_cast<void*>(b.addr), b.size);
    }
  });
  return out;
}

}  // namespace xsalloc_torch
