/*
 * python/xsalloc/csrc/contexts: the Python stacks (torch's GatheredContext)
 * that xsalloc's C core cannot hold, kept for snapshots and traces.
 *
 * Design: torch's recordHistory gives a recorder; while it records, each
 * malloc (and, with context="all", each free) gathers the stack. A live
 * block's stack is kept by its address (a snapshot's context_when_allocated);
 * the events of one call are marked with a tag (xsa_set_trace_tag) and the
 * stack is kept by tag, as long as xsalloc's history ring can still hold
 * those events (a trace entry's frames). One mutex guards the maps; the
 * flags the hot paths test first are atomics.
 */
#pragma once

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common.h"

namespace xsalloc_torch {

class Contexts {
 public:
  // torch's recordHistory: xsalloc's history ring and what is gathered.
  void record_history(bool enabled, CDA::CreateContextFn recorder, size_t max_entries, CDA::RecordContext when,
                      const std::vector<std::string>& skip_actions);
  bool recording() const { return recording_; }

  // A malloc about to be made: the stack to keep (nullptr when none is
  // gathered) and the tag to mark its events with (0: none).
  Context gather_for_malloc(uint64_t* tag);
  // The malloc of p succeeded with stack ctx (not nullptr).
  void keep_live(void* p, Context ctx);
  // Forgets ptr's stack; true when the free's events are tagged with the
  // freeing stack (the caller clears the tag after the free).
  bool forget(void* ptr);
  // Forgets the stacks of blocks a checkpoint's restore freed.
  void forget(void* const* ptrs, size_t n);

  // For snapshot.cpp, with mutex() held: the stack of a tagged event, of a
  // live block; whether an action is left out of traces.
  std::mutex& mutex() { return mu_; }
  Context of_event(const xsa_history_entry& e) const;
  Context of_block(void* addr) const;
  bool skipped(CDA::TraceEntry::Action a) const { return skip_.count((int)a) != 0; }

 private:
  Context gather();
  uint64_t remember(const Context& ctx, bool in_trace);

  std::mutex mu_;  // what follows, but the atomics
  std::atomic<bool> recording_{false}, contexts_on_{false}, has_live_{false};
  std::atomic<CDA::CreateContextFn> recorder_{nullptr};
  std::atomic<CDA::RecordContext> when_{CDA::RecordContext::NEVER};
  size_t max_entries_ = 1;
  uint64_t last_tag_ = 0;
  std::deque<std::pair<uint64_t, Context>> tagged_;  // tags in increasing order
  std::unordered_map<void*, Context> live_;
  std::unordered_set<int> skip_;  // TraceEntry::Action values
};

}  // namespace xsalloc_torch
