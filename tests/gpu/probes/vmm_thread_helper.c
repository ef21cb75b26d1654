/*
 * tests/gpu/probes/vmm_thread_helper: the second thread of vmm_thread_probe.py, in
 * C so that it takes no Python lock from the main thread: a pthread on the
 * given context that loops driver calls until stopped. Mode 1 (vmm): pages
 * of `page` bytes through cuMemCreate, cuMemMap, cuMemSetAccess, then
 * cuMemUnmap, cuMemRelease, in a reservation of `pages` pages at `base`;
 * mode 2 (events): cuEventRecord + cuEventQuery on `stream`. libcuda is
 * the process's (torch loaded it): opened again and its symbols looked up,
 * not linked.
 *   gcc -O2 -shared -fPIC -I/usr/local/cuda/include vmm_thread_helper.c -o helper.so -ldl -lpthread
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

static CUresult (*ctx_set)(CUcontext);
static CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
static CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
static CUresult (*unmap)(CUdeviceptr, size_t);
static CUresult (*release)(CUmemGenericAllocationHandle);
static CUresult (*ev_create)(CUevent *, unsigned);
static CUresult (*ev_record)(CUevent, CUstream);
static CUresult (*ev_query)(CUevent);
static CUresult (*ev_destroy)(CUevent);

static struct {
    int mode, device, pages;
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr base;
    size_t page;
    atomic_int stop;
    atomic_ullong calls;
    CUresult error;
    pthread_t thread;
} h;

#define MAX_PAGES 256

static void *loop(void *arg) {
    (void)arg;
    ctx_set(h.ctx);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = h.device;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, h.device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUevent ev = NULL;
    if (h.mode == 2 && (h.error = ev_create(&ev, CU_EVENT_DISABLE_TIMING))) return NULL;
    while (!atomic_load(&h.stop) && !h.error) {
        if (h.mode == 2) {
            if ((h.error = ev_record(ev, h.stream))) break;
            ev_query(ev);
            atomic_fetch_add(&h.calls, 2);
            continue;
        }
        CUmemGenericAllocationHandle handles[MAX_PAGES];
        int n = 0;
        for (; n < h.pages && !atomic_load(&h.stop); n++) {
            CUdeviceptr at = h.base + (size_t)n * h.page;
            if ((h.error = create(&handles[n], h.page, &prop, 0))) break;
            if ((h.error = map(at, h.page, 0, handles[n], 0)) || (h.error = set_access(at, h.page, &access, 1))) {
                n++;
                break;
            }
            atomic_fetch_add(&h.calls, 3);
        }
        for (int k = 0; k < n; k++) {
            unmap(h.base + (size_t)k * h.page, h.page);
            release(handles[k]);
            atomic_fetch_add(&h.calls, 2);
        }
    }
    if (ev) ev_destroy(ev);
    return NULL;
}

#define LOOKUP(var, name) ((*(void **)&var = dlsym(lib, name)) != NULL)

/* Starts the thread; 0, or -1 if libcuda or a symbol is missing, or the
 * pthread error. Symbols are the driver's exported names (cuEventRecord has
 * no _v2; cuEventDestroy does). */
int helper_start(int mode, void *ctx, void *stream, int device, unsigned long long base, size_t page, int pages) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); /* the process's: torch loaded it */
    if (!lib || !(LOOKUP(ctx_set, "cuCtxSetCurrent") && LOOKUP(create, "cuMemCreate") && LOOKUP(map, "cuMemMap") &&
          LOOKUP(set_access, "cuMemSetAccess") && LOOKUP(unmap, "cuMemUnmap") && LOOKUP(release, "cuMemRelease") &&
          LOOKUP(ev_create, "cuEventCreate") && LOOKUP(ev_record, "cuEventRecord") &&
          LOOKUP(ev_query, "cuEventQuery") && LOOKUP(ev_destroy, "cuEventDestroy_v2")))
        return -1;
    h.mode = mode;
    h.ctx = ctx;
    h.stream = stream;
    h.device = device;
    h.base = base;
    h.page = page;
    h.pages = pages < MAX_PAGES ? pages : MAX_PAGES;
    h.error = CUDA_SUCCESS;
    atomic_store(&h.stop, 0);
    atomic_store(&h.calls, 0);
    return pthread_create(&h.thread, NULL, loop, NULL);
}

unsigned long long helper_calls(void) { return atomic_load(&h.calls); }

/* Stops and joins the thread; the first driver error it met (0: none). */
int helper_stop(void) {
    atomic_store(&h.stop, 1);
    pthread_join(h.thread, NULL);
    return h.error;
}
