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

import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CompileError, LinkError

LTO = "-flto=auto"
# The public headers the torch adapter is compiled with (include/xsalloc/).
PUBLIC_HEADERS = ("xsalloc.h", "types.h", "pytorch.h")
CUDA_INCLUDE = os.path.join(os.environ.get("CUDA_HOME") or "/usr/local/cuda", "include")


class BuildLibrary(build_ext):
    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")) + ".so"  # xsalloc/libxsalloc.so, no ABI tag

    def build_extension(self, ext):
        if not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda.h")):
            raise RuntimeError(f"xsalloc: no cuda.h in {CUDA_INCLUDE}: set CUDA_HOME to the CUDA toolkit "
                               "(only its headers are needed)")
        try:
            super().build_extension(ext)
        except (CompileError, LinkError):
            # Some Pythons name a compiler without the LTO plugin (seen on the
            # H100: "/usr/bin/ld: error: could not run lto-wrapper"): build
            # again without link-time optimisation rather than not at all.
            if LTO not in ext.extra_compile_args:
                raise
            print("xsalloc: the compiler cannot do link-time optimisation; building without it", flush=True)
            ext.extra_compile_args = [a for a in ext.extra_compile_args if a != LTO]
            ext.extra_link_args = [a for a in ext.extra_link_args if a != LTO]
            self.force = True
            super().build_extension(ext)


class BuildPackage(build_py):
    """The package plus the C headers that xsalloc.torch compiles the torch adapter with."""

    def run(self):
        super().run()
        include = os.path.join(self.build_lib, "xsalloc", "include", "xsalloc")
        os.makedirs(include, exist_ok=True)
        for header in PUBLIC_HEADERS:
            shutil.copy(os.path.join("include", "xsalloc", header), include)


library = Extension(
    "xsalloc.libxsalloc",
    sources=sorted(f for layer in ("vmm", "sim", "pool", "api") for f in glob.glob(f"{layer}/*.c")),
    include_dirs=[".", "include", CUDA_INCLUDE],
    # -fvisibility=hidden: only the XSA_API functions are exported, and the
    # calls inside stay direct; link-time optimisation across the files.
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-O2", LTO, "-fvisibility=hidden", "-Wall", "-Wextra"],
    extra_link_args=[LTO],
    libraries=["dl", "pthread"],
)

setup(package_dir={"": "python"}, packages=["xsalloc"], package_data={"xsalloc": ["csrc/*.cpp", "csrc/*.h"]},
      ext_modules=[library], cmdclass={"build_ext": BuildLibrary, "build_py": BuildPackage})
