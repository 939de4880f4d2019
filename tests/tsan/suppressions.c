/*
 * ThreadSanitizer's suppressions for the tsan config, linked into every
 * binary that config builds (.bazelrc: --custom_malloc, Bazel's one way to
 * add a library to every link), so that they hold for every process, the
 * server a test starts included, whatever its environment and its working
 * directory. Never used outside that config.
 *
 * Only what is provably inside a library this build does not instrument
 * (Debian's gRPC and Abseil, whose own locks and atomics TSan cannot see)
 * is suppressed, matched by that library's module or symbol names, never
 * by one of ours: a race that has a frame of ours in either stack must be
 * found and fixed, not listed here.
 */

const char *__tsan_default_suppressions(void);

const char *__tsan_default_suppressions(void)
{
    return
        /* gRPC's C core, its support library and its C++ layer, and the
         * upb runtime under them: their threads hand data to each other
         * through gRPC's and Abseil's own locks, atomics and futexes,
         * which TSan cannot see in an uninstrumented library, while it
         * does see the libc calls they make (memcpy, realloc, free, epoll).
         * Each such call then races, for TSan, with the previous one on
         * the same memory or fd on another of gRPC's threads. These lines
         * make TSan ignore the libc calls made from inside the library
         * (its documented way for uninstrumented libraries); our own
         * accesses are still checked, and the hand-overs between gRPC and
         * our code are annotated (server/rpc/internal.h). */
        "called_from_lib:libgrpc.so\n"
        "called_from_lib:libgpr.so\n"
        "called_from_lib:libgrpc++.so\n"
        "called_from_lib:libupb.so\n"
        /* Abseil's deadlock detector under gRPC's mutexes: a graph of the
         * locks guarded by Abseil's own spin lock, which TSan sees only as
         * the graph's memmove calls from two of gRPC's threads. */
        "called_from_lib:libabsl_graphcycles_internal.so\n"
        /* absl::Status, which gRPC passes between its threads (reference
         * counts in uninstrumented atomics, then the payload's free), ...*/
        "called_from_lib:libabsl_status.so\n"
        /* absl::Cord, the payloads of those statuses, and absl::Time's
         * parser reading a status time gRPC wrote on another thread. */
        "called_from_lib:libabsl_cord.so\n"
        "called_from_lib:libabsl_cord_internal.so\n"
        "called_from_lib:libabsl_time.so\n"
        /* gRPC's C++ API (grpc::, the grpcpp headers, inlined into the
         * tests' clients): a call's status and metadata, filled by gRPC's
         * threads and read after CompletionQueue::Pluck, a hand-over
         * through the same invisible locks. The server, in C, has no
         * frame in this namespace. */
        "race:^grpc::\n";
}
