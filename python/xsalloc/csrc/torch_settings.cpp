// python/xsalloc/csrc/torch_settings: torch's allocator settings told
// xsalloc's (design in torch_settings.h).
#include "torch_settings.h"

#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDAAllocatorConfig.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common.h"

namespace xsalloc_torch {

namespace ACC = c10::CachingAllocator;

// xsalloc's settings in torch's keys: expandable_segments always, the keys
// torch resets to their defaults when a string leaves them out
// (max_split_size_mb, garbage_collection_threshold,
// roundup_power2_divisions) when they are not at those defaults.
static std::string in_torch_keys(const xsa_settings& s) {
  std::string out = std::string("expandable_segments:") + (s.expandable_segments ? "True" : "False");
  if (s.max_split_size != SIZE_MAX) out += ",max_split_size_mb:" + std::to_string(s.max_split_size >> 20);
  if (s.garbage_collection_threshold > 0)
    out += ",garbage_collection_threshold:" + std::to_string(s.garbage_collection_threshold);
  bool rounding = false;
  for (int i = 0; i < 16; i++) rounding = rounding || s.roundup_power2_divisions[i] != 0;
  if (!rounding) return out;
  out += ",roundup_power2_divisions:[";
  for (int i = 0; i < 16; i++)  // interval i starts at 2^i MiB, as torch numbers them
    out += (i ? "," : "") + std::to_string(1u << i) + ":" + std::to_string(s.roundup_power2_divisions[i]);
  return out + "]";
}

static bool same(const xsa_settings& s) {
  const auto& div = ACC::AcceleratorAllocatorConfig::roundup_power2_divisions();
  bool divisions = div.size() == 16;
  for (size_t i = 0; divisions && i < 16; i++) divisions = div[i] == s.roundup_power2_divisions[i];
  return divisions && ACC::AcceleratorAllocatorConfig::use_expandable_segments() == s.expandable_segments &&
         ACC::AcceleratorAllocatorConfig::max_split_size() == s.max_split_size &&
         ACC::AcceleratorAllocatorConfig::garbage_collection_threshold() == s.garbage_collection_threshold;
}

bool sync_torch_settings() {
  xsa_settings s;
  check("sync_torch_settings", xsa_get_settings(&s));
  if (same(s)) return false;
  ACC::setAllocatorSettings(in_torch_keys(s));
  return true;
}

pybind11::tuple torch_settings() {
  size_t split = ACC::AcceleratorAllocatorConfig::max_split_size();
  // Not CUDAAllocatorConfig::expandable_segments(): that inline reads the
  // setting only where PYTORCH_C10_DRIVER_API_SUPPORTED is defined, as in
  // torch's own build (ProcessGroupNCCL's reading), never in an extension's,
  // where it says False whatever the setting (seen on the H200).
  return pybind11::make_tuple(ACC::AcceleratorAllocatorConfig::use_expandable_segments(),
                              split == std::numeric_limits<size_t>::max() ? int64_t(-1) : int64_t(split),
                              ACC::AcceleratorAllocatorConfig::garbage_collection_threshold(),
                              ACC::getAllocatorSettings());
}

}  // namespace xsalloc_torch
