/*
 * vmm/sim: controls of the simulated driver (the table is xsa_driver_sim()).
 *
 * Design: each simulated device has a capacity of physical bytes. A physical
 * handle is a range of a per-device memfd (sparse: host memory is used only
 * where written) counted against that capacity. A reservation is a PROT_NONE
 * anonymous mapping; cuMemMap puts the handle's file range there with
 * MAP_FIXED|MAP_SHARED but still PROT_NONE; cuMemSetAccess makes it
 * read/write; cuMemUnmap turns it back to PROT_NONE anonymous memory. So a
 * use-after-unmap faults exactly like on the GPU. The real driver's error
 * cases are reproduced (see driver_sim.c). Events complete when the test says
 * so (xsa_sim_complete_*), or at once in eager mode.
 */
#ifndef XSA_VMM_SIM_H
#define XSA_VMM_SIM_H

#include "vmm/driver.h"

#define XSA_SIM_MAX_DEVICES 8

/* Exported by the shared library like the API (api/xsalloc.h): tests
 * drive the simulated driver through it. */
#ifndef XSA_API
#define XSA_API __attribute__((visibility("default")))
#endif

typedef struct xsa_sim_config {
    int devices;                 /* 1..XSA_SIM_MAX_DEVICES, default 1 */
    size_t capacity;             /* physical bytes per device, default 80 GiB */
    size_t granularity;          /* default 2 MiB */
    int eager_events;            /* 1: an event completes when recorded (default 0) */
    int vmm_supported;           /* device attribute 102, default 1 */
    int fd_handles_supported;    /* device attribute 103, default 1 */
    /* peer[a][b]: device a can access memory of device b (default all 1). */
    unsigned char peer[XSA_SIM_MAX_DEVICES][XSA_SIM_MAX_DEVICES];
} xsa_sim_config;

XSA_API void xsa_sim_default_config(xsa_sim_config *config);

/*
 * Applies a configuration. Only legal while the simulated driver holds no
 * handle, mapping, reservation, allocation or event (returns
 * XSA_CU_ERROR_NOT_PERMITTED otherwise). Resets call counters and faults.
 */
XSA_API xsa_cu_result xsa_sim_configure(const xsa_sim_config *config);

/* Fault injection: the nth call (1 = the next one) of `entry` from now on
 * fails with `error` and has no effect. Several faults may be armed. */
XSA_API void xsa_sim_fail_call(xsa_driver_entry entry, uint64_t nth, xsa_cu_result error);
XSA_API void xsa_sim_clear_faults(void);

/* Events: everything recorded so far on `stream` (or on every stream) has
 * completed. */
XSA_API void xsa_sim_complete_stream(xsa_stream stream);
XSA_API void xsa_sim_complete_all(void);
XSA_API void xsa_sim_set_eager_events(int eager);

typedef struct xsa_sim_usage {
    size_t handles;             /* created or imported and not yet freed (released-but-mapped count) */
    size_t handle_bytes;        /* physical bytes counted against capacity, all devices (not imported handles) */
    size_t mapped_bytes;        /* bytes of VA currently mapped */
    size_t reservations;
    size_t reserved_bytes;
    size_t mem_allocs;          /* live cuMemAlloc allocations */
    size_t mem_alloc_bytes;
    size_t events;              /* created and not destroyed */
    size_t pending_events;      /* recorded and not completed */
    size_t device_used[XSA_SIM_MAX_DEVICES]; /* physical bytes per device */
} xsa_sim_usage;

XSA_API void xsa_sim_get_usage(xsa_sim_usage *usage);

/* Devices granted read/write on the page holding ptr (bit d: device d);
 * 0 where nothing is mapped or ptr is in no reservation. */
XSA_API unsigned xsa_sim_page_access(xsa_devptr ptr);

/* Invariant checker: handle table, mappings and counters agree. Returns 1 if
 * consistent, else 0 with a sentence in err. */
XSA_API int xsa_sim_check(char *err, size_t errlen);

#endif
