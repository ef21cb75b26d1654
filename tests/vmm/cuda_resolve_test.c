/*
 * cuda_resolve_test: the real driver's table (vmm/driver_cuda.c) over a
 * fake libcuda.so.1 (fake_libcuda.c): that each entry point of the backup
 * path (copy streams, pinned host memory, copies) is asked of
 * cuGetProcAddress by its base name, at the CUDA version of the ABI its
 * prototype has, in the legacy-stream flavour, so that the variant called
 * is the one cuda.h declares (cuMemHostRegister_v2, not v1; the legacy
 * cuMemcpyDtoHAsync_v2, not the per-thread one); that each passes the
 * flags the table promises (CU_STREAM_NON_BLOCKING, the PORTABLE flags);
 * and which context each call runs in.
 *
 * Design: the fake is loaded by path before the first xsa_driver_cuda, so
 * that the library's dlopen("libcuda.so.1") finds it by its soname; it
 * answers cuGetProcAddress as the real driver does (the newest variant not
 * newer than the version asked), so a wrong version shows as the wrong
 * variant's name in the fake's record of the last call. Primary contexts
 * are retained once per process, so the cases run in order: the first
 * uses device 1 only, which later context choices depend on.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cuda.h>
#include <string.h>

#include "tests/vmm/fake_libcuda.h"
#include "vmm/driver_cuda.h"

static xsa_driver *d;
static fake_cuda *fake;

static int load_fake(void **state) {
    (void)state;
    void *lib = dlopen("tests/libfake_cuda.so", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) fail_msg("the fake libcuda: %s", dlerror());
    fake_cuda_state_fn get = (fake_cuda_state_fn)dlsym(lib, "fake_cuda_state");
    assert_non_null(get);
    fake = get();
    char err[512] = "";
    d = xsa_driver_cuda(err, sizeof err);
    if (!d) fail_msg("xsa_driver_cuda over the fake: %s", err);
    return 0;
}

static void expect_last(const char *fn) {
    if (strcmp(fake->last.fn, fn) != 0) fail_msg("the driver ran %s, expected %s", fake->last.fn, fn);
}

/* The call runs on a thread that has never made a context current. */
typedef struct {
    xsa_cu_result (*call)(void);
    xsa_cu_result result;
} on_fresh_thread;

static void *fresh(void *arg) {
    on_fresh_thread *f = arg;
    f->result = f->call();
    return NULL;
}

static xsa_cu_result run_on_fresh_thread(xsa_cu_result (*call)(void)) {
    on_fresh_thread f = {call, -1};
    pthread_t t;
    assert_int_equal(0, pthread_create(&t, NULL, fresh, &f));
    assert_int_equal(0, pthread_join(t, NULL));
    return f.result;
}

/* Each base name asked once, at its ABI's version, legacy flavour; no
 * versioned name (_v2, _ptsz) is asked for directly. */
static void test_each_entry_asked_at_its_version(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int version;
    } want[] = {
        {"cuStreamCreate", 2000},    {"cuStreamDestroy", 4000},     {"cuStreamGetCtx", 9020},
        {"cuMemHostAlloc", 2020},    {"cuMemFreeHost", 2000},       {"cuMemHostRegister", 6050},
        {"cuMemHostUnregister", 4000}, {"cuMemcpyDtoHAsync", 3020}, {"cuMemcpyHtoDAsync", 3020},
    };
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        int found = 0;
        for (int i = 0; i < fake->n_asked; i++) {
            const fake_asked *a = &fake->asked[i];
            if (strcmp(a->name, want[w].name) != 0) continue;
            found++;
            assert_int_equal(want[w].version, a->version);
            assert_int_equal(CU_GET_PROC_ADDRESS_LEGACY_STREAM, a->flags);
        }
        if (found != 1) fail_msg("%s asked %d times", want[w].name, found);
    }
    for (int i = 0; i < fake->n_asked; i++)
        if (strstr(fake->asked[i].name, "_v") || strstr(fake->asked[i].name, "_ptsz"))
            fail_msg("asked for a versioned name: %s", fake->asked[i].name);
}

/* On the device's primary context, non-blocking; destroy runs the _v2 ABI. */
static void test_stream_create_destroy(void **state) {
    (void)state;
    xsa_stream s = NULL;
    assert_int_equal(XSA_CU_SUCCESS, d->stream_create(&s, 1));
    expect_last("cuStreamCreate");
    assert_int_equal(CU_STREAM_NON_BLOCKING, fake->last.flags);
    assert_ptr_equal(FAKE_CTX(1), fake->last.ctx);
    assert_ptr_equal((char *)FAKE_CTX(1) + 1, s);
    assert_int_equal(0, fake->retained[0]); /* device 0 untouched so far */
    assert_int_equal(XSA_CU_SUCCESS, d->stream_destroy(s));
    expect_last("cuStreamDestroy_v2");
    assert_ptr_equal(s, fake->last.stream);
    int calls = fake->calls;
    assert_int_equal(XSA_CU_ERROR_INVALID_DEVICE, d->stream_create(&s, FAKE_DEVICES));
    assert_int_equal(XSA_CU_ERROR_INVALID_VALUE, d->stream_create(NULL, 0));
    assert_int_equal(calls, fake->calls);
}

static xsa_cu_result alloc_on_thread(void) {
    void *h = NULL;
    return d->mem_host_alloc(&h, 4096);
}

static xsa_cu_result register_on_thread(void) {
    static char page[64];
    return d->mem_host_register(page, sizeof page);
}

/* PORTABLE; a thread without a context gets the primary context of a
 * device already used (device 1 here), not device 0's; a thread with one
 * keeps it. The driver's errors come back as they are. */
static void test_pinned_host_memory(void **state) {
    (void)state;
    assert_int_equal(XSA_CU_SUCCESS, run_on_fresh_thread(alloc_on_thread));
    expect_last("cuMemHostAlloc");
    assert_int_equal(CU_MEMHOSTALLOC_PORTABLE, fake->last.flags);
    assert_int_equal(4096, fake->last.bytes);
    assert_ptr_equal(FAKE_CTX(1), fake->last.ctx);
    assert_int_equal(0, fake->retained[0]);
    assert_int_equal(XSA_CU_SUCCESS, run_on_fresh_thread(register_on_thread));
    expect_last("cuMemHostRegister_v2");
    assert_int_equal(CU_MEMHOSTREGISTER_PORTABLE, fake->last.flags);
    assert_ptr_equal(FAKE_CTX(1), fake->last.ctx);
    /* This thread has device 1's context current (stream_create); device 0's
     * once it used device 0. */
    void *h = NULL;
    xsa_stream s = NULL;
    assert_int_equal(XSA_CU_SUCCESS, d->stream_create(&s, 0));
    assert_int_equal(XSA_CU_SUCCESS, d->mem_host_alloc(&h, 64));
    assert_ptr_equal(FAKE_CTX(0), fake->last.ctx);
    assert_int_equal(XSA_CU_SUCCESS, d->mem_free_host(h));
    expect_last("cuMemFreeHost");
    assert_ptr_equal(h, fake->last.host);
    static char page[64];
    fake->next_result = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    assert_int_equal(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED, d->mem_host_register(page, sizeof page));
    assert_non_null(strstr(d->error_string(XSA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED), "ALREADY_REGISTERED"));
    fake->next_result = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    assert_int_equal(XSA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED, d->mem_host_unregister(page));
    expect_last("cuMemHostUnregister");
    assert_int_equal(XSA_CU_ERROR_INVALID_VALUE, d->mem_host_alloc(NULL, 64));
    assert_int_equal(XSA_CU_SUCCESS, d->stream_destroy(s));
}

static xsa_stream copy_stream;
static char copy_host[256];

static xsa_cu_result dtoh_on_thread(void) { return d->memcpy_dtoh_async(copy_host, 0x7000, 200, copy_stream); }
static xsa_cu_result destroy_on_thread(void) { return d->stream_destroy(copy_stream); }

/* The legacy-stream _v2 ABI with the arguments as given; every copy runs
 * in its stream's context (the driver refuses another's), and the caller's
 * own context comes back after a watched call. */
static void test_copies(void **state) {
    (void)state;
    assert_int_equal(XSA_CU_SUCCESS, d->stream_create(&copy_stream, 1));
    assert_int_equal(XSA_CU_SUCCESS, d->stream_create(&(xsa_stream){NULL}, 0)); /* this thread: device 0's context */
    xsa_cuda_ctx_watch();
    assert_int_equal(XSA_CU_SUCCESS, d->memcpy_htod_async(0x9000, copy_host, 100, copy_stream));
    expect_last("cuMemcpyHtoDAsync_v2");
    assert_int_equal(0x9000, fake->last.dptr);
    assert_ptr_equal(copy_host, fake->last.host);
    assert_int_equal(100, fake->last.bytes);
    assert_ptr_equal(copy_stream, fake->last.stream);
    assert_ptr_equal(FAKE_CTX(1), fake->last.ctx); /* device 1's stream: device 1's context */
    xsa_cuda_ctx_restore();
    void *pinned = NULL; /* cuMemHostAlloc runs in the thread's context: the caller's again */
    assert_int_equal(XSA_CU_SUCCESS, d->mem_host_alloc(&pinned, 64));
    assert_ptr_equal(FAKE_CTX(0), fake->last.ctx);
    assert_int_equal(XSA_CU_SUCCESS, run_on_fresh_thread(dtoh_on_thread));
    expect_last("cuMemcpyDtoHAsync_v2");
    assert_int_equal(0x7000, fake->last.dptr);
    assert_int_equal(200, fake->last.bytes);
    assert_ptr_equal(FAKE_CTX(1), fake->last.ctx);
    fake->next_result = CUDA_ERROR_ILLEGAL_ADDRESS;
    assert_int_equal(XSA_CU_ERROR_ILLEGAL_ADDRESS, d->memcpy_dtoh_async(copy_host, 0x7000, 8, NULL));
    assert_ptr_equal(NULL, fake->last.stream);
    assert_int_equal(XSA_CU_SUCCESS, run_on_fresh_thread(destroy_on_thread));
    expect_last("cuStreamDestroy_v2");
    assert_ptr_equal(FAKE_CTX(1), fake->last.ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_entry_asked_at_its_version),
        cmocka_unit_test(test_stream_create_destroy),
        cmocka_unit_test(test_pinned_host_memory),
        cmocka_unit_test(test_copies),
    };
    return cmocka_run_group_tests(tests, load_fake, NULL);
}
