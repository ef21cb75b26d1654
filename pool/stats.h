/*
 * pool/stats: PyTorch's statistics of one pool (the arithmetic is inline
 * in state.h).
 */
#ifndef XSA_POOL_STATS_H
#define XSA_POOL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/types.h"
#include "vmm/driver.h"
#include "xsalloc/types.h"

void xsa_pool_get_stats(const xsa_pool *p, xsa_device_stats *out);
void xsa_pool_reset_peak_stats(xsa_pool *p);
void xsa_pool_reset_accumulated_stats(xsa_pool *p);
/* The highest allocated bytes seen, peak resets notwithstanding. */
int64_t xsa_pool_allocated_high(const xsa_pool *p);
/* The highest reserved bytes seen, peak resets notwithstanding. */
int64_t xsa_pool_reserved_high(const xsa_pool *p);
/* The highest allocated bytes since decay's last tick, the user's peak
 * resets notwithstanding. */
int64_t xsa_pool_interval_peak(const xsa_pool *p);
/* The highest allocated bytes since the last call (decay's ticks): the
 * stat's peak starts again from the current value, and what the user
 * reads stays the peak since their last reset (state.h's peak_held). */
int64_t xsa_pool_take_interval_peak(xsa_pool *p);

#endif
