// C++ client of workspaced: a thin RAII layer over the generated gRPC stubs
// of proto/workspace/v1. The .proto comments are the specification of every
// field and error; this header only says what the wrapper adds.
//
//   auto client = workspaced::Client::Connect("unix:/run/workspaced/workspaced.sock");
//   workspaced::Workspace ws = client.Open(workspaced::LocalSandbox(),
//       workspaced::Capabilities().WithFs().WithShell({"cat"}));
//   ws.WriteFile("hello.txt", "hi\n");
//   workspaced::Process p = ws.Exec({"cat", "hello.txt"});
//   while (auto out = p.Next()) std::cout << out->data;
//   workspaced::ExitResult r = p.Wait();
//   // ~Workspace closes the workspace.
//
// Every failed call throws a subclass of workspaced::Error chosen from the
// google.rpc.ErrorInfo reason the server attaches (never from the message).
//
// Installed (packaging/install), it builds with
//   g++ -std=c++17 prog.cc $(pkg-config --cflags --libs workspaced)
// and workspaced::kVersion is the release it came from.
//
// Behind a front proxy that balances several workspaced nodes, a workspace
// lives on the node that opened it. Open and Resolve read that node's name
// from the `x-workspace-node` response header (Workspace::node()), and every
// later call about the workspace sends it back so that the front routes the
// call there. Connected to one server directly, no header is seen and none
// is sent.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include "workspaced_version.h"

#include "workspace/v1/common.pb.h"
#include "workspace/v1/exec.grpc.pb.h"
#include "workspace/v1/filesystem.grpc.pb.h"
#include "workspace/v1/providers.grpc.pb.h"
#include "workspace/v1/workspaces.grpc.pb.h"

namespace workspaced
{

namespace pb = ::workspace::v1;

// The release of this client, the repository's VERSION ("MAJOR.MINOR.PATCH").
inline constexpr const char *kVersion = WORKSPACED_VERSION;

// The ErrorInfo domain of every error the server reports; details from any
// other domain are not trusted as a reason.
inline constexpr const char *kErrorDomain = "workspaced";

// The metadata key that pins a call to one node behind a front proxy: the
// front names the node that answered Open or Resolve in this response
// header, and refuses a name it does not know with UNAVAILABLE.
inline constexpr const char *kNodeHeader = "x-workspace-node";

// ---------------------------------------------------------------- errors

// Every failure of a call. reason() is the ErrorInfo reason
// (UPPER_SNAKE_CASE) or "" when the status carried no details (a transport
// failure, a client-side deadline).
class Error : public std::runtime_error
{
  public:
    Error(grpc::StatusCode code, std::string reason, std::string message,
          std::map<std::string, std::string> metadata = {});

    grpc::StatusCode code() const
    {
        return code_;
    }
    const std::string &reason() const
    {
        return reason_;
    }
    // The reason as the generated enum's value; ERROR_REASON_UNSPECIFIED
    // when there is none or this client does not know it.
    pb::ErrorReason reason_code() const;
    const std::string &message() const
    {
        return message_;
    }
    const std::map<std::string, std::string> &metadata() const
    {
        return metadata_;
    }
    // Whether retrying later may succeed: metadata transient="true", or
    // UNAVAILABLE without an explicit transient="false".
    bool transient() const;

  private:
    grpc::StatusCode code_;
    std::string reason_;
    std::string message_;
    std::map<std::string, std::string> metadata_;
};

// One typed error per value of the generated enum workspace.v1.ErrorReason
// (proto/workspace/v1/common.proto, which documents each: its status code
// and metadata keys): X(Type, REASON). The .cc builds its reason table from
// this list with pb::REASON, so a name the enum lacks does not compile, and
// //clients/cpp:reasons_test fails when the enum has a value this list
// lacks. A reason the client does not know (a newer server) throws the
// base Error with the reason string.
#define WORKSPACED_ERROR_REASONS(X)                                                                \
    X(PathEscape, PATH_ESCAPE)                                                                     \
    X(SymlinkLoop, SYMLINK_LOOP)                                                                   \
    X(SymlinkLeaf, SYMLINK_LEAF)                                                                   \
    X(BadPattern, BAD_PATTERN)                                                                     \
    X(BadPath, BAD_PATH)                                                                           \
    X(Malformed, MALFORMED)                                                                        \
    X(Limit, LIMIT)                                                                                \
    X(BadRef, BAD_REF)                                                                             \
    X(SizeCap, SIZE_CAP)                                                                           \
    X(Quota, QUOTA)                                                                                \
    X(NoSpace, NO_SPACE)                                                                           \
    X(NoMemory, NO_MEMORY)                                                                         \
    /* Out of file descriptors (metadata "errno": EMFILE, ENFILE). */                              \
    X(NoDescriptors, NO_DESCRIPTORS)                                                               \
    X(NoSuchFile, NO_SUCH_FILE)                                                                    \
    X(NoSuchWorkspace, NO_SUCH_WORKSPACE)                                                          \
    X(NoSuchProcess, NO_SUCH_PROCESS)                                                              \
    X(WorkspaceEvicted, WORKSPACE_EVICTED)                                                         \
    X(CapabilityMissing, CAPABILITY_MISSING)                                                       \
    X(ProviderDisabled, PROVIDER_DISABLED)                                                         \
    /* See Error::transient(); Workspace for metadata resolve="true". */                           \
    X(WorkspaceFailed, WORKSPACE_FAILED)                                                           \
    X(Conflict, CONFLICT)                                                                          \
    X(NoMatch, NO_MATCH)                                                                           \
    X(MultipleMatches, MULTIPLE_MATCHES)                                                           \
    X(SpecialFile, SPECIAL_FILE)                                                                   \
    X(Hardlink, HARDLINK)                                                                          \
    X(IsDirectory, IS_DIRECTORY)                                                                   \
    X(NotDirectory, NOT_DIRECTORY)                                                                 \
    X(NotEmpty, NOT_EMPTY)                                                                         \
    X(ReadOnly, READ_ONLY)                                                                         \
    X(Busy, BUSY)                                                                                  \
    X(Retry, RETRY)                                                                                \
    X(Exists, EXISTS)                                                                              \
    X(AccessDenied, ACCESS_DENIED)                                                                 \
    X(CommandNotAllowed, COMMAND_NOT_ALLOWED)                                                      \
    X(Metachar, METACHAR)                                                                          \
    X(GlobRejected, GLOB)                                                                          \
    X(EnvDenied, ENV_DENIED)                                                                       \
    X(CwdEscape, CWD_ESCAPE)                                                                       \
    X(ArgLimit, ARG_LIMIT)                                                                         \
    /* The operator's policy refuses what was asked (metadata "rule"). */                          \
    X(PolicyDenied, POLICY)                                                                        \
    X(Cancelled, CANCELLED)                                                                        \
    X(Deadline, DEADLINE)                                                                          \
    X(ShuttingDown, SHUTTING_DOWN)                                                                 \
    X(Unimplemented, UNIMPLEMENTED)                                                                \
    X(Internal, INTERNAL)                                                                          \
    X(StdinClosed, STDIN_CLOSED)                                                                   \
    X(NoPty, NO_PTY)                                                                               \
    X(NoSuchService, NO_SUCH_SERVICE)                                                              \
    /* Secrets the server lost in a restart (metadata "names"): SetSecrets. */                     \
    X(SecretsMissing, SECRETS_MISSING)                                                             \
    /* Open's request_id used for another request (metadata "workspace_id"). */                    \
    X(RequestIdReused, REQUEST_ID_REUSED)                                                          \
    /* SendInput past the stdin offset (metadata "offset": the one expected). */                   \
    X(InputGap, INPUT_GAP)                                                                         \
    /* WriteArchive refused the archive (metadata "entry", "problem"). */                          \
    X(BadArchive, BAD_ARCHIVE)                                                                     \
    X(NoSuchSnapshot, NO_SUCH_SNAPSHOT)                                                            \
    /* Open's from_path outside --source-path-allow. */                                            \
    X(SourcePathDenied, SOURCE_PATH_DENIED)

#define WORKSPACED_ERROR_TYPE(Name, Reason)                                                        \
    class Name : public Error                                                                      \
    {                                                                                              \
      public:                                                                                      \
        using Error::Error;                                                                        \
    };
WORKSPACED_ERROR_REASONS(WORKSPACED_ERROR_TYPE)
#undef WORKSPACED_ERROR_TYPE

// UNAUTHENTICATED, which the server sends with the bare code (a missing or
// unknown token, a client certificate that names no tenant): not a reason
// of the enum, so chosen by the code when the status names no known reason.
class Unauthenticated : public Error
{
  public:
    using Error::Error;
};

// A tar the client refuses to extract (Workspace::DownloadTree) because a
// member would land or point outside the target directory, or is not a
// kind it extracts; raised by the client, never by the server. problem()
// is "absolute", "dotdot", "link_outside", "special", "malformed" or
// "not_empty" (the target directory has entries).
class UnsafeArchive : public std::runtime_error
{
  public:
    UnsafeArchive(std::string entry, std::string problem)
        : std::runtime_error("archive entry \"" + entry + "\": " + problem),
          entry_(std::move(entry)), problem_(std::move(problem))
    {
    }
    const std::string &entry() const
    {
        return entry_;
    }
    const std::string &problem() const
    {
        return problem_;
    }

  private:
    std::string entry_, problem_;
};

// Throws the typed error a failed status decodes to; returns on OK.
void ThrowIfError(const grpc::Status &status);
// Throws the typed error for `status` (which must not be OK).
[[noreturn]] void ThrowStatus(const grpc::Status &status);

// ---------------------------------------------------------------- retry

// Retries an operation that failed transiently (Error::transient()), with an
// exponentially growing, jittered delay. Errors that are not transient are
// rethrown at once: repeating a refusal only repeats it.
struct RetryPolicy {
    // Counts the first try; 1 (or less) disables retries.
    int max_attempts = 4;
    std::chrono::milliseconds initial_backoff{200};
    std::chrono::milliseconds max_backoff{5000};
    double multiplier = 2.0;
    // Each delay is spread uniformly over [d * (1 - jitter), d], so that many
    // clients failing together do not retry in lockstep. 0: none.
    double jitter = 0.2;
    // Waits between attempts; empty: std::this_thread::sleep_for. Tests
    // inject their own.
    std::function<void(std::chrono::milliseconds)> sleep;
    // A number in [0, 1) for the jitter; empty: a seeded PRNG.
    std::function<double()> random;

    static RetryPolicy None()
    {
        RetryPolicy p;
        p.max_attempts = 1;
        return p;
    }

    // The delay after failed attempt `attempt` (1-based), jitter applied.
    std::chrono::milliseconds Backoff(int attempt) const;

    // Calls `op` until it returns, throws a non-transient error, or the
    // attempts run out (then the last error is rethrown).
    template <typename F> auto Do(F &&op) const -> decltype(op())
    {
        return Do(std::forward<F>(op), [](const Error &e) { return e.transient(); });
    }
    // Do, retrying the errors `retryable` accepts.
    template <typename F, typename P> auto Do(F &&op, P &&retryable) const -> decltype(op())
    {
        for (int attempt = 1;; attempt++) {
            try {
                return op();
            } catch (const Error &e) {
                if (attempt >= max_attempts || !retryable(e))
                    throw;
                Wait(Backoff(attempt));
            }
        }
    }

  private:
    void Wait(std::chrono::milliseconds d) const;
};

// ---------------------------------------------------------------- config

// Provider configs: exactly one, as the OpenRequest oneof. Each builder
// returns the config message with its defaults; set more on it before Open:
// `auto bash = LocalBash(); bash.set_pids_limit(64);` caps a local-bash
// workspace's processes (the server refuses the Open when it cannot enforce
// such a cap).
using ProviderConfig =
    std::variant<pb::MemoryConfig, pb::LocalBashConfig, pb::LocalSandboxConfig, pb::DockerConfig>;

inline pb::MemoryConfig Memory()
{
    return {};
}
inline pb::LocalBashConfig LocalBash()
{
    return {};
}
inline pb::LocalSandboxConfig LocalSandbox()
{
    return {};
}
// runtime: "" (the daemon's default, runc) or "runsc" (gVisor); Providers()
// says which the daemon has (ProviderInfo.runtimes).
inline pb::DockerConfig Docker(const std::string &image, const std::string &runtime = "")
{
    pb::DockerConfig c;
    c.set_image(image);
    c.set_runtime(runtime);
    return c;
}

// Declared capabilities (common.proto Capabilities), built fluently.
class Capabilities
{
  public:
    // fs with a file size cap (0: the server default).
    Capabilities &WithFs(uint64_t max_file_size_bytes = 0);
    // shell with an allowlist; pass_env names host variables passed through;
    // max_duration 0: the server default.
    Capabilities &WithShell(std::vector<std::string> allowed_commands,
                            std::vector<std::string> pass_env = {},
                            std::chrono::milliseconds max_duration = std::chrono::milliseconds(0));
    const pb::Capabilities &proto() const
    {
        return caps_;
    }

  private:
    pb::Capabilities caps_;
};

struct TlsOptions {
    // PEM; empty root_certs: the system roots.
    std::string root_certs;
    // A client certificate chain and its key for mutual TLS: both or
    // neither.
    std::string cert_chain;
    std::string private_key;
    // Checked against the server certificate instead of the address's host.
    std::string server_name_override;

    // Reads the PEM files now (an empty path: that part left empty). A file
    // that cannot be read throws std::system_error naming it, instead of a
    // failed handshake on the first call.
    static TlsOptions FromFiles(const std::string &ca_file, const std::string &cert_file = "",
                                const std::string &key_file = "",
                                const std::string &server_name_override = "");
};

// How long a workspace lives (common.proto Lifetime): an absolute ttl from
// Open (or Extend) and an idle timeout, each 0 for none (the idle timeout 0
// at Open: the server's default). The server's --max-lifetime caps the ttl.
struct Lifetime {
    std::chrono::milliseconds ttl{0};
    std::chrono::milliseconds idle_timeout{0};
};

// What an Open asks for besides the provider and capabilities
// (workspaces.proto OpenRequest).
struct OpenOptions {
    Lifetime lifetime;
    // For List's label_selector (see OpenRequest.labels for their form).
    std::map<std::string, std::string> labels;
    // Unique among the tenant's open workspaces ([a-z0-9-], 1-63 bytes); a
    // taken one throws Exists, its metadata naming the workspace that has it.
    std::string name;
    // Every command of the workspace gets it; a command's own env wins.
    std::map<std::string, std::string> env;
    // A command gets a secret in its environment only when it names it
    // (ExecOptions::secrets). The server holds the values in memory only:
    // after its restart the workspace is secrets_missing until SetSecrets.
    std::map<std::string, std::string> secrets;
    // Makes a retried Open safe: the server answers the same request id with
    // the workspace the first Open made (for 10 minutes), and a different
    // request with it throws RequestIdReused. Empty: Open makes a fresh
    // random one per call, and sends it on every attempt of its own retries,
    // so an attempt whose answer was lost never leaves a second workspace.
    std::string request_id;
    // Transient failures, and RETRY (the first attempt is still opening),
    // are retried with the same request id.
    RetryPolicy retry;
    // Fork: the files start as a copy of this snapshot (NoSuchSnapshot).
    std::string from_snapshot;
    // Shadow: the files start as a copy of this host directory, absolute and
    // canonical, inside one the operator allows with --source-path-allow
    // (else SourcePathDenied). Not with from_snapshot.
    std::string from_path;
};

// Filters of Client::List and ListPage.
struct ListOptions {
    // Comma-separated "key=value", "key!=value", "key", "!key".
    std::string label_selector;
    std::string name;
    // Most per response; 0: the server's 100 (at most 1000).
    uint32_t page_size = 0;
};

struct ListPage {
    std::vector<pb::WorkspaceSummary> workspaces;
    // Empty on the last page.
    std::string next_page_token;
};

// A workspace's secrets as SetSecrets left them: their names, never values.
struct SecretsState {
    std::vector<std::string> names;
    bool missing = false;
};

struct ConnectOptions {
    // Sent as "authorization: Bearer <token>" on every call. nullopt: from
    // WORKSPACED_TOKEN when set; "": none.
    std::optional<std::string> token;
    // nullopt: plaintext (the server listens on a unix socket, or on
    // loopback TCP with tokens).
    std::optional<TlsOptions> tls;
    // Deadline of every unary call; 0: none.
    std::chrono::milliseconds call_timeout{0};
    // Workspaces re-resolve their ref once when a call finds the workspace
    // evicted, or its box or container lost (WorkspaceFailed with metadata
    // resolve="true"); see Workspace.
    bool eviction_retry = true;
    // Makes the client interceptors of every channel (for tracing, or a test
    // that watches the calls); empty: none.
    std::function<
        std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>()>
        interceptors;
};

// ---------------------------------------------------------------- exec

// A command: an argv executed directly, or a command string the server's
// shell guard tokenizes (no shell runs it).
class Command
{
  public:
    Command(const char *command) : command_(command)
    {
    }
    Command(std::string command) : command_(std::move(command))
    {
    }
    Command(std::initializer_list<std::string> argv) : argv_(argv)
    {
    }
    Command(std::vector<std::string> argv) : argv_(std::move(argv))
    {
    }
    static Command Argv(std::vector<std::string> argv)
    {
        return Command(std::move(argv));
    }
    static Command String(std::string command)
    {
        return Command(std::move(command));
    }
    const std::vector<std::string> &argv() const
    {
        return argv_;
    }
    const std::string &command() const
    {
        return command_;
    }

  private:
    std::vector<std::string> argv_;
    std::string command_;
};

enum class Stream { Stdout, Stderr, Pty };

// One piece of a process's output, or a gap: bytes [offset, offset +
// bytes_dropped) of `stream` that were not delivered (no longer in the
// server's replay ring). Gaps are surfaced, never dropped silently.
struct Output {
    Stream stream = Stream::Stdout;
    std::string data;
    uint64_t offset = 0;
    bool gap = false;
    uint64_t bytes_dropped = 0;
};

using OutputCallback = std::function<void(const Output &)>;

struct ExecOptions {
    // Relative to the workspace root; "": the root.
    std::string cwd;
    std::map<std::string, std::string> env;
    // The workspace's secrets (OpenOptions::secrets) the command gets in its
    // environment, by name; an unknown name throws Malformed.
    std::vector<std::string> secrets;
    // 0 or above the workspace maximum: that maximum; expiry is TIMEOUT.
    std::chrono::milliseconds timeout{0};
    // Keep stdin open for Process::WriteStdin (Exec only).
    bool stdin_open = false;
    // Allocate a terminal of rows x cols; output then arrives as Stream::Pty.
    std::optional<std::pair<uint32_t, uint32_t>> pty;
    std::string tag;
    // Keep running after the Process handle goes away (Attach later).
    bool background = false;
    uint64_t max_output_bytes = 0;
    // Receives every output chunk and gap on the handle's reader thread, in
    // order, as it arrives. Empty: they queue for Process::Next(). The
    // callback must not call Wait() on its own process.
    OutputCallback on_output;
};

// How a command ended: the full `exited` record.
struct ExitResult {
    pb::Exited exited;

    pb::ExitCause cause() const
    {
        return exited.cause();
    }
    int exit_code() const
    {
        return exited.exit_code();
    }
    int signal() const
    {
        return exited.signal();
    }
    // Its workspace's lifetime ended.
    bool expired() const
    {
        return exited.cause() == pb::EXIT_CAUSE_EXPIRED;
    }
    // Exited by itself with status 0.
    bool success() const
    {
        return exited.cause() == pb::EXIT_CAUSE_EXITED && exited.exit_code() == 0;
    }
};

struct RunResult {
    // Head and tail of each stream (see Exited.stdout / stderr).
    std::string out;
    std::string err;
    ExitResult result;
    std::string process_id;
};

struct Core;
class ProcessHandle;

// A running (or attached) command: the Exec.Start or Exec.Attach stream,
// read by a thread the handle owns. Movable, not copyable. Destroying it
// ends the stream, which kills a non-background process.
class Process
{
  public:
    Process(Process &&) noexcept;
    Process &operator=(Process &&) noexcept;
    Process(const Process &) = delete;
    Process &operator=(const Process &) = delete;
    ~Process();

    const pb::Started &started() const;
    const std::string &id() const
    {
        return started().id();
    }
    int64_t pid() const
    {
        return started().pid();
    }
    const std::string &tag() const
    {
        return started().tag();
    }

    // The next output chunk or gap, blocking until one arrives; nullopt once
    // the stream has ended (then Wait() returns at once). Never yields
    // anything when an on_output callback was given.
    std::optional<Output> Next();

    // Exec only (an attached process is read-only): feed stdin, close it,
    // send a signal to the whole process tree, resize the terminal. Each
    // returns false when the stream has already ended.
    bool WriteStdin(std::string_view data);
    bool CloseStdin();
    bool Signal(int sig);
    bool Resize(uint32_t rows, uint32_t cols);

    // A handle on this process by its id, for the unary input calls. Its
    // offset is known (0) unless WriteStdin sent bytes on the stream.
    ProcessHandle Handle() const;

    // Cancels the stream: a non-background process is killed, its exited
    // cause CANCELLED.
    void Cancel();

    // Blocks until the process ended; the exited record. After Cancel() the
    // stream carries no record, so it is read from ListProcesses. Throws the
    // call's error when the stream ended without one, or what an on_output
    // callback threw.
    ExitResult Wait();

    struct State;

  private:
    friend class Workspace;
    explicit Process(std::unique_ptr<State> st);
    std::unique_ptr<State> st_;
};

// Addresses a running process by tag or id through the unary calls
// Exec.SendInput, CloseInput and Resize: no Start stream is needed, so a
// process another client started (or one started before a reconnect) can
// be fed. Copies share the offset; safe for concurrent use.
//
// SendInput writes at the stdin offset the handle tracks, so a repeated call
// (after a lost answer) delivers nothing twice; a handle that does not know
// the offset yet appends its first bytes and learns it from the answer.
class ProcessHandle
{
  public:
    // SendInput at the tracked offset (append while unknown); returns the
    // stdin offset after it. At most 1 MiB; the process needs stdin or a
    // terminal (else StdinClosed).
    uint64_t SendInput(std::string_view data);
    // At an explicit offset: bytes before the process's stdin offset are
    // skipped; past it throws InputGap (metadata "offset": the one expected).
    uint64_t SendInputAt(std::string_view data, uint64_t offset);
    // After whatever stdin took so far; not safe to repeat.
    uint64_t AppendInput(std::string_view data);
    // Closes stdin (idempotent); returns the bytes it took in all.
    uint64_t CloseInput();
    // Resizes the terminal (NoPty for a process without one).
    void Resize(uint32_t rows, uint32_t cols);
    // The offset the next SendInput writes at, when known.
    std::optional<uint64_t> offset() const;

    struct State;

  private:
    friend class Workspace;
    friend class Process;
    explicit ProcessHandle(std::shared_ptr<State> st) : st_(std::move(st))
    {
    }
    uint64_t Send(std::string_view data, uint64_t offset, bool append);
    std::shared_ptr<State> st_;
};

// ---------------------------------------------------------------- files

struct WriteOptions {
    // 0: 0644 for a new file; an existing file keeps its mode.
    uint32_t mode = 0;
    bool create_parents = false;
    // Lowercase hex SHA-256 the current content must have (CONFLICT).
    std::string if_match;
    // Refuse to replace an existing file (EXISTS).
    bool if_absent = false;
    // Bytes per data message (at most 4 MiB).
    size_t chunk_size = 1 << 20;
};

// Options of Workspace::ReadArchive and DownloadTree.
struct ReadArchiveOptions {
    pb::ArchiveFormat format = pb::ARCHIVE_FORMAT_TAR;
    // Globs on the path relative to the archive's root: an entry is stored
    // when it matches some include (none: all) and no exclude.
    std::vector<std::string> include;
    std::vector<std::string> exclude;
};

// Options of Workspace::WriteArchive and UploadTree.
struct WriteArchiveOptions {
    pb::ArchiveFormat format = pb::ARCHIVE_FORMAT_TAR;
    // NONE: `path` must not exist (Exists); REPLACE: replaced whole; MERGE:
    // each top-level entry published into the existing directory.
    pb::ArchiveOverwrite overwrite = pb::ARCHIVE_OVERWRITE_NONE;
    bool create_parents = false;
    // Bytes per data message (at most 4 MiB).
    size_t chunk_size = 1 << 20;
};

struct WatchOptions {
    // Also every directory below the path, including ones created later.
    bool recursive = false;
    // Globs on the workspace-relative path (FileSystem.Glob's syntax).
    std::vector<std::string> include;
    std::vector<std::string> exclude;
    // Events for one path within this window are merged (0: 10 ms).
    uint32_t coalesce_ms = 0;
};

// Filters of Client::ListSnapshots and ListSnapshotsPage.
struct ListSnapshotsOptions {
    // Only snapshots taken from this workspace.
    std::string workspace_id;
    std::string label_selector;
    std::string name;
    uint32_t page_size = 0;
};

struct SnapshotPage {
    std::vector<pb::Snapshot> snapshots;
    // Empty on the last page.
    std::string next_page_token;
};

// A running FileSystem.Watch (Workspace::Watch). Next() blocks for the next
// event; the first one is WATCH_EVENT_READY, already received when Watch
// returned. Cancel() (from any thread) or the destructor ends the call;
// Next() then returns nullopt. A watch whose path went away ends after
// WATCH_EVENT_GONE (nullopt next); a failure of the call throws.
class Watcher
{
  public:
    Watcher(Watcher &&) noexcept;
    Watcher &operator=(Watcher &&) noexcept;
    Watcher(const Watcher &) = delete;
    Watcher &operator=(const Watcher &) = delete;
    ~Watcher();

    std::optional<pb::WatchEvent> Next();
    void Cancel();

    struct State;

  private:
    friend class Workspace;
    explicit Watcher(std::unique_ptr<State> st);
    std::unique_ptr<State> st_;
};

struct GrepOptions {
    std::string path;
    std::string include;
    bool ignore_case = false;
    uint32_t max_matches = 0;
    uint32_t max_depth = 0;
};

// ---------------------------------------------------------------- workspace

// An open workspace. Its destructor closes it (and so removes its storage)
// unless Release() was called. Movable, not copyable; one thread at a time
// (Client::Resolve makes another handle for another thread).
//
// A handle that holds a ref recovers from a lost backend by itself, once per
// call: when a call that is safe to repeat throws WorkspaceEvicted, or a
// WorkspaceFailed whose metadata has resolve="true" (the workspace's sandbox
// box or docker container ended or lost its agent: its files are intact
// and a Resolve brings up a fresh one over them), it resolves its ref and,
// if that succeeds, makes the call again. If the Resolve fails too (the
// storage is gone, the workspace expired or was closed), the call's own
// error is thrown (metadata cause=expired for an expired workspace). Any
// other WorkspaceFailed (no bubblewrap, an image that cannot be pulled, a
// bind path gone, ...) is thrown at once, without a Resolve, which would
// not repair it. Repeated: Describe, Extend,
// SetSecrets, the unary file calls, ReadFile before any data, WriteFile of
// a string_view, Run, Exec and Attach before the process started, Ps and
// Kill. ConnectOptions::eviction_retry = false turns it off.
class Workspace
{
  public:
    Workspace(Workspace &&) noexcept;
    Workspace &operator=(Workspace &&) noexcept;
    Workspace(const Workspace &) = delete;
    Workspace &operator=(const Workspace &) = delete;
    ~Workspace();

    const std::string &id() const
    {
        return info_.id();
    }
    // The signed, serializable handle (Client::Resolve takes it back).
    const pb::WorkspaceRef &ref() const
    {
        return info_.ref();
    }
    const std::string &provider() const
    {
        return info_.provider();
    }
    const pb::Workspace &info() const
    {
        return info_;
    }
    // The name and labels given at Open.
    const std::string &name() const
    {
        return info_.name();
    }
    std::map<std::string, std::string> labels() const
    {
        return {info_.labels().begin(), info_.labels().end()};
    }
    // The lifetime in force and when the workspace expires if nothing else
    // happens (nullopt: never), as of Open, Resolve or this handle's last
    // Extend; an idle expiry moves with every activity (Describe has it now).
    Lifetime lifetime() const;
    std::optional<std::chrono::system_clock::time_point> expires_at() const;
    // The node behind a front proxy that holds the workspace, as the front
    // named it in Open's or Resolve's response; every call about the
    // workspace (files, exec streams, Describe, Close) is sent there. Empty
    // when the server answered directly. Keep it with the ref and pass it
    // to Client::Resolve.
    const std::string &node() const
    {
        return node_;
    }

    // Closes the workspace; returns the server's already_closed. Idempotent:
    // a second call asks again and the server answers already_closed = true.
    bool Close();
    // Keeps the workspace open past this handle; returns its ref.
    pb::WorkspaceRef Release();
    // State, limits and isolation now, the host uid() and gid() the
    // workspace's commands run as, and a docker container's runtime
    // (container().runtime()).
    pb::DescribeResponse Describe();
    // ttl > 0: it expires ttl from now (within the server's --max-lifetime,
    // else Limit); idle_timeout > 0: its new idle timeout; a 0 keeps what it
    // had (both 0: Malformed). Returns the new expiry (nullopt: never).
    std::optional<std::chrono::system_clock::time_point>
    Extend(std::chrono::milliseconds ttl,
           std::chrono::milliseconds idle_timeout = std::chrono::milliseconds(0));
    // Gives the secrets again after a server restart, or changes them:
    // merged into what the workspace has, or exactly these with `replace`.
    SecretsState SetSecrets(const std::map<std::string, std::string> &secrets,
                            bool replace = false);

    // Files (filesystem.proto).
    std::string ReadFile(const std::string &path, uint64_t offset = 0, uint64_t length = 0);
    // Streams the content chunk by chunk (at most 256 KiB each) as it
    // arrives; returns the file's info.
    pb::FileInfo ReadFile(const std::string &path,
                          const std::function<void(std::string_view)> &on_chunk,
                          uint64_t offset = 0, uint64_t length = 0);
    pb::FileInfo ReadFile(const std::string &path, std::ostream &out);
    pb::WriteFileResponse WriteFile(const std::string &path, std::string_view data,
                                    const WriteOptions &opts = {});
    // Streams from `next`, which fills its argument with the next chunk and
    // returns false at the end. Commits atomically after the last chunk; an
    // exception from `next` cancels the write, leaving the old content.
    pb::WriteFileResponse WriteFile(const std::string &path,
                                    const std::function<bool(std::string *)> &next,
                                    const WriteOptions &opts = {});
    pb::WriteFileResponse WriteFile(const std::string &path, std::istream &in,
                                    const WriteOptions &opts = {});
    pb::FileInfo Stat(const std::string &path);
    pb::ListDirResponse ListDir(const std::string &path = ".", uint32_t depth = 0,
                                uint32_t max_entries = 0);
    pb::FileInfo MakeDir(const std::string &path, bool parents = false, uint32_t mode = 0);
    uint64_t Remove(const std::string &path, bool recursive = false);
    pb::FileInfo Move(const std::string &from, const std::string &to, bool replace = false);
    pb::GlobResponse Glob(const std::string &pattern, const std::string &path = "",
                          uint32_t max_results = 0);
    // Calls on_match for each match as batches arrive; returns the summary.
    pb::GrepSummary Grep(const std::string &pattern,
                         const std::function<void(const pb::GrepMatch &)> &on_match,
                         const GrepOptions &opts = {});
    std::vector<pb::GrepMatch> Grep(const std::string &pattern, const GrepOptions &opts = {});
    pb::EditFileResponse EditFile(const std::string &path, const std::string &old_text,
                                  const std::string &new_text, bool replace_all = false,
                                  const std::string &if_match = "");

    // Watches `path` ("." the root) for changes, whoever makes them.
    // Returns once the server reported READY (the first event, which Next()
    // returns first): every later change is reported. Made again after a
    // re-resolve when it failed before READY.
    Watcher Watch(const std::string &path = ".", const WatchOptions &opts = {});

    // A tar (or tar.gz) of `path`, streamed to on_chunk as it arrives;
    // returns the trailer (counts, entries skipped with why). Made again
    // after a re-resolve only while nothing reached on_chunk. An exception
    // from on_chunk cancels the call.
    pb::ArchiveTrailer ReadArchive(const std::string &path,
                                   const std::function<void(std::string_view)> &on_chunk,
                                   const ReadArchiveOptions &opts = {});
    pb::ArchiveTrailer ReadArchive(const std::string &path, std::ostream &out,
                                   const ReadArchiveOptions &opts = {});
    // Extracts a tar read from `next` (fills its argument with the next
    // chunk, false at the end) into `path`. Always sets require_finish and
    // sends finish with the last message; an exception from `next` cancels,
    // and a refused archive throws BadArchive (metadata "entry", "problem"): either
    // way the workspace is left as it was. Never made again by itself.
    pb::ArchiveTrailer WriteArchive(const std::string &path,
                                    const std::function<bool(std::string *)> &next,
                                    const WriteArchiveOptions &opts = {});
    pb::ArchiveTrailer WriteArchive(const std::string &path, std::string_view data,
                                    const WriteArchiveOptions &opts = {});
    pb::ArchiveTrailer WriteArchive(const std::string &path, std::istream &in,
                                    const WriteArchiveOptions &opts = {});
    // Uploads the contents of the local directory `local_dir` to `path`:
    // the system's GNU tar (run directly, no shell) makes a pax tar of its
    // entries, symlinks stored as links and never followed, owners as 0.
    // (Special files are stored too, and the server refuses them.)
    pb::ArchiveTrailer UploadTree(const std::string &local_dir, const std::string &path,
                                  const WriteArchiveOptions &opts = {});
    // Copies `path` into the local directory `local_dir` (made when missing;
    // an existing one must be empty). The tar is kept in a temporary file
    // and checked first: a member with an absolute name or a ".." component,
    // a symlink whose target leads outside local_dir, a hard link to a name
    // that is not an earlier member, or a special file throws
    // UnsafeArchive and nothing is extracted. Then the system's GNU tar
    // extracts it (--no-same-owner, --no-overwrite-dir). Returns the trailer.
    pb::ArchiveTrailer DownloadTree(const std::string &path, const std::string &local_dir,
                                    const ReadArchiveOptions &opts = {});

    // Snapshots (workspaces.proto). A snapshot of this workspace's files;
    // `name` unique among the tenant's snapshots ("" for none).
    pb::Snapshot Snapshot(const std::string &name = "",
                          const std::map<std::string, std::string> &labels = {});
    // Puts the files back to a snapshot's content; Busy while commands run
    // unless `force` (then processes_ended() says how many it ended).
    pb::RestoreResponse Restore(const std::string &snapshot_id, bool force = false);

    // Exec (exec.proto). Exec returns once the process started; a refused
    // command throws (CommandNotAllowed, Metachar, ...).
    Process Exec(const Command &cmd, ExecOptions opts = {});
    RunResult Run(const Command &cmd, const ExecOptions &opts = {},
                  const std::string &stdin_data = "");
    // Replays a process's output from `offset`. `tag_or_id` is taken as an
    // id when it has the server's id form ("p_" + 16 hex), else as a tag.
    Process Attach(const std::string &tag_or_id, uint64_t offset = 0,
                   OutputCallback on_output = nullptr);
    std::vector<pb::ProcessInfo> Ps();
    // SendSignal to the whole tree of a process, by tag or id as Attach.
    void Kill(const std::string &tag_or_id, int sig = 9);
    // A handle on a process by tag or id (as Attach), for SendInput,
    // CloseInput and Resize; no call is made.
    ProcessHandle Handle(const std::string &tag_or_id) const;

  private:
    friend class Client;
    Workspace(std::shared_ptr<Core> core, pb::Workspace info, std::string node);
    void CloseQuietly() noexcept;
    // Runs op; on a recoverable failure resolves the ref once and, if that
    // succeeds, runs op again (see the class comment).
    template <typename F> auto Retrying(F &&op) -> decltype(op());
    bool ReResolve() noexcept;
    std::shared_ptr<Core> core_;
    pb::Workspace info_;
    std::string node_;
    bool closed_ = false;
};

// ---------------------------------------------------------------- client

// A connection to one server. Cheap to move; Workspaces it returns share
// the channel and stay usable after the Client is gone.
class Client
{
  public:
    // `address` is a gRPC target: "host:port" for TCP, or
    // "unix:/ABSOLUTE/PATH" (also spelled "unix:///ABSOLUTE/PATH") for a
    // server's unix socket, which gRPC dials itself. "" means
    // WORKSPACED_ADDR, else the server's default listener
    // unix:/run/workspaced/workspaced.sock. On a unix socket the server
    // names the caller's tenant from its uid unless a token is sent.
    // Connecting is lazy: errors surface on the first call.
    static Client Connect(const std::string &address = "", ConnectOptions opts = {});

    // Behind a front proxy, the workspace is pinned to the node that
    // answered the attempt that succeeded (a retried attempt may land on
    // another node than the one that failed).
    Workspace Open(const ProviderConfig &provider, const Capabilities &caps = Capabilities(),
                   const RetryPolicy &retry = RetryPolicy());
    // Open with a lifetime, labels, name, env, secrets, request id.
    Workspace Open(const ProviderConfig &provider, const Capabilities &caps,
                   const OpenOptions &opts);
    // `node`: behind a front proxy, the node that holds the ref's workspace
    // (Workspace::node() when the ref was saved); the call goes there and
    // the workspace is pinned to it, or to the node the response names if
    // it names one. An unknown name throws a transient UNAVAILABLE Error.
    // Empty: sent anywhere, as to a single server.
    Workspace Resolve(const pb::WorkspaceRef &ref, const std::string &node = "");
    std::vector<pb::ProviderInfo> Providers();
    // The caller's workspaces that are not closed, in id order: every page.
    std::vector<pb::WorkspaceSummary> List(const ListOptions &opts = {});
    // One page: the one after `page_token` ("" for the first). The token is
    // only valid with the same filters (else Malformed).
    ListPage ListOnePage(const ListOptions &opts, const std::string &page_token = "");
    // The tenant's snapshots in id order: every page, or one.
    std::vector<pb::Snapshot> ListSnapshots(const ListSnapshotsOptions &opts = {});
    SnapshotPage ListSnapshotsPage(const ListSnapshotsOptions &opts,
                                   const std::string &page_token = "");
    // Deletes a snapshot (NoSuchSnapshot when unknown); returns the store
    // bytes freed.
    uint64_t DeleteSnapshot(const std::string &snapshot_id);

    const std::string &address() const;

  private:
    explicit Client(std::shared_ptr<Core> core);
    std::shared_ptr<Core> core_;
};

} // namespace workspaced
