"""xsa_test: a cmocka test binary linked with the given library deps."""

def xsa_test(name, srcs, deps = [], linkopts = [], **kwargs):
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps,
        linkopts = ["-lcmocka", "-lpthread", "-ldl"] + linkopts,
        # The libraries are compiled with hidden visibility (libxsalloc.so
        # exports the XSA_API names alone), so tests link their objects
        # rather than Bazel's per-library shared objects.
        linkstatic = True,
        **kwargs
    )
