// adapter_ab: the hot path through torch's CUDAAllocator interface, xsalloc's
// C++ adapter against torch's CUDAPluggableAllocator over xsalloc's pluggable
// entry points, in one process, for benchmarks/gpu/adapter_ab.py.
//
// Design: both sides run over the same libxsalloc.so. The adapter is the
// allocator xsalloc.torch.use() installed (CUDACachingAllocator::get(),
// checked by name); the pluggable allocator is built here with
// createCustomAllocator from the addresses of xsa_torch_malloc and
// xsa_torch_free, as torch.cuda.memory.CUDAPluggableAllocator builds it, and
// is not installed. Each side is called the two ways torch calls its
// allocator: Tensor (at::empty: allocate(n), later the DataPtr's deleter on
// its context, which both allocators make the data pointer) and Raw
// (caching_allocator_alloc/delete, cuBLAS workspaces: raw_alloc_with_stream
// and raw_delete). torch's pluggable deleter frees through the installed
// allocator (the adapter here), so the pluggable side's Tensor frees call
// what that deleter calls once installed: raw_delete through a global
// shared_ptr. Patterns as in benchmarks/hotpath.c and inproc_ab.c: pairs
// (alloc 1 MiB + free) and the 64-slot window over hotpath.c's fixed-seed
// sequence (benchmarks/timing.h), cut into kChunks batches. A round times a
// batch of each pattern, each way, on each side, the two sides of a case
// back to back, the adapter first in even rounds and second in odd ones, so
// both see the same clock; the script does the statistics.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/timing.h"

namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;

constexpr int kSlots = 64;
constexpr int kChunks = 8;  // round r runs chunk r % kChunks of the window sequence
constexpr int kSides = 2;   // adapter, pluggable
constexpr size_t kPairBytes = size_t(1) << 20;

// What torch's current_custom_allocator would hold were the pluggable
// allocator installed.
std::shared_ptr<CCA::CUDAAllocator> pluggable;

// torch's custom_raw_deleter, for the pluggable allocator as if installed.
void pluggable_deleter(void* ctx) { pluggable->raw_delete(ctx); }

struct Side {
    std::string name;
    CCA::CUDAAllocator* a;
    c10::DeleterFnPtr deleter;  // frees allocate()'s memory as its DataPtr would, installed
    cudaStream_t stream;
    void* slot[2][kSlots];      // the window's live blocks, per way
};

struct Tensor {
    static constexpr int kWay = 0;
    static void* alloc(Side& s, size_t n) { return s.a->allocate(n).release_context(); }
    static void free(Side& s, void* p) { s.deleter(p); }
};

struct Raw {
    static constexpr int kWay = 1;
    static void* alloc(Side& s, size_t n) { return s.a->raw_alloc_with_stream(n, s.stream); }
    static void free(Side& s, void* p) { s.a->raw_delete(p); }
};

// The adapter throws on failure; the pluggable allocator returns NULL.
template <class W>
void* alloc(Side& s, size_t n) {
    void* p = W::alloc(s, n);
    if (!p) throw std::runtime_error("adapter_ab: " + s.name + " gave no memory for " + std::to_string(n) + " bytes");
    return p;
}

struct Op {
    uint32_t slot, size;
};

class Bench {
  public:
    Bench(uint64_t malloc_fn, uint64_t free_fn, int64_t batch) : batch_(batch) {
        CCA::CUDAAllocator* installed = CCA::get();
        if (!installed || installed->name() != "xsalloc")
            throw std::runtime_error("adapter_ab: torch's allocator is not xsalloc's adapter; run xsalloc.torch.use()");
        if (pluggable) throw std::runtime_error("adapter_ab: one Bench a process");
        if (batch < 1) throw std::runtime_error("adapter_ab: batch must be at least 1");
        pluggable = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
            reinterpret_cast<void* (*)(size_t, int, cudaStream_t)>(malloc_fn),
            reinterpret_cast<void (*)(void*, size_t, int, cudaStream_t)>(free_fn));
        cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
        sides_[0] = {"adapter", installed, installed->raw_deleter(), stream, {}};
        sides_[1] = {"pluggable", pluggable.get(), &pluggable_deleter, stream, {}};
        for (Side& s : sides_) {  // Tensor's premise (its context leaks otherwise)
            c10::DataPtr d = s.a->allocate(kPairBytes);
            void* data = d.get();
            void* ctx = d.release_context();
            if (ctx != data) throw std::runtime_error("adapter_ab: " + s.name + "'s DataPtr context is not its data");
            s.deleter(ctx);
        }
        uint64_t rng = XSA_BENCH_SEED;
        seq_.resize(size_t(kChunks) * batch);
        for (Op& op : seq_) {
            op.slot = uint32_t(xsa_bench_xorshift(&rng) % kSlots);
            op.size = xsa_bench_draw_size(&rng);
        }
        for (int i = 0; i < kSlots; i++) {
            size_t n = xsa_bench_draw_size(&rng);
            for (Side& s : sides_) {
                s.slot[Tensor::kWay][i] = alloc<Tensor>(s, n);
                s.slot[Raw::kWay][i] = alloc<Raw>(s, n);
            }
        }
    }

    // ns a pair or a window op, by "way pattern side", for round r >= 0.
    std::map<std::string, double> round(int64_t r) {
        std::map<std::string, double> ns;
        cases<Tensor>("tensor", r, ns);
        cases<Raw>("raw", r, ns);
        return ns;
    }

    // Frees the window's blocks; the Bench is done with.
    void close() {
        for (Side& s : sides_)
            for (int i = 0; i < kSlots; i++) {
                Tensor::free(s, s.slot[Tensor::kWay][i]);
                Raw::free(s, s.slot[Raw::kWay][i]);
            }
    }

  private:
    template <class W>
    void cases(const std::string& way, int64_t r, std::map<std::string, double>& ns) {
        for (int k = 0; k < kSides; k++) {
            Side& s = sides_[(r + k) % kSides];
            ns[way + " pair " + s.name] = pairs<W>(s);
        }
        for (int k = 0; k < kSides; k++) {
            Side& s = sides_[(r + k) % kSides];
            ns[way + " window " + s.name] = window<W>(s, r);
        }
    }

    template <class W>
    double pairs(Side& s) {
        double t0 = xsa_bench_now_ns();
        for (int64_t i = 0; i < batch_; i++) W::free(s, alloc<W>(s, kPairBytes));
        return (xsa_bench_now_ns() - t0) / double(batch_);
    }

    template <class W>
    double window(Side& s, int64_t r) {
        const Op* op = &seq_[size_t(r % kChunks) * batch_];
        void** slot = s.slot[W::kWay];
        double t0 = xsa_bench_now_ns();
        for (int64_t i = 0; i < batch_; i++) {
            W::free(s, slot[op[i].slot]);
            slot[op[i].slot] = alloc<W>(s, op[i].size);
        }
        return (xsa_bench_now_ns() - t0) / double(batch_);
    }

    int64_t batch_;
    std::vector<Op> seq_;
    Side sides_[kSides];
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "xsalloc's torch adapter against torch's CUDAPluggableAllocator over xsalloc, timed in one process";
    pybind11::class_<Bench>(m, "Bench")
        .def(pybind11::init<uint64_t, uint64_t, int64_t>(), pybind11::arg("malloc_fn"), pybind11::arg("free_fn"),
             pybind11::arg("batch"))
        .def("round", &Bench::round, "ns a pair or a window op, by 'way pattern side', for round r >= 0")
        .def("close", &Bench::close, "frees the window's blocks");
    m.def("core_ghz", [] { return xsa_bench_core_ghz(20000000); }, "the core clock, from dependent additions");
}
