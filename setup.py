"""The xsalloc package (python/xsalloc) with libxsalloc.so compiled into it; metadata in pyproject.toml.

    pip install --no-build-isolation .                    # the package, library included
    python3 setup.py build_ext --build-lib DIR            # DIR/xsalloc/libxsalloc.so alone

Design: the library is a plain C shared object that python/xsalloc loads with
ctypes (and PyTorch's CUDAPluggableAllocator dlopens), not a Python
extension; it is declared as one so that setuptools compiles it with the
machine's C compiler and the wheel is platform specific, and it keeps its
own name. Only C sources and cuda.h are needed: libcuda is never linked
(xsalloc dlopens it at run time). These flags are the one copy outside
Bazel's (.bazelrc): the GPU scripts build with this file too.
"""

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CUDA_INCLUDE = os.path.join(os.environ.get("CUDA_HOME") or "/usr/local/cuda", "include")


class BuildLibrary(build_ext):
    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")) + ".so"  # xsalloc/libxsalloc.so, no ABI tag

    def build_extension(self, ext):
        if not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda.h")):
            raise RuntimeError(f"xsalloc: no cuda.h in {CUDA_INCLUDE}: set CUDA_HOME to the CUDA toolkit "
                               "(only its headers are needed)")
        super().build_extension(ext)


library = Extension(
    "xsalloc.libxsalloc",
    sources=sorted(glob.glob("api/*.c") + glob.glob("pool/*.c") + glob.glob("vmm/*.c")),
    include_dirs=[".", CUDA_INCLUDE],
    # -fvisibility=hidden: only the XSA_API functions are exported, and the
    # calls inside stay direct; link-time optimisation across the files.
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-O2", "-flto=auto", "-fvisibility=hidden", "-Wall", "-Wextra"],
    extra_link_args=["-flto=auto"],
    libraries=["dl", "pthread"],
)

setup(package_dir={"": "python"}, packages=["xsalloc"], ext_modules=[library], cmdclass={"build_ext": BuildLibrary})
