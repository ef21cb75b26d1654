/*
 * crt/host_config.h for host-only C++ compiles: xsalloc's torch adapter,
 * built against the nvidia pip packages beside a pip-installed torch.
 *
 * Those packages ship cuda_runtime.h, which includes crt/host_config.h,
 * but not that header (it comes with nvcc). In the toolkit's copy,
 * everything but the include guard sits under __CUDACC__: it checks and
 * configures the host compiler for nvcc. A host compile takes nothing
 * from it, which is all this file gives. _adapter_build.py puts this
 * directory last on the include path, and only where no nvidia package
 * has the real one.
 */
#ifndef __HOST_CONFIG_H__
#define __HOST_CONFIG_H__
#if defined(__CUDACC__)
#error "xsalloc's crt/host_config.h serves host C++ compiles only: nvcc needs the CUDA toolkit's own"
#endif
#endif
