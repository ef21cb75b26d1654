/*
 * python/xsalloc/csrc/common: what the torch adapter's files share: torch's
 * allocator namespaces, errors thrown as torch's, and the device guard.
 *
 * The adapter is c10::cuda::CUDACachingAllocator's CUDAAllocator interface
 * over xsalloc's C API (xsalloc/xsalloc.h, xsalloc/pytorch.h), in files
 * by job: adapter.cpp (the allocator interface, memory pools with an
 * allocator of their own, install()), contexts.cpp (the Python stacks kept
 * for snapshots and traces), snapshot.cpp (xsalloc's snapshots and history
 * as torch's SnapshotInfo and TraceEntry) and torch_settings.cpp (torch's
 * own settings told xsalloc's). pip install compiles them as one torch C++
 * extension, xsalloc.torch.use() at first use where it could not
 * (python/xsalloc/_adapter.py). pluggable_malloc.cpp is apart: the
 * pluggable path's malloc, a library of its own.
 */
#pragma once

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "xsalloc/pytorch.h"

namespace xsalloc_torch {

namespace CCA = c10::cuda::CUDACachingAllocator;
namespace CDA = c10::CachingDeviceAllocator;
using Context = std::shared_ptr<c10::GatheredContext>;

inline std::string last_error() { return xsa_last_error(); }

// Errors are thrown with messages built as std::string, never through
// TORCH_CHECK's stream formatting: torch's compiler on the H100 links part
// of libstdc++ statically into extensions, and formatting a number through
// that copy's locale crashed (SIGSEGV in codecvt, H100 device call 5).
template <typename E = c10::Error>
[[noreturn]] void fail(const std::string& msg) {
  throw E(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, "xsalloc: " + msg);
}

inline void require(bool ok, const std::string& msg) {
  if (!ok) fail(msg);
}

inline void check(const char* what, xsa_status st) {
  if (st != XSA_SUCCESS) fail(std::string(what) + ": " + last_error());
}

inline xsa_mempool_id pool_id(c10::MempoolId_t id) { return {id.first, id.second}; }

// Keeps the runtime's current device across a C call that names a device.
struct KeepDevice {
  int device = -1;
  KeepDevice() { cudaGetDevice(&device); }
  ~KeepDevice() {
    if (device >= 0) cudaSetDevice(device);
  }
};

}  // namespace xsalloc_torch
