/* api/errors: status names and the thread-local error message. */
#include "api/errors.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[XSA_ERROR_MAX];

const char *xsa_status_name(xsa_status status) {
    switch (status) {
    case XSA_SUCCESS: return "XSA_SUCCESS";
    case XSA_ERROR_INVALID_VALUE: return "XSA_ERROR_INVALID_VALUE";
    case XSA_ERROR_OUT_OF_MEMORY: return "XSA_ERROR_OUT_OF_MEMORY";
    case XSA_ERROR_INVALID_DEVICE: return "XSA_ERROR_INVALID_DEVICE";
    case XSA_ERROR_INVALID_POINTER: return "XSA_ERROR_INVALID_POINTER";
    case XSA_ERROR_CONFIG: return "XSA_ERROR_CONFIG";
    case XSA_ERROR_NO_DRIVER: return "XSA_ERROR_NO_DRIVER";
    case XSA_ERROR_DRIVER: return "XSA_ERROR_DRIVER";
    case XSA_ERROR_ALREADY_INITIALIZED: return "XSA_ERROR_ALREADY_INITIALIZED";
    case XSA_ERROR_NOT_SUPPORTED: return "XSA_ERROR_NOT_SUPPORTED";
    }
    return "XSA_ERROR_UNKNOWN_STATUS";
}

const char *xsa_last_error(void) { return last_error; }

char *xsa_error_buffer(void) { return last_error; }

xsa_status xsa_fail(xsa_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

xsa_status xsa_ok(void) {
    last_error[0] = '\0';
    return XSA_SUCCESS;
}
