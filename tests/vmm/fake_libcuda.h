/*
 * fake_libcuda: what cuda_resolve_test reads from the fake libcuda.so.1
 * (fake_libcuda.c): the entry points asked of cuGetProcAddress and the
 * last call made through them. The test finds fake_cuda_state with dlsym.
 */
#ifndef XSA_TESTS_VMM_FAKE_LIBCUDA_H
#define XSA_TESTS_VMM_FAKE_LIBCUDA_H

#include <stddef.h>
#include <stdint.h>

#define FAKE_MAX_ASKED 128
#define FAKE_DEVICES 2

typedef struct {
    char name[64];
    int version;
    unsigned long long flags;
} fake_asked;

typedef struct {
    char fn[48];         /* the variant that ran: "cuMemHostRegister_v2", "cuStreamDestroy(v1)" ... */
    unsigned flags;      /* the call's flags argument */
    void *ctx;           /* the calling thread's context during the call */
    void *host;          /* host pointer argument */
    uint64_t dptr;       /* device pointer argument */
    size_t bytes;
    void *stream;
} fake_call;

typedef struct {
    fake_asked asked[FAKE_MAX_ASKED];
    int n_asked;
    fake_call last;
    int calls;                     /* calls of the entry points below (not setup's) */
    int next_result;               /* the next such call returns this (then 0 again) */
    int retained[FAKE_DEVICES];    /* cuDevicePrimaryCtxRetain calls per device */
} fake_cuda;

/* The primary context of device d, and the context of the streams made on it. */
#define FAKE_CTX(d) ((void *)(uintptr_t)(0xc0000 + (d)))

typedef fake_cuda *(*fake_cuda_state_fn)(void);

#endif
