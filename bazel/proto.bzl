"""Code generation from proto/ with the system protoc and its plugins."""

def _stem(src):
    return src[:-len(".proto")]

def ws_proto_c(name, srcs, wkt = [], deps = [], **kwargs):
    """protobuf-c code for `srcs` (paths relative to this package) plus the
    well-known types in `wkt` (e.g. "google/protobuf/any.proto", read from
    the system's /usr/include), as one cc_library."""
    all_stems = [_stem(s) for s in srcs + wkt]
    outs = [s + ".pb-c.c" for s in all_stems] + [s + ".pb-c.h" for s in all_stems]
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = outs,
        cmd = ("protoc-c -I$$(dirname $(location {first}))/{up} -I/usr/include " +
               "--c_out=$(RULEDIR) {files}").format(
            first = srcs[0],
            up = "/".join([".."] * srcs[0].count("/")) or ".",
            files = " ".join(srcs + wkt),
        ),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".c")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["@system//:protobuf_c"],
        **kwargs
    )

def ws_proto_cc(name, srcs, grpc_srcs, deps = [], **kwargs):
    """C++ messages for `srcs` and gRPC C++ stubs for `grpc_srcs` (a subset
    declaring services), as one cc_library for test clients."""
    stems = [_stem(s) for s in srcs]
    grpc_stems = [_stem(s) for s in grpc_srcs]
    outs = ([s + ".pb.cc" for s in stems] + [s + ".pb.h" for s in stems] +
            [s + ".grpc.pb.cc" for s in grpc_stems] + [s + ".grpc.pb.h" for s in grpc_stems])
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = outs,
        cmd = ("protoc -I$$(dirname $(location {first}))/{up} -I/usr/include " +
               "--cpp_out=$(RULEDIR) {files} && " +
               "protoc -I$$(dirname $(location {first}))/{up} -I/usr/include " +
               "--grpc_out=$(RULEDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin {gfiles}").format(
            first = srcs[0],
            up = "/".join([".."] * srcs[0].count("/")) or ".",
            files = " ".join(srcs),
            gfiles = " ".join(grpc_srcs),
        ),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        copts = ["-Wno-unused-parameter", "-Wno-shadow"],
        deps = deps + ["@system//:grpcpp", "@system//:protobuf"],
        **kwargs
    )

def ws_protoset(name, srcs, out, **kwargs):
    """A FileDescriptorSet of `srcs` with every import (the well-known types
    from the system's /usr/include) and the source info (comments), the
    form `grpcurl -protoset` and the reflection service take."""
    native.genrule(
        name = name,
        srcs = srcs,
        outs = [out],
        cmd = ("protoc -I$$(dirname $(location {first}))/{up} -I/usr/include " +
               "--include_imports --include_source_info --descriptor_set_out=$@ {files}").format(
            first = srcs[0],
            up = "/".join([".."] * srcs[0].count("/")) or ".",
            files = " ".join(srcs),
        ),
        **kwargs
    )
