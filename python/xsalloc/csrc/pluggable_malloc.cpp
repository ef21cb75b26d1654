/*
 * python/xsalloc/csrc/pluggable_malloc: the allocation function of the
 * pluggable path (xsalloc.torch.use(adapter=False)), which raises
 * torch.OutOfMemoryError where xsa_torch_malloc would return NULL.
 *
 * torch's CUDAPluggableAllocator does not check what its malloc returns: a
 * NULL becomes a tensor at address 0 and, at its first use, an illegal
 * memory access. So this file, a plain shared library (not a Python
 * module) built against c10's headers only, throws c10's own exceptions
 * from the malloc torch calls: out of memory as c10::OutOfMemoryError
 * (torch.OutOfMemoryError, with xsalloc's report: PyTorch's text), any
 * other failure as c10::Error (RuntimeError). They pass through torch's
 * C++ to its Python bindings, as its own allocator's do. It needs only
 * c10's exception types, so it still builds for a torch whose allocator
 * interface the adapter (adapter.cpp) does not match.
 */
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

#include "xsalloc/pytorch.h"

extern "C" __attribute__((visibility("default"))) void* xsa_torch_pluggable_malloc(ssize_t size, int device,
                                                                                    void* stream) {
  if (size <= 0) return nullptr;
  void* p = nullptr;
  xsa_status st = xsa_ctx_malloc(&p, static_cast<size_t>(size), device, stream);
  if (st == XSA_SUCCESS) return p;
  c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  if (st == XSA_ERROR_OUT_OF_MEMORY) throw c10::OutOfMemoryError(where, xsa_last_error());
  throw c10::Error(where, std::string("xsalloc: allocating ") + std::to_string(size) + " bytes on device " +
                              std::to_string(device) + ": " + xsa_last_error());
}

extern "C" __attribute__((visibility("default"))) void xsa_torch_pluggable_free(void* ptr, ssize_t size, int device,
                                                                                void* stream) {
  xsa_torch_free(ptr, size, device, stream);
}
