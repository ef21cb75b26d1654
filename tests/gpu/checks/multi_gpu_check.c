/*
 * multi_gpu_check: peer access and IPC export/import on real GPUs, through
 * xsalloc's public API and the real driver. Built with gcc on the GPU
 * machine by run_multi_gpu.sh (no Bazel there).
 *
 * (1) Two GPUs: a block on GPU 0 grants GPU 1 access (checked with
 *     cuMemGetAccess before and after, and on pages mapped after the grant),
 *     then GPU 1 copies a buffer of its own into it (cuMemcpyDtoD with
 *     GPU 1's context current); the block is read back and compared.
 * (2) One GPU, two processes: the parent exports a block and sends the
 *     handle over a Unix socket pair; the child imports it, writes a pattern
 *     with cuMemcpyHtoD and closes; the parent reads the pattern, and the
 *     freed block returns to the cache only after the close.
 * The child is forked before any CUDA call (CUDA cannot be used in a child
 * forked after cuInit). The copies are not in xsalloc's driver table, so
 * they are resolved here with dlopen/dlsym: the program links without
 * libcuda, like the library. Prints PASS/FAIL/SKIP lines; exits non-zero if
 * anything failed.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xsalloc/xsalloc.h"

#define MiB ((size_t)1 << 20)

static struct {
    __typeof__(cuInit) *init;
    __typeof__(cuDeviceGet) *device_get;
    __typeof__(cuDevicePrimaryCtxRetain) *ctx_retain;
    __typeof__(cuCtxSetCurrent) *ctx_set;
    __typeof__(cuCtxSynchronize) *ctx_sync;
    __typeof__(cuMemcpyHtoD) *htod;
    __typeof__(cuMemcpyDtoH) *dtoh;
    __typeof__(cuMemcpyDtoD) *dtod;
    __typeof__(cuMemGetAccess) *get_access;
} cu;

static int failures;

static void report(int ok, const char *what, const char *detail) {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what, detail && *detail ? ": " : "", detail ? detail : "");
    fflush(stdout);
    if (!ok) failures++;
}

static int load_cuda(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
#define SYM(field, name) (cu.field = (__typeof__(cu.field))dlsym(lib, name))
    return SYM(init, "cuInit") && SYM(device_get, "cuDeviceGet") && SYM(ctx_retain, "cuDevicePrimaryCtxRetain") &&
           SYM(ctx_set, "cuCtxSetCurrent") && SYM(ctx_sync, "cuCtxSynchronize") && SYM(htod, "cuMemcpyHtoD_v2") &&
           SYM(dtoh, "cuMemcpyDtoH_v2") && SYM(dtod, "cuMemcpyDtoD_v2") && SYM(get_access, "cuMemGetAccess") &&
           cu.init(0) == CUDA_SUCCESS;
#undef SYM
}

/* Makes the device's primary context current for the copies. */
static int use_device(int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    return cu.device_get(&dev, ordinal) == CUDA_SUCCESS && cu.ctx_retain(&ctx, dev) == CUDA_SUCCESS &&
           cu.ctx_set(ctx) == CUDA_SUCCESS;
}

static unsigned long long access_of(void *ptr, int device) {
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device};
    unsigned long long flags = 99;
    CUresult r = cu.get_access(&flags, &loc, (CUdeviceptr)(uintptr_t)ptr);
    return r == CUDA_SUCCESS ? flags : 100 + (unsigned long long)r;
}

static void pattern(unsigned char *buf, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 7 + seed + i / 4096);
}

static int xsa_ok(xsa_status st, const char *what) {
    if (st == XSA_SUCCESS) return 1;
    char detail[2300];
    snprintf(detail, sizeof detail, "%s: %s", xsa_status_name(st), xsa_last_error());
    report(0, what, detail);
    return 0;
}

/* ---- (1) peer access ---- */

static void check_peer_copy(void) {
    int n = 0;
    if (!xsa_ok(xsa_device_count(&n), "device count")) return;
    if (n < 2) {
        printf("SKIP peer access: %d GPU visible, 2 needed\n", n);
        return;
    }
    size_t size = 64 * MiB;
    void *before = NULL, *block = NULL, *src = NULL;
    if (!xsa_ok(xsa_malloc(&before, 4 * MiB, 0, NULL), "malloc on GPU 0")) return;
    unsigned long long a0 = access_of(before, 1);
    xsa_status st = xsa_enable_peer_access(0, 1);
    if (!xsa_ok(st, "xsa_enable_peer_access(0, 1)")) return;
    char detail[160];
    unsigned long long a1 = access_of(before, 1);
    snprintf(detail, sizeof detail, "GPU 1's access to a page mapped before: %llu before the grant, %llu after", a0, a1);
    report(a0 == 0 && a1 == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "peer grant on mapped pages", detail);
    if (!xsa_ok(xsa_malloc(&block, size, 0, NULL), "malloc 64 MiB on GPU 0") ||
        !xsa_ok(xsa_malloc(&src, size, 1, NULL), "malloc 64 MiB on GPU 1"))
        return;
    unsigned long long a2 = access_of(block, 1), a3 = access_of((char *)block + size - 1, 1);
    snprintf(detail, sizeof detail, "GPU 1's access to pages mapped after the grant: %llu (first), %llu (last)", a2, a3);
    report(a2 == CU_MEM_ACCESS_FLAGS_PROT_READWRITE && a3 == a2, "peer grant on pages mapped later", detail);
    unsigned char *want = malloc(size), *got = calloc(1, size);
    pattern(want, size, 11);
    CUresult r = use_device(1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (!r) r = cu.htod((CUdeviceptr)(uintptr_t)src, want, size);
    if (!r) r = cu.dtod((CUdeviceptr)(uintptr_t)block, (CUdeviceptr)(uintptr_t)src, size); /* GPU 1 writes GPU 0 */
    if (!r) r = cu.ctx_sync();
    if (!r) r = use_device(0) ? cu.dtoh(got, (CUdeviceptr)(uintptr_t)block, size) : CUDA_ERROR_INVALID_CONTEXT;
    snprintf(detail, sizeof detail, "64 MiB from GPU 1 into a block on GPU 0, read back (CUresult %d)", (int)r);
    report(r == CUDA_SUCCESS && memcmp(want, got, size) == 0, "peer copy", detail);
    free(want);
    free(got);
    xsa_ok(xsa_free(src), "free on GPU 1");
    xsa_ok(xsa_free(block), "free on GPU 0");
    xsa_ok(xsa_free(before), "free on GPU 0");
    xsa_ok(xsa_check_invariants(0), "invariants GPU 0");
}

/* ---- (2) IPC between two processes ---- */

enum { IPC_SIZE = 6 * 1024 * 1024 + 4096 };

/* The importer: exit status 0 when it wrote the pattern and closed. */
static int child(int sock) {
    char go = 0;
    if (read(sock, &go, 1) != 1) return 10; /* the parent is set up, or gone */
    if (!load_cuda()) return 11;
    xsa_ipc_handle h;
    void *q = NULL;
    if (xsa_use_driver("cuda") != XSA_SUCCESS || xsa_ipc_recv(sock, &h) != XSA_SUCCESS) return 12;
    xsa_status st = xsa_ipc_import(&h, 0, &q);
    xsa_ipc_handle_close(&h);
    if (st != XSA_SUCCESS) {
        fprintf(stderr, "child: import: %s\n", xsa_last_error());
        return 13;
    }
    unsigned char *buf = malloc(h.size);
    pattern(buf, h.size, 29);
    CUresult r = use_device(0) ? cu.htod((CUdeviceptr)(uintptr_t)q, buf, h.size) : CUDA_ERROR_INVALID_CONTEXT;
    if (!r) r = cu.ctx_sync();
    free(buf);
    if (r) return 14;
    if (xsa_ipc_close(q) != XSA_SUCCESS) return 15;
    char done = 'c';
    return write(sock, &done, 1) == 1 ? 0 : 16;
}

static void check_ipc(int sock, pid_t pid) {
    void *blk = NULL;
    xsa_ipc_handle h;
    char detail[200];
    if (!xsa_ok(xsa_malloc(&blk, 3 * MiB, 0, NULL), "malloc padding") || /* the block starts mid-page */
        !xsa_ok(xsa_malloc(&blk, IPC_SIZE, 0, NULL), "malloc exported block") ||
        !xsa_ok(xsa_ipc_export(blk, &h), "xsa_ipc_export"))
        return;
    snprintf(detail, sizeof detail, "%d pages of %llu bytes, offset %llu, size %llu", h.n_pages,
             (unsigned long long)h.page_size, (unsigned long long)h.offset, (unsigned long long)h.size);
    report(1, "export", detail);
    char go = 'g', done = 0;
    if (write(sock, &go, 1) != 1 || !xsa_ok(xsa_ipc_send(sock, &h), "xsa_ipc_send")) return;
    xsa_ipc_handle_close(&h);
    int got_done = read(sock, &done, 1) == 1;
    int status = 0;
    waitpid(pid, &status, 0);
    snprintf(detail, sizeof detail, "child exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    report(got_done && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child imported, wrote and closed", detail);
    unsigned char *want = malloc(IPC_SIZE), *got = calloc(1, IPC_SIZE);
    pattern(want, IPC_SIZE, 29);
    CUresult r = use_device(0) ? cu.dtoh(got, (CUdeviceptr)(uintptr_t)blk, IPC_SIZE) : CUDA_ERROR_INVALID_CONTEXT;
    snprintf(detail, sizeof detail, "%d bytes written by the child, read by the parent (CUresult %d)", IPC_SIZE, (int)r);
    report(r == CUDA_SUCCESS && memcmp(want, got, IPC_SIZE) == 0, "IPC data", detail);
    free(want);
    free(got);
    xsa_device_stats s;
    xsa_ok(xsa_free(blk), "free exported block");
    xsa_ok(xsa_get_stats(0, &s), "stats");
    snprintf(detail, sizeof detail, "active bytes after the free: %lld (the 3 MiB padding block only)",
             (long long)s.active_bytes[XSA_STAT_ALL].current);
    report(s.active_bytes[XSA_STAT_ALL].current == (int64_t)(3 * MiB), "closed export unpinned", detail);
    xsa_ok(xsa_check_invariants(0), "invariants GPU 0");
}

int main(void) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        close(sv[0]);
        _exit(child(sv[1]));
    }
    close(sv[1]);
    if (!load_cuda()) {
        printf("FAIL libcuda.so.1 could not be loaded or initialised\n");
        return 1;
    }
    xsa_status st = xsa_use_driver("cuda");
    if (st == XSA_SUCCESS) st = xsa_init("ipc_handles:True");
    if (!xsa_ok(st, "xsa_init(ipc_handles:True) on the real driver")) return 1;
    check_peer_copy();
    check_ipc(sv[0], pid);
    close(sv[0]);
    xsa_shutdown();
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures != 0;
}
