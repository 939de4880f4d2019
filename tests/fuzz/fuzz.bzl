"""libFuzzer targets and their corpus replay tests."""

def ws_fuzz_target(name, srcs, deps):
    """A fuzz target NAME (a libFuzzer binary, built only with
    --config=fuzz) and NAME_replay, a test of the regular build that runs
    the target's entry point over every file of corpus/NAME/."""
    common_deps = deps + [":fuzz_util", "//server/base"]
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = srcs,
        deps = common_deps,
        # The default (gcc) build skips it: the host platform never has
        # :fuzz_config_only, so outside --config=fuzz the target is
        # incompatible and `bazel build //...` leaves it out.
        target_compatible_with = select({
            ":fuzz_build": [],
            "//conditions:default": [":fuzz_config_only"],
        }),
        tags = ["fuzz"],
    )
    native.cc_test(
        name = name + "_replay",
        size = "small",
        srcs = srcs + ["replay_main.c"],
        deps = common_deps,
        data = native.glob(["corpus/%s/**" % name]),
        args = ["tests/fuzz/corpus/" + name],
        # With --config=fuzz every link takes libFuzzer's main, which this
        # test has its own of: the fuzzer binary replays the corpus there.
        target_compatible_with = select({
            ":fuzz_build": [":fuzz_config_only"],
            "//conditions:default": [],
        }),
        tags = ["fuzz_replay"],
    )
