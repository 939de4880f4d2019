"""The server's one build convention for its libraries."""

def ws_module(name, srcs = None, hdrs = None, deps = [], **kwargs):
    """A library of the server: NAME.c behind NAME.h unless `srcs` and `hdrs`
    say otherwise, visible to every package, and built on //server/base like
    every library of the server (so `deps` never lists it)."""
    native.cc_library(
        name = name,
        srcs = [name + ".c"] if srcs == None else srcs,
        hdrs = [name + ".h"] if hdrs == None else hdrs,
        deps = deps + ["//server/base"],
        visibility = ["//visibility:public"],
        **kwargs
    )
