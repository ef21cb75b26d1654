/*
 * api/fork: xsalloc's pthread_atfork handlers, registered when the library
 * is loaded.
 *
 * Design: the device table's start-up lock is held across every fork
 * (api/devices.c: xsa_devices_fork_prepare, _parent, _child), so a child
 * never inherits it taken by a thread it does not have; the child then
 * forgets the parent's pools if the driver had started (devices.c says
 * what such a child may do). Registered from a constructor so that
 * nothing has to call it: a process that forks before its first xsalloc
 * call is covered too, and devices.c does not depend on this file.
 *
 * Other modules with state to quiet at a fork (a helper thread that must
 * stop) register their own handlers with pthread_atfork beside these,
 * from a module of their own. POSIX runs prepare handlers in the reverse
 * order of registration and the parent and child handlers in order, so a
 * module that registers later than this constructor (at the first start,
 * say) has its prepare run first, before the start-up lock is taken, and
 * its child handler run after the child has forgotten the pools.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/devices.h"

__attribute__((constructor)) static void xsa_fork_handlers_install(void) {
    int err = pthread_atfork(xsa_devices_fork_prepare, xsa_devices_fork_parent, xsa_devices_fork_child);
    if (err) fprintf(stderr, "xsalloc: pthread_atfork failed (%s): a fork may not be safe\n", strerror(err));
}
