/*
 * python/xsalloc/csrc/torch_settings: torch's own allocator settings (c10's
 * AcceleratorAllocatorConfig, which CUDAAllocatorConfig reads) made to say
 * what xsalloc's are.
 *
 * Code outside the allocator reads torch's settings, not the allocator:
 * ProcessGroupNCCL asks CUDAAllocatorConfig::expandable_segments() whether
 * to register memory with NCCL, and tools print them. With xsalloc the
 * allocator, torch's would otherwise still say what torch parsed from its
 * variables (expandable_segments False by default, where xsalloc's default
 * is True, and nothing of XSALLOC_CONF). At install and after every change
 * at run time, sync_torch_settings() gives torch the settings xsalloc uses,
 * in torch's own keys, through c10's setter.
 */
#pragma once

#include <pybind11/pybind11.h>

namespace xsalloc_torch {

// Gives torch's settings xsalloc's (xsa_get_settings) where they differ;
// true if anything was given.
bool sync_torch_settings();

// torch's settings as c10 holds them: (CUDAAllocatorConfig's
// expandable_segments, max_split_size, garbage_collection_threshold,
// last_allocator_settings).
pybind11::tuple torch_settings();

}  // namespace xsalloc_torch
