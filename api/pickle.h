/*
 * api/pickle: the pickle format of an emitter (api/emit.h), which
 * pytorch.org/memory_viz and torch.cuda._memory_viz read.
 */
#ifndef XSA_API_PICKLE_H
#define XSA_API_PICKLE_H

#include "api/emit.h"

/* Pickle protocol 4 (without frames), with only the opcodes that both
 * Python's unpickler and PyTorch's memory_viz page read. */
void xsa_emit_pickle(xsa_emitter *e);

#endif
