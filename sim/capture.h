/*
 * sim/capture: stream capture on the simulated driver as the table and
 * the checker use it (design in capture.c).
 */
#ifndef XSA_SIM_CAPTURE_H
#define XSA_SIM_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/state.h"

/* The stream and event entry points go through it (work on a capturing
 * stream becomes graph nodes; the rest goes on to the timeline) ... */
xsa_cu_result xsa_sim_cap_stream_query(xsa_stream stream);
xsa_cu_result xsa_sim_cap_stream_synchronize(xsa_stream stream);
xsa_cu_result xsa_sim_cap_event_record(xsa_event event, xsa_stream stream);
xsa_cu_result xsa_sim_cap_event_query(xsa_event event);
xsa_cu_result xsa_sim_cap_event_synchronize(xsa_event event);
xsa_cu_result xsa_sim_cap_event_destroy(xsa_event event);
xsa_cu_result xsa_sim_cap_stream_wait_event(xsa_stream stream, xsa_event event);
/* Refused for a stream in a capture (which it invalidates). */
xsa_cu_result xsa_sim_cap_stream_destroy(xsa_stream stream);
/* memcpy_dtoh_async (to_host) and memcpy_htod_async: on the timeline, or
 * a node of the stream's capture (host memory pinned; else refused). */
xsa_cu_result xsa_sim_cap_copy(bool to_host, void *host, xsa_devptr dev, size_t n, xsa_stream stream);
/* ... a call that synchronizes the device (cuMemFree) is refused while a
 * capture is under way, and invalidates it ... */
xsa_cu_result xsa_sim_cap_device_sync(const char *call);
/* ... its own entry points ... */
xsa_cu_result xsa_sim_cap_begin(xsa_stream stream);
xsa_cu_result xsa_sim_cap_end(xsa_stream stream, xsa_graph *graph);
xsa_cu_result xsa_sim_cap_info(xsa_stream stream, int *status, uint64_t *id, const xsa_graph_node **deps, size_t *n);
xsa_cu_result xsa_sim_cap_node_deps(xsa_graph_node node, xsa_graph_node *deps, size_t *n);
xsa_cu_result xsa_sim_cap_instantiate(xsa_graph_exec *exec, xsa_graph graph);
xsa_cu_result xsa_sim_cap_graph_launch(xsa_graph_exec exec, xsa_stream stream);
xsa_cu_result xsa_sim_cap_exec_destroy(xsa_graph_exec exec);
xsa_cu_result xsa_sim_cap_graph_destroy(xsa_graph graph);
xsa_cu_result xsa_sim_cap_exchange_mode(int *mode);
/* ... what configuration and the usage counters read, and its checker. */
bool xsa_sim_cap_live(void);
void xsa_sim_cap_usage(xsa_sim_usage *u);
int xsa_sim_cap_check(char *err, size_t errlen);

#endif
