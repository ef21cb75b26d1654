/*
 * api/internal: what the benchmarks and tests may ask of the allocator
 * beyond the public header.
 */
#ifndef XSA_API_INTERNAL_H
#define XSA_API_INTERNAL_H

#include "vmm/driver.h"

/* The driver table in use (initialises if needed); NULL if none. */
xsa_driver *xsa_active_driver(void);

#endif
