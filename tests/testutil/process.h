// Helpers the C++ suites share for the processes they start and look for:
// stopping a server or front and requiring a clean exit, and finding a
// test's own processes in /proc by a marker no other run uses.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace testutil
{

// The whole content of `path` read to its end (a /proc file included);
// "" when it cannot be opened.
std::string ReadFile(const std::string &path);

// Reads one line (without its newline) from `fd` into `line`, waiting at
// most `timeout_ms` in all. False on end of file, an error or the timeout.
bool ReadLine(int fd, std::string *line, int timeout_ms);

// "exit status N", "killed by signal N (NAME)" or "wait status N".
std::string DescribeStatus(int status);

// Stops a child the suite started (a server, a front) with SIGTERM and
// waits up to `limit`. Returns "" when it exited 0; otherwise what went
// wrong, then "; its stderr:" and the content of `stderr_path`: under the
// sanitizer build a leak or a crash at shutdown makes the exit status
// non-zero, and the report is on stderr. A child that had already ended
// before it was stopped crashed under the tests and fails as well; one that
// outlives `limit` is killed and fails. `what` names it in the message.
std::string StopCleanly(pid_t pid, const std::string &what, const std::string &stderr_path,
                        std::chrono::seconds limit = std::chrono::seconds(60));

// A `sleep` argument that no other test, test process or run uses:
// "1000." followed by this process's pid (which tells apart the runs on the
// machine now: the regular and sanitizer phases, a rerun), a random part
// drawn once per process (an earlier run with the same pid that left
// processes behind) and a counter. Fixed widths keep one marker from being
// a prefix of another. sleep takes it as about 1000 seconds.
std::string UniqueSleepArg();

// Every process id in /proc now.
std::vector<pid_t> AllPids();

// The arguments of process `pid` (empty when it is gone or unreadable).
std::vector<std::string> ProcArgv(pid_t pid);

// Live (not zombie) processes that have `arg` as one whole argument: the
// sleeps carrying a marker, not the shells whose scripts mention it.
std::vector<pid_t> PidsWithArg(const std::string &arg);

} // namespace testutil
