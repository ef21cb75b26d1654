"""The xsalloc package (python/xsalloc) with libxsalloc.so compiled into it, and, when torch can
be imported, the torch adapter and the pluggable path's malloc built against it; metadata in
pyproject.toml.

    pip install --no-build-isolation .                    # the package, library included
    python3 setup.py build_ext --build-lib DIR            # DIR/xsalloc/libxsalloc.so (and the adapter)

Design: the library is a plain C shared object that python/xsalloc loads with
ctypes (and PyTorch's CUDAPluggableAllocator dlopens), not a Python
extension; it is declared as one so that setuptools compiles it with the
machine's C compiler and the wheel is platform specific, and it keeps its
own name. Only C sources and cuda.h are needed (a toolkit's, or the nvidia
pip packages' beside torch): libcuda is never linked (xsalloc dlopens it at
run time). These flags are the one copy outside
Bazel's (.bazelrc): the GPU scripts build with this file too.

With torch importable (and built with CUDA), the torch adapter
(xsalloc/_torch_adapter.so) and the pluggable path's malloc
(xsalloc/libxsalloc_pluggable.so) are built here too, as torch's own
CppExtension builds them: C++ only, no nvcc, no CUDA context, no
TORCH_CUDA_ARCH_LIST; what they are built from and with is
python/xsalloc/_adapter_build.py, shared with the build at first use. A
failed adapter build fails the install, naming why and
XSALLOC_TORCH_ADAPTER=0, which skips it (the pluggable path's malloc is
still built). xsalloc/_torch_adapter.json records the torch they are for:
another torch later builds them at first use instead (xsalloc._adapter).
"""

import glob
import importlib.util
import json
import os
import shutil
import types

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CompileError, LinkError

LTO = "-flto=auto"
CSRC = os.path.join("python", "xsalloc", "csrc")
LIBRARY = "xsalloc.libxsalloc"

_spec = importlib.util.spec_from_file_location("_adapter_build", os.path.join("python", "xsalloc", "_adapter_build.py"))
adapter_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adapter_build)


def cuda_h_dirs():
    """Where cuda.h is: a CUDA toolkit's include/, or the nvidia pip packages beside torch (found
    without importing it) or on sys.path."""
    spec = importlib.util.find_spec("torch")
    beside = types.SimpleNamespace(__file__=spec.origin) if spec is not None and spec.origin else None
    return adapter_build.cuda_include_dirs(beside, header="cuda.h")


CUDA_INCLUDE = cuda_h_dirs()


def importable_torch():
    """torch, when it can be imported and is built with CUDA (importing it starts no CUDA); else None."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if adapter_build.why_not(torch):
        print(f"xsalloc: not building the torch adapter: {adapter_build.why_not(torch)}", flush=True)
        return None
    return torch


class BuildLibrary(build_ext):
    def run(self):
        # A stamp left by an earlier build would vouch for files this one does not make.
        stamp = os.path.join(self.build_lib, "xsalloc", adapter_build.STAMP)
        if os.path.exists(stamp):
            os.remove(stamp)
        super().run()

    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")) + ".so"  # xsalloc/libxsalloc.so, no ABI tag

    def build_extension(self, ext):
        if ext.name != LIBRARY:
            return self.build_torch_extension(ext)
        if not CUDA_INCLUDE:
            raise RuntimeError("xsalloc: no cuda.h in $CUDA_HOME/include, $CUDA_PATH/include, /usr/local/cuda/include "
                               "or the nvidia pip packages beside torch: set CUDA_HOME to a CUDA toolkit (only its "
                               "headers are needed)")
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

    def build_torch_extension(self, ext):
        """One of torch's extensions, by torch's own BuildExtension (its flags, its ABI), linked to the
        libxsalloc.so just built; the stamp says which torch it is for."""
        import torch
        from torch.utils.cpp_extension import BuildExtension

        libdir = os.path.dirname(self.get_ext_fullpath(LIBRARY))
        ext.extra_link_args = adapter_build.link_args(torch, os.path.abspath(libdir), "$ORIGIN")
        cmd = BuildExtension.with_options(no_python_abi_suffix=True)(self.distribution)
        cmd.ensure_finalized()
        cmd.extensions = [ext]
        cmd.build_lib, cmd.build_temp, cmd.inplace, cmd.force = self.build_lib, self.build_temp, self.inplace, True
        try:
            cmd.run()
        except Exception as e:
            if ext.name.endswith(adapter_build.ADAPTER):
                raise RuntimeError(
                    f"xsalloc: building the torch adapter against torch {torch.__version__} failed ({e}). Install "
                    "a C++ compiler, and the CUDA runtime headers (a CUDA toolkit in CUDA_HOME, or the nvidia pip "
                    "packages torch depends on), or install with XSALLOC_TORCH_ADAPTER=0 to skip it (then only "
                    "the pluggable path, XSALLOC_TORCH_ADAPTER=0, runs xsalloc under torch)") from e
            raise
        stamp_path = os.path.join(libdir, adapter_build.STAMP)
        stamp = adapter_build.stamp(torch)
        if os.path.exists(stamp_path):
            with open(stamp_path) as f:
                stamp["built"] = json.load(f).get("built", [])
        stamp.setdefault("built", []).append("adapter" if ext.name.endswith(adapter_build.ADAPTER) else "pluggable")
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)


class BuildPackage(build_py):
    """The package plus the C headers that the torch adapter is compiled with (include/xsalloc/)."""

    def run(self):
        super().run()
        include = os.path.join(self.build_lib, "xsalloc", "include", "xsalloc")
        os.makedirs(include, exist_ok=True)
        for header in adapter_build.HEADERS:
            shutil.copy(os.path.join("include", "xsalloc", header), include)


def torch_extensions(torch):
    """The adapter (unless XSALLOC_TORCH_ADAPTER=0) and the pluggable path's malloc, as CppExtensions."""
    from torch.utils.cpp_extension import CppExtension

    includes = [os.path.abspath("include")] + adapter_build.cuda_include_dirs(torch)
    exts = []
    if os.environ.get("XSALLOC_TORCH_ADAPTER", "") not in ("0", "false", "False"):
        exts.append(CppExtension("xsalloc." + adapter_build.ADAPTER,
                                 adapter_build.sources(CSRC, adapter_build.ADAPTER_SOURCES), include_dirs=includes,
                                 libraries=adapter_build.torch_cuda_libraries(torch), extra_compile_args=["-O2"]))
    exts.append(CppExtension("xsalloc." + adapter_build.PLUGGABLE,
                             adapter_build.sources(CSRC, adapter_build.PLUGGABLE_SOURCES), include_dirs=includes,
                             extra_compile_args=["-O2"]))
    return exts


library = Extension(
    LIBRARY,
    sources=sorted(f for layer in ("vmm", "sim", "pool", "api") for f in glob.glob(f"{layer}/*.c")),
    include_dirs=[".", "include"] + CUDA_INCLUDE,
    # -fvisibility=hidden: only the XSA_API functions are exported, and the
    # calls inside stay direct; link-time optimisation across the files.
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-O2", LTO, "-fvisibility=hidden", "-Wall", "-Wextra"],
    extra_link_args=[LTO],
    libraries=["dl", "pthread"],
)

torch = importable_torch()
setup(package_dir={"": "python"}, packages=["xsalloc"],
      package_data={"xsalloc": ["csrc/*.cpp", "csrc/*.h", "_child/*.py"]},
      ext_modules=[library] + (torch_extensions(torch) if torch else []),
      cmdclass={"build_ext": BuildLibrary, "build_py": BuildPackage})
