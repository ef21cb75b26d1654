/*
 * python/xsalloc/csrc/snapshot: xsalloc's snapshots and history as torch's
 * (SnapshotInfo, SegmentInfo, BlockInfo, TraceEntry), with the Python
 * stacks contexts.h kept, and the segment walks other calls need.
 *
 * Design: torch stamps events with its approximate clock (the TSC) and
 * converts them itself; xsalloc stamps CLOCK_MONOTONIC, so Clock maps one
 * onto the other with the rate measured since the adapter was made.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common.h"
#include "contexts.h"

namespace xsalloc_torch {

class Clock {
 public:
  // torch's approximate time of a CLOCK_MONOTONIC stamp taken before now.
  struct Map {
    uint64_t mono_now;
    c10::approx_time_t approx_now;
    double approx_per_ns;
    c10::approx_time_t operator()(uint64_t mono) const {
      return approx_now - (c10::approx_time_t)((double)(mono_now - std::min(mono, mono_now)) * approx_per_ns);
    }
  };
  Map now() const;
  static uint64_t monotonic_ns();

 private:
  const uint64_t mono_at_start_ = monotonic_ns();
  const c10::approx_time_t approx_at_start_ = c10::getApproximateTime();
};

CDA::TraceEntry::Action trace_action(xsa_action a);
CDA::TraceEntry trace_entry(int device, const xsa_history_entry& e, Context ctx, c10::approx_time_t when);

// torch's snapshot of memory pool id (every pool for {0, 0}), with the
// history when include_traces.
CCA::SnapshotInfo snapshot(c10::MempoolId_t id, bool include_traces, Contexts& contexts, const Clock& clock);

// Calls f(segment, snapshot) for each segment of device.
template <typename F>
void each_segment(c10::DeviceIndex device, F f) {
  xsa_device_snapshot s;
  check("snapshot", xsa_device_snapshot_take(device, &s));
  for (size_t i = 0; i < s.n_segments; i++) f(s.segments[i], s);
  xsa_device_snapshot_free(&s);
}

// The allocated blocks of memory pool id on device: address and size.
std::vector<std::pair<void*, size_t>> live_blocks(c10::DeviceIndex device, c10::MempoolId_t id);

}  // namespace xsalloc_torch
