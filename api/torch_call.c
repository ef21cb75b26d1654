/* api/torch_call: a failed PyTorch entry point's line on stderr (design in torch_call.h). */
#include "api/torch_call.h"

#include <stdio.h>

void xsa_torch_report(const char *what, xsa_status st) {
    const char *detail = xsa_last_error();
    fprintf(stderr, "xsalloc: %s failed (%s): %s\n", what, xsa_status_name(st), *detail ? detail : "no detail");
}
