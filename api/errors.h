/*
 * api/errors: every public function returns an xsa_status and leaves a
 * sentence in a thread-local buffer (xsa_last_error). Internal helpers.
 */
#ifndef XSA_API_ERRORS_H
#define XSA_API_ERRORS_H

#include "xsalloc/xsalloc.h"

#define XSA_ERROR_MAX 2048

/* Formats the message and returns status. */
xsa_status xsa_fail(xsa_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the message and returns XSA_SUCCESS. */
xsa_status xsa_ok(void);
/* The thread's message buffer (XSA_ERROR_MAX bytes), for lower layers to fill. */
char *xsa_error_buffer(void);

#endif
