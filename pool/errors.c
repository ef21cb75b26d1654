/* pool/errors: the refusals' sentences (see errors.h). */
#include "pool/errors.h"

#include <stdio.h>

xsa_pool_status xsa_pool_invalid_pool(int device, const char *what, xsa_mempool_id id, const char *why, char *err,
                                      size_t errlen) {
    snprintf(err, errlen, "%s(device %d, pool (%llu, %llu)): %s", what, device, (unsigned long long)id.first,
             (unsigned long long)id.second, why);
    return XSA_POOL_INVALID;
}

xsa_pool_status xsa_pool_host_oom(int device, char *err, size_t errlen) {
    snprintf(err, errlen, "device %d: out of host memory", device);
    return XSA_POOL_HOST_OOM;
}
