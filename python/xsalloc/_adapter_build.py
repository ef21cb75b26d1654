"""What the torch adapter and the pluggable path's malloc are built from and
with: shared by setup.py (pip install builds both) and xsalloc._adapter (the
build at first use, where pip could not).

Design: C++ only. No nvcc, no CUDA context, no TORCH_CUDA_ARCH_LIST: every
source is .cpp, compiled against torch's headers and the CUDA runtime's
headers, which come from the CUDA toolkit ($CUDA_HOME, $CUDA_PATH,
/usr/local/cuda) or, for a torch installed by pip without one, from the
nvidia packages torch depends on (site-packages/nvidia/*/include, with
triton's bundled crt/ headers where CUDA 13's packages leave them out). The
adapter links torch's libraries, the CUDA runtime torch loads (found the same
way; its soname is what the loader matches, so torch's copy serves) and this
package's libxsalloc.so, found beside it at run time ($ORIGIN). This module
imports nothing of xsalloc or torch itself: setup.py loads it by path before
the package is installed.
"""

import glob
import hashlib
import os
import sys

ADAPTER = "_torch_adapter"  # the module xsalloc._torch_adapter
ADAPTER_SOURCES = ("adapter.cpp", "contexts.cpp", "snapshot.cpp", "torch_settings.cpp")
PLUGGABLE = "libxsalloc_pluggable"  # a plain shared library: the pluggable path's malloc and free
PLUGGABLE_SOURCES = ("pluggable_malloc.cpp",)
PLUGGABLE_FUNCTIONS = ("xsa_torch_pluggable_malloc", "xsa_torch_pluggable_free")
STAMP = "_torch_adapter.json"  # beside the prebuilt files: the torch they were built for
HEADERS = ("xsalloc.h", "types.h", "pytorch.h")  # include/xsalloc/, copied into the package


def sources(csrc, names):
    """The full paths of `names` in the csrc directory."""
    return [os.path.join(csrc, n) for n in names]


def _site_dirs(torch):
    """Where pip puts packages beside torch: its own site directory first (torch: anything with
    torch's __file__, or None), then sys.path."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))] if torch is not None else []
    return dirs + [p for p in sys.path if p and os.path.isdir(p) and p not in dirs]


DEFAULT_TOOLKIT = "/usr/local/cuda"


def _toolkits(env, default):
    roots = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), default]
    return [r for r in roots if r]


def cuda_include_dirs(torch, env=os.environ, default=DEFAULT_TOOLKIT, header="cuda_runtime_api.h"):
    """The directories holding the CUDA headers (`header`: the runtime's for the adapter, cuda.h
    for the library): a toolkit's include/ ($CUDA_HOME, $CUDA_PATH, `default`), else every
    include/ of the nvidia pip packages (headers are spread over several). [] when none has it."""
    for root in _toolkits(env, default):
        inc = os.path.join(root, "include")
        if os.path.exists(os.path.join(inc, header)):
            return [inc]
    for site in _site_dirs(torch):
        found = sorted(glob.glob(os.path.join(site, "nvidia", "*", "include"))
                       + glob.glob(os.path.join(site, "nvidia", "*", "*", "include")))
        if any(os.path.exists(os.path.join(d, header)) for d in found):
            return found + ([] if _has_crt(found) else _crt_elsewhere(torch))
    return []


# CUDA 13 moved the crt/ headers (crt/host_defines.h, crt/host_config.h),
# which cuda_runtime_api.h and cuda_runtime.h include, out of the runtime's
# pip package into nvidia-cuda-crt, which torch does not depend on. Triton,
# which torch does depend on, bundles them for its own compiles: its copy
# is taken, last on the include path, where no nvidia package has them.
def _has_crt(dirs):
    return any(os.path.exists(os.path.join(d, "crt", "host_defines.h")) for d in dirs)


def _crt_elsewhere(torch):
    for site in _site_dirs(torch):
        bundled = os.path.join(site, "triton", "backends", "nvidia", "include")
        if _has_crt([bundled]):
            return [bundled]
    return []


def cudart(torch, env=os.environ, default=DEFAULT_TOOLKIT):
    """The CUDA runtime library to link (libcudart.so, or the versioned one of the nvidia pip
    packages), or None: then its symbols come from the copy torch has loaded."""
    dirs = [os.path.join(r, sub) for r in _toolkits(env, default) for sub in ("lib64", "lib")]
    for site in _site_dirs(torch):
        dirs += glob.glob(os.path.join(site, "nvidia", "*", "lib")) + glob.glob(os.path.join(site, "nvidia", "*", "*", "lib"))
    for d in dirs:
        libs = sorted(glob.glob(os.path.join(d, "libcudart.so*")), key=len)
        if libs:
            return libs[0]
    return None


def torch_cuda_libraries(torch):
    """torch's CUDA libraries the adapter calls (c10_cuda, torch_cuda), those its lib/ has."""
    lib = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "lib")
    return [n for n in ("c10_cuda", "torch_cuda") if glob.glob(os.path.join(lib, f"lib{n}.so*"))]


def why_not(torch, env=os.environ, default=DEFAULT_TOOLKIT):
    """Why this torch cannot have the adapter built (None if it can): a torch without CUDA,
    or no CUDA runtime headers anywhere."""
    if getattr(getattr(torch, "version", None), "cuda", None) is None:
        return f"torch {getattr(torch, '__version__', '?')} is built without CUDA"
    dirs = cuda_include_dirs(torch, env, default)
    if not dirs:
        return ("no CUDA runtime headers (cuda_runtime_api.h) in $CUDA_HOME, $CUDA_PATH, /usr/local/cuda "
                "or the nvidia pip packages beside torch")
    if not _has_crt(dirs):
        return (f"the CUDA runtime headers in {', '.join(dirs)} lack crt/host_defines.h, which "
                "cuda_runtime_api.h includes (CUDA 13 moved crt/ to a package of its own: nvidia-cuda-crt "
                "from pip, cuda-crt in a toolkit; no triton beside torch bundles a copy): install it, or point "
                "CUDA_HOME at a whole CUDA toolkit")
    return None


def link_args(torch, libdir, rpath, env=os.environ, default=DEFAULT_TOOLKIT):
    """Linker arguments: libxsalloc.so in libdir, found at run time through rpath ('$ORIGIN'
    when the built file lies beside it, as pip installs it), and the CUDA runtime."""
    args = [f"-L{libdir}", "-l:libxsalloc.so", f"-Wl,-rpath,{rpath}"]
    rt = cudart(torch, env, default)
    return args + ([rt] if rt else [])


def stamp(torch):
    """What the built files depend on: the torch (version, CUDA) and the Python."""
    return {"torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None),
            "python": "%d.%d" % sys.version_info[:2]}


def cache_key(torch, csrc, libdir):
    """The first-use build's name: torch and Python version, the library it links and the
    sources' text, so that two environments (or two xsalloc versions) never share a build."""
    h = hashlib.sha1(repr(sorted(stamp(torch).items())).encode() + libdir.encode())
    for path in sources(csrc, ADAPTER_SOURCES + PLUGGABLE_SOURCES) + glob.glob(os.path.join(csrc, "*.h")):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]
