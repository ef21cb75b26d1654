"""xsa_test: a cmocka test binary linked with the given library deps."""

def xsa_test(name, srcs, deps = [], **kwargs):
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps,
        linkopts = ["-lcmocka", "-lpthread", "-ldl"],
        **kwargs
    )
