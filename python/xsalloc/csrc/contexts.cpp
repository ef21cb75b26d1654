// python/xsalloc/csrc/contexts: the Python stacks kept for snapshots and
// traces (design in contexts.h).
#include "contexts.h"

#include <algorithm>

namespace xsalloc_torch {

void Contexts::record_history(bool enabled, CDA::CreateContextFn recorder, size_t max_entries,
                              CDA::RecordContext when, const std::vector<std::string>& skip_actions) {
  std::lock_guard<std::mutex> g(mu_);
  check("recordHistory", xsa_record_history(enabled, enabled ? std::max<size_t>(max_entries, 1) : 0));
  recording_ = enabled;
  recorder_ = enabled && when != CDA::RecordContext::NEVER ? recorder : nullptr;
  when_ = enabled ? when : CDA::RecordContext::NEVER;
  max_entries_ = std::max<size_t>(max_entries, 1);
  skip_.clear();
  for (auto& a : skip_actions) skip_.insert((int)CDA::parseTraceEntryAction(a));
  if (enabled) tagged_.clear();
  contexts_on_ = recorder_ != nullptr;
}

Context Contexts::gather() {
  CDA::CreateContextFn recorder = recorder_;
  return recorder ? recorder() : nullptr;
}

// A tag for the events of one call; its context is kept for the trace
// (in_trace) as long as the ring can still hold them.
uint64_t Contexts::remember(const Context& ctx, bool in_trace) {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t tag = ++last_tag_;
  if (in_trace) {
    tagged_.emplace_back(tag, ctx);
    if (tagged_.size() > max_entries_) tagged_.pop_front();
  }
  return tag;
}

Context Contexts::gather_for_malloc(uint64_t* tag) {
  Context ctx = contexts_on_ ? gather() : nullptr;
  *tag = ctx ? remember(ctx, when_ >= CDA::RecordContext::ALLOC) : 0;
  return ctx;
}

void Contexts::keep_live(void* p, Context ctx) {
  std::lock_guard<std::mutex> g(mu_);
  live_[p] = std::move(ctx);
  has_live_ = true;
}

bool Contexts::forget(void* ptr) {
  if (!contexts_on_ && !has_live_) return false;
  {
    std::lock_guard<std::mutex> g(mu_);
    live_.erase(ptr);
    has_live_ = !live_.empty();
  }
  Context ctx = contexts_on_ && when_ == CDA::RecordContext::ALL ? gather() : nullptr;
  if (ctx) xsa_set_trace_tag(remember(ctx, true));
  return ctx != nullptr;
}

void Contexts::forget(void* const* ptrs, size_t n) {
  if (!has_live_) return;
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < n; i++) live_.erase(ptrs[i]);
  has_live_ = !live_.empty();
}

Context Contexts::of_event(const xsa_history_entry& e) const {
  if (!e.tag) return nullptr;
  auto at = std::lower_bound(tagged_.begin(), tagged_.end(), e.tag,
                             [](const std::pair<uint64_t, Context>& t, uint64_t tag) { return t.first < tag; });
  return at != tagged_.end() && at->first == e.tag ? at->second : nullptr;
}

Context Contexts::of_block(void* addr) const {
  auto at = live_.find(addr);
  return at != live_.end() ? at->second : nullptr;
}

}  // namespace xsalloc_torch
