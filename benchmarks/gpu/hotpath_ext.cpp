// hotpath_ext: the hot-path patterns of benchmarks/hotpath.c through
// PyTorch's C++ caching allocator and through cudaMallocAsync, for
// benchmarks/gpu/compare.sh.
//
// Design: one entry point, xsa_bench(pattern, backend, ops), that does what
// hotpath.c does (the same fixed-seed sequence, from benchmarks/timing.h;
// one warm-up run, median of 7 timed runs) so the figures compare one to
// one. extern "C" with plain types, so it loads either as a load_inline
// module or through ctypes.
// Everything runs on the legacy default stream, as hotpath.c does. The
// cudaMallocAsync pool keeps its memory (release threshold UINT64_MAX), as
// PyTorch's cudaMallocAsync backend sets it.
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/timing.h"

namespace {

constexpr int kRuns = 7;
constexpr int kSlots = 64;

enum Backend { kTorch = 0, kMallocAsync = 1 };

void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void *alloc(int backend, size_t n) {
    if (backend == kTorch) return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(n, nullptr);
    void *p = nullptr;
    check(cudaMallocAsync(&p, n, nullptr), "cudaMallocAsync");
    return p;
}

void release(int backend, void *p) {
    if (backend == kTorch) c10::cuda::CUDACachingAllocator::raw_delete(p);
    else check(cudaFreeAsync(p, nullptr), "cudaFreeAsync");
}

struct Slots {
    std::vector<uint32_t> slot, size;
    void *live[kSlots];
};

// One run; ns per pair (pattern 0) or per op (pattern 1). Ends with a
// stream sync so cudaFreeAsync's deferred work is counted.
double run(int pattern, int backend, int64_t ops, Slots &s) {
    double t0 = xsa_bench_now_ns();
    for (int64_t i = 0; i < ops; i++) {
        if (pattern == 0) {
            release(backend, alloc(backend, 1 << 20));
        } else {
            void *&p = s.live[s.slot[i]];
            release(backend, p);
            p = alloc(backend, s.size[i]);
        }
    }
    check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    return (xsa_bench_now_ns() - t0) / (double)ops;
}

void setup(int backend, int64_t ops, Slots &s) {
    uint64_t rng = XSA_BENCH_SEED;
    for (int64_t i = 0; i < ops; i++) {
        s.slot.push_back((uint32_t)(xsa_bench_xorshift(&rng) % kSlots));
        s.size.push_back(xsa_bench_draw_size(&rng));
    }
    for (int i = 0; i < kSlots; i++) s.live[i] = alloc(backend, xsa_bench_draw_size(&rng));
}

void keep_async_pool_memory() {
    int dev = 0;
    cudaMemPool_t pool;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
    uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
}

}  // namespace

// Median ns of 7 runs after a warm-up; -1 on any error (printed to stderr).
extern "C" double xsa_bench(int pattern, int backend, int64_t ops) {
    try {
        if (backend == kMallocAsync) keep_async_pool_memory();
        Slots s;
        if (pattern == 1) setup(backend, ops, s);
        std::vector<double> t;
        run(pattern, backend, ops, s);
        for (int i = 0; i < kRuns; i++) t.push_back(run(pattern, backend, ops, s));
        if (pattern == 1)
            for (void *p : s.live) release(backend, p);
        return xsa_bench_median(t.data(), t.size());
    } catch (const std::exception &e) {
        fprintf(stderr, "hotpath_ext: %s\n", e.what());
        return -1;
    }
}
