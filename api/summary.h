/*
 * api/summary: the table of torch.cuda.memory_summary() (design in
 * summary.c); xsa_memory_summary is its public call.
 */
#ifndef XSA_API_SUMMARY_H
#define XSA_API_SUMMARY_H

#include "xsalloc/types.h"

/* The summary text of `stats` (malloc'd; NULL if out of host memory). */
char *xsa_format_summary(const xsa_device_stats *stats, int device, int abbreviated);

#endif
