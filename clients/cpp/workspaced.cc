#include "workspaced.h"

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <istream>
#include <iterator>
#include <system_error>
#include <ostream>
#include <random>
#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <set>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace workspaced
{

// ---------------------------------------------------------------- errors

Error::Error(grpc::StatusCode code, std::string reason, std::string message,
             std::map<std::string, std::string> metadata)
    : std::runtime_error("workspaced: " + std::to_string(static_cast<int>(code)) +
                         (reason.empty() ? "" : " " + reason) +
                         (message.empty() ? "" : ": " + message)),
      code_(code), reason_(std::move(reason)), message_(std::move(message)),
      metadata_(std::move(metadata))
{
}

bool Error::transient() const
{
    auto it = metadata_.find("transient");
    if (it != metadata_.end())
        return it->second == "true";
    return code_ == grpc::StatusCode::UNAVAILABLE;
}

namespace
{

template <typename T>
[[noreturn]] void Throw(grpc::StatusCode code, std::string reason, std::string message,
                        std::map<std::string, std::string> metadata)
{
    throw T(code, std::move(reason), std::move(message), std::move(metadata));
}

using Thrower = void (*)(grpc::StatusCode, std::string, std::string,
                         std::map<std::string, std::string>);

// The typed error of each reason, by the generated enum's value: built from
// WORKSPACED_ERROR_REASONS, so every entry is a value of the enum.
const std::map<pb::ErrorReason, Thrower> &Throwers()
{
#define WORKSPACED_THROWER(Name, Reason) {pb::Reason, Throw<Name>},
    static const std::map<pb::ErrorReason, Thrower> m = {
        WORKSPACED_ERROR_REASONS(WORKSPACED_THROWER)};
#undef WORKSPACED_THROWER
    return m;
}

pb::ErrorReason ParseReason(const std::string &reason)
{
    pb::ErrorReason value = pb::ERROR_REASON_UNSPECIFIED;
    if (reason.empty() || !pb::ErrorReason_Parse(reason, &value))
        return pb::ERROR_REASON_UNSPECIFIED;
    return value;
}

} // namespace

pb::ErrorReason Error::reason_code() const
{
    return ParseReason(reason_);
}

void ThrowStatus(const grpc::Status &status)
{
    std::string reason;
    std::map<std::string, std::string> metadata;
    google::rpc::Status st;
    // The details are a serialized google.rpc.Status whose Any entries hold
    // the ErrorInfo; a reason from another domain is not ours to interpret.
    if (!status.error_details().empty() && st.ParseFromString(status.error_details())) {
        for (const auto &any : st.details()) {
            google::rpc::ErrorInfo info;
            if (!any.Is<google::rpc::ErrorInfo>() || !any.UnpackTo(&info) ||
                info.domain() != kErrorDomain)
                continue;
            reason = info.reason();
            for (const auto &kv : info.metadata())
                metadata[kv.first] = kv.second;
            break;
        }
    }
    pb::ErrorReason value = ParseReason(reason);
    // The server's refusal of credentials comes with the bare code.
    if (value == pb::ERROR_REASON_UNSPECIFIED &&
        status.error_code() == grpc::StatusCode::UNAUTHENTICATED)
        throw Unauthenticated(status.error_code(), reason, status.error_message(),
                              std::move(metadata));
    auto it = Throwers().find(value);
    if (it != Throwers().end())
        it->second(status.error_code(), reason, status.error_message(), std::move(metadata));
    throw Error(status.error_code(), reason, status.error_message(), std::move(metadata));
}

void ThrowIfError(const grpc::Status &status)
{
    if (!status.ok())
        ThrowStatus(status);
}

// ---------------------------------------------------------------- retry

std::chrono::milliseconds RetryPolicy::Backoff(int attempt) const
{
    double mult = multiplier < 1 ? 1 : multiplier;
    double d = static_cast<double>(initial_backoff.count());
    for (int i = 1; i < attempt && (max_backoff.count() <= 0 || d < max_backoff.count()); i++)
        d *= mult;
    if (max_backoff.count() > 0 && d > max_backoff.count())
        d = static_cast<double>(max_backoff.count());
    if (jitter > 0) {
        double r;
        if (random) {
            r = random();
        } else {
            static std::mutex mu;
            static std::mt19937_64 rng{std::random_device{}()};
            std::lock_guard<std::mutex> lock(mu);
            r = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
        }
        d -= d * jitter * r;
    }
    return std::chrono::milliseconds(static_cast<int64_t>(d));
}

void RetryPolicy::Wait(std::chrono::milliseconds d) const
{
    if (sleep)
        sleep(d);
    else
        std::this_thread::sleep_for(d);
}

// ---------------------------------------------------------------- config

Capabilities &Capabilities::WithFs(uint64_t max_file_size_bytes)
{
    caps_.mutable_fs()->set_max_file_size_bytes(max_file_size_bytes);
    return *this;
}

Capabilities &Capabilities::WithShell(std::vector<std::string> allowed_commands,
                                      std::vector<std::string> pass_env,
                                      std::chrono::milliseconds max_duration)
{
    auto *shell = caps_.mutable_shell();
    shell->clear_allowed_commands();
    for (auto &c : allowed_commands)
        shell->add_allowed_commands(std::move(c));
    shell->clear_pass_env();
    for (auto &e : pass_env)
        shell->add_pass_env(std::move(e));
    shell->set_max_duration_ms(static_cast<uint64_t>(max_duration.count()));
    return *this;
}

// ---------------------------------------------------------------- core

// What a Client and all its Workspaces share: the channel, the stubs and
// how to decorate each call.
struct Core {
    std::string address;
    std::string token;
    std::chrono::milliseconds call_timeout{0};
    bool eviction_retry = true;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<pb::Workspaces::Stub> workspaces;
    std::unique_ptr<pb::FileSystem::Stub> fs;
    std::unique_ptr<pb::Exec::Stub> exec;
    std::unique_ptr<pb::Providers::Stub> providers;

    // A context with the bearer token and, for a call about a workspace
    // behind a front proxy, its node; unary calls also get the deadline.
    std::unique_ptr<grpc::ClientContext> Context(bool unary = true,
                                                 const std::string &node = "") const
    {
        auto ctx = std::make_unique<grpc::ClientContext>();
        if (!token.empty())
            ctx->AddMetadata("authorization", "Bearer " + token);
        if (!node.empty())
            ctx->AddMetadata(kNodeHeader, node);
        if (unary && call_timeout.count() > 0)
            ctx->set_deadline(std::chrono::system_clock::now() + call_timeout);
        return ctx;
    }
};

namespace
{

std::string Env(const char *name)
{
    const char *v = getenv(name);
    return v ? v : "";
}

// The node a response's initial metadata names, or "".
std::string NodeOf(const grpc::ClientContext &ctx)
{
    const auto &md = ctx.GetServerInitialMetadata();
    auto it = md.find(kNodeHeader);
    return it == md.end() ? "" : std::string(it->second.data(), it->second.size());
}

// Unary call: one place that adds the metadata and throws on failure.
// `node` pins the call to a node behind a front proxy ("": anywhere);
// ret_node, when given, receives the node the response names.
template <typename Stub, typename Req, typename Resp>
Resp Call(const Core &core, Stub *stub,
          grpc::Status (Stub::*method)(grpc::ClientContext *, const Req &, Resp *), const Req &req,
          const std::string &node = "", std::string *ret_node = nullptr)
{
    auto ctx = core.Context(true, node);
    Resp resp;
    ThrowIfError((stub->*method)(ctx.get(), req, &resp));
    if (ret_node)
        *ret_node = NodeOf(*ctx);
    return resp;
}

// The server's process ids are "p_" and 16 lowercase hex digits.
bool LooksLikeProcessId(const std::string &s)
{
    if (s.size() != 18 || s.compare(0, 2, "p_") != 0)
        return false;
    for (size_t i = 2; i < s.size(); i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

pb::ProcessConfig ToConfig(const Command &cmd, const ExecOptions &opts)
{
    pb::ProcessConfig p;
    for (const auto &a : cmd.argv())
        p.add_argv(a);
    p.set_command(cmd.command());
    p.set_cwd(opts.cwd);
    for (const auto &kv : opts.env)
        (*p.mutable_env())[kv.first] = kv.second;
    for (const auto &name : opts.secrets)
        p.add_secrets(name);
    p.set_timeout_ms(static_cast<uint64_t>(opts.timeout.count()));
    p.set_stdin(opts.stdin_open);
    if (opts.pty) {
        p.mutable_pty()->set_rows(opts.pty->first);
        p.mutable_pty()->set_cols(opts.pty->second);
    }
    p.set_tag(opts.tag);
    p.set_max_output_bytes(opts.max_output_bytes);
    p.set_background(opts.background);
    return p;
}

} // namespace

// ---------------------------------------------------------------- process

// The stream and everything the reader thread hands to the caller.
struct Process::State {
    std::unique_ptr<grpc::ClientContext> ctx;
    // Exactly one of these: Exec.Start (read-write) or Exec.Attach (read).
    std::unique_ptr<grpc::ClientReaderWriter<pb::StartRequest, pb::ProcessEvent>> rw;
    std::unique_ptr<grpc::ClientReader<pb::ProcessEvent>> r;
    OutputCallback on_output;

    // Serializes writes and keeps Finish from racing one.
    std::mutex write_mu;
    bool writes_closed = false;

    std::mutex mu;
    std::condition_variable cv;
    bool have_started = false;
    pb::Started started;
    std::deque<Output> queue;
    bool done = false; // the stream ended and Finish returned
    bool have_exited = false;
    pb::Exited exited;
    grpc::Status status;
    std::exception_ptr callback_error;
    // Set by Cancel(): the stream then ends without `exited`, so Wait()
    // asks the server for the record instead.
    bool cancelled = false;
    std::shared_ptr<Core> core;
    std::string workspace_id;
    std::string node;
    // Bytes WriteStdin sent (Handle()); written under write_mu.
    std::atomic<uint64_t> stdin_sent{0};

    std::thread reader;

    bool Read(pb::ProcessEvent *ev)
    {
        return rw ? rw->Read(ev) : r->Read(ev);
    }

    void Deliver(Output out)
    {
        if (on_output) {
            if (callback_error)
                return;
            try {
                on_output(out);
            } catch (...) {
                // The reader thread cannot throw: end the stream and let
                // Wait() rethrow.
                callback_error = std::current_exception();
                ctx->TryCancel();
            }
            return;
        }
        std::lock_guard<std::mutex> lock(mu);
        queue.push_back(std::move(out));
        cv.notify_all();
    }

    void Loop()
    {
        pb::ProcessEvent ev;
        while (Read(&ev)) {
            switch (ev.event_case()) {
            case pb::ProcessEvent::kStarted: {
                std::lock_guard<std::mutex> lock(mu);
                started = ev.started();
                have_started = true;
                cv.notify_all();
                break;
            }
            case pb::ProcessEvent::kStdout:
                Deliver({Stream::Stdout, ev.stdout().data(), ev.stdout().offset(), false, 0});
                break;
            case pb::ProcessEvent::kStderr:
                Deliver({Stream::Stderr, ev.stderr().data(), ev.stderr().offset(), false, 0});
                break;
            case pb::ProcessEvent::kPty:
                Deliver({Stream::Pty, ev.pty().data(), ev.pty().offset(), false, 0});
                break;
            case pb::ProcessEvent::kGap: {
                Stream s = ev.gap().stream() == pb::OUTPUT_STREAM_STDERR ? Stream::Stderr
                           : ev.gap().stream() == pb::OUTPUT_STREAM_PTY  ? Stream::Pty
                                                                         : Stream::Stdout;
                Deliver({s, "", ev.gap().offset(), true, ev.gap().bytes_dropped()});
                break;
            }
            case pb::ProcessEvent::kExited: {
                std::lock_guard<std::mutex> lock(mu);
                exited = ev.exited();
                have_exited = true;
                break;
            }
            default:
                break;
            }
        }
        grpc::Status st;
        {
            // No write may be in flight or start once Finish runs.
            std::lock_guard<std::mutex> lock(write_mu);
            writes_closed = true;
            st = rw ? rw->Finish() : r->Finish();
        }
        std::lock_guard<std::mutex> lock(mu);
        status = st;
        done = true;
        cv.notify_all();
    }

    bool Write(const pb::StartRequest &req)
    {
        std::lock_guard<std::mutex> lock(write_mu);
        if (!rw || writes_closed)
            return false;
        return rw->Write(req);
    }

    // Waits for `started` (true) or the end of the stream (false).
    bool WaitStarted()
    {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return have_started || done; });
        return have_started;
    }

    void Stop()
    {
        if (reader.joinable()) {
            ctx->TryCancel();
            reader.join();
        }
    }
};

Process::Process(std::unique_ptr<State> st) : st_(std::move(st))
{
}
Process::Process(Process &&) noexcept = default;
Process &Process::operator=(Process &&o) noexcept
{
    if (this != &o) {
        if (st_)
            st_->Stop();
        st_ = std::move(o.st_);
    }
    return *this;
}

Process::~Process()
{
    if (st_)
        st_->Stop();
}

const pb::Started &Process::started() const
{
    return st_->started;
}

std::optional<Output> Process::Next()
{
    std::unique_lock<std::mutex> lock(st_->mu);
    st_->cv.wait(lock, [this] { return !st_->queue.empty() || st_->done; });
    if (st_->queue.empty())
        return std::nullopt;
    Output out = std::move(st_->queue.front());
    st_->queue.pop_front();
    return out;
}

bool Process::WriteStdin(std::string_view data)
{
    // The server takes at most 1 MiB per message.
    const size_t max = 1 << 20;
    do {
        size_t n = std::min(max, data.size());
        pb::StartRequest req;
        req.set_stdin(data.data(), n);
        if (!st_->Write(req))
            return false;
        st_->stdin_sent += n;
        data.remove_prefix(n);
    } while (!data.empty());
    return true;
}

bool Process::CloseStdin()
{
    pb::StartRequest req;
    req.set_close_stdin(true);
    return st_->Write(req);
}

bool Process::Signal(int sig)
{
    pb::StartRequest req;
    req.set_signal(sig);
    return st_->Write(req);
}

bool Process::Resize(uint32_t rows, uint32_t cols)
{
    pb::StartRequest req;
    req.mutable_resize()->set_rows(rows);
    req.mutable_resize()->set_cols(cols);
    return st_->Write(req);
}

// ---------------------------------------------------------------- handles

struct ProcessHandle::State {
    std::shared_ptr<Core> core;
    std::string workspace_id;
    std::string node;
    std::string id, tag;
    mutable std::mutex mu;
    std::optional<uint64_t> offset;
};

namespace
{

template <typename Req> void Target(Req *req, const ProcessHandle::State &st)
{
    req->set_workspace_id(st.workspace_id);
    req->set_id(st.id);
    req->set_tag(st.tag);
}

} // namespace

uint64_t ProcessHandle::Send(std::string_view data, uint64_t offset, bool append)
{
    pb::SendInputRequest req;
    Target(&req, *st_);
    req.set_data(data.data(), data.size());
    req.set_offset(offset);
    req.set_append(append);
    auto resp = Call(*st_->core, st_->core->exec.get(), &pb::Exec::Stub::SendInput, req, st_->node);
    std::lock_guard<std::mutex> lock(st_->mu);
    if (!st_->offset || resp.offset() > *st_->offset)
        st_->offset = resp.offset();
    return resp.offset();
}

uint64_t ProcessHandle::SendInput(std::string_view data)
{
    std::optional<uint64_t> at = offset();
    return at ? Send(data, *at, false) : Send(data, 0, true);
}

uint64_t ProcessHandle::SendInputAt(std::string_view data, uint64_t at)
{
    return Send(data, at, false);
}

uint64_t ProcessHandle::AppendInput(std::string_view data)
{
    return Send(data, 0, true);
}

uint64_t ProcessHandle::CloseInput()
{
    pb::CloseInputRequest req;
    Target(&req, *st_);
    return Call(*st_->core, st_->core->exec.get(), &pb::Exec::Stub::CloseInput, req, st_->node)
        .offset();
}

void ProcessHandle::Resize(uint32_t rows, uint32_t cols)
{
    pb::ResizeRequest req;
    Target(&req, *st_);
    req.mutable_size()->set_rows(rows);
    req.mutable_size()->set_cols(cols);
    Call(*st_->core, st_->core->exec.get(), &pb::Exec::Stub::Resize, req, st_->node);
}

std::optional<uint64_t> ProcessHandle::offset() const
{
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->offset;
}

ProcessHandle Process::Handle() const
{
    auto h = std::make_shared<ProcessHandle::State>();
    h->core = st_->core;
    h->workspace_id = st_->workspace_id;
    h->node = st_->node;
    h->id = st_->started.id();
    if (st_->stdin_sent == 0)
        h->offset = 0;
    return ProcessHandle(std::move(h));
}

ProcessHandle Workspace::Handle(const std::string &tag_or_id) const
{
    auto h = std::make_shared<ProcessHandle::State>();
    h->core = core_;
    h->workspace_id = id();
    h->node = node_;
    if (LooksLikeProcessId(tag_or_id))
        h->id = tag_or_id;
    else
        h->tag = tag_or_id;
    return ProcessHandle(std::move(h));
}

void Process::Cancel()
{
    {
        std::lock_guard<std::mutex> lock(st_->mu);
        st_->cancelled = true;
    }
    st_->ctx->TryCancel();
}

ExitResult Process::Wait()
{
    std::unique_lock<std::mutex> lock(st_->mu);
    st_->cv.wait(lock, [this] { return st_->done; });
    if (st_->callback_error)
        std::rethrow_exception(st_->callback_error);
    if (st_->have_exited)
        return ExitResult{st_->exited};
    if (st_->cancelled && st_->have_started) {
        lock.unlock();
        // The server ends the tree (SIGTERM, grace, SIGKILL) and keeps the
        // record of a recently finished process: poll ListProcesses for it.
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        pb::ListProcessesRequest req;
        req.set_workspace_id(st_->workspace_id);
        while (std::chrono::steady_clock::now() < deadline) {
            auto resp = Call(*st_->core, st_->core->exec.get(), &pb::Exec::Stub::ListProcesses, req,
                             st_->node);
            for (const auto &p : resp.processes())
                if (p.id() == st_->started.id() && p.has_exited())
                    return ExitResult{p.exited()};
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        lock.lock();
    }
    if (!st_->status.ok())
        ThrowStatus(st_->status);
    throw Error(grpc::StatusCode::UNKNOWN, "", "stream ended without an exited event");
}

// ---------------------------------------------------------------- workspace

Workspace::Workspace(std::shared_ptr<Core> core, pb::Workspace info, std::string node)
    : core_(std::move(core)), info_(std::move(info)), node_(std::move(node))
{
}

Workspace::Workspace(Workspace &&o) noexcept
    : core_(std::move(o.core_)), info_(std::move(o.info_)), node_(std::move(o.node_)),
      closed_(o.closed_)
{
    o.core_.reset();
}

Workspace &Workspace::operator=(Workspace &&o) noexcept
{
    if (this != &o) {
        CloseQuietly();
        core_ = std::move(o.core_);
        info_ = std::move(o.info_);
        node_ = std::move(o.node_);
        closed_ = o.closed_;
        o.core_.reset();
    }
    return *this;
}

Workspace::~Workspace()
{
    CloseQuietly();
}

void Workspace::CloseQuietly() noexcept
{
    if (!core_ || closed_)
        return;
    try {
        Close();
    } catch (const std::exception &) {
        // A destructor cannot report; a workspace left open stays listed
        // (Client::List) until closed by its ref.
    }
}

namespace
{

// Whether `e` says the workspace's backend is gone in a way a Resolve of its
// ref may repair: evicted, or failed with the server's metadata
// resolve="true" (a box or container that ended or lost its agent). No
// other failure: a Resolve repairs none.
bool Recoverable(const Error &e)
{
    if (e.reason_code() == pb::WORKSPACE_EVICTED)
        return true;
    if (e.reason_code() != pb::WORKSPACE_FAILED)
        return false;
    auto it = e.metadata().find("resolve");
    return it != e.metadata().end() && it->second == "true";
}

std::optional<std::chrono::system_clock::time_point> TimeOf(int64_t unix_ms)
{
    if (unix_ms == 0)
        return std::nullopt;
    return std::chrono::system_clock::time_point(std::chrono::milliseconds(unix_ms));
}

} // namespace

bool Workspace::ReResolve() noexcept
{
    try {
        pb::ResolveRequest req;
        *req.mutable_ref() = info_.ref();
        std::string named;
        auto resp = Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Resolve, req,
                         node_, &named);
        if (resp.workspace().id() != info_.id())
            return false;
        pb::WorkspaceRef ref = info_.ref();
        info_ = resp.workspace();
        if (!info_.has_ref())
            *info_.mutable_ref() = ref;
        if (!named.empty())
            node_ = std::move(named);
        return true;
    } catch (const std::exception &) {
        return false;
    }
}

template <typename F> auto Workspace::Retrying(F &&op) -> decltype(op())
{
    try {
        return op();
    } catch (const Error &e) {
        if (!core_->eviction_retry || !Recoverable(e) || info_.ref().token().empty() ||
            !ReResolve())
            throw;
    }
    return op();
}

Lifetime Workspace::lifetime() const
{
    return Lifetime{std::chrono::milliseconds(info_.lifetime().ttl_ms()),
                    std::chrono::milliseconds(info_.lifetime().idle_timeout_ms())};
}

std::optional<std::chrono::system_clock::time_point> Workspace::expires_at() const
{
    return TimeOf(info_.expires_at_unix_ms());
}

std::optional<std::chrono::system_clock::time_point>
Workspace::Extend(std::chrono::milliseconds ttl, std::chrono::milliseconds idle_timeout)
{
    auto resp = Retrying([&] {
        pb::ExtendRequest req;
        req.set_workspace_id(id());
        req.mutable_lifetime()->set_ttl_ms(
            static_cast<uint64_t>(std::max<int64_t>(0, ttl.count())));
        req.mutable_lifetime()->set_idle_timeout_ms(
            static_cast<uint64_t>(std::max<int64_t>(0, idle_timeout.count())));
        return Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Extend, req, node_);
    });
    info_.set_expires_at_unix_ms(resp.expires_at_unix_ms());
    *info_.mutable_lifetime() = resp.lifetime();
    return TimeOf(resp.expires_at_unix_ms());
}

SecretsState Workspace::SetSecrets(const std::map<std::string, std::string> &secrets, bool replace)
{
    auto resp = Retrying([&] {
        pb::SetSecretsRequest req;
        req.set_workspace_id(id());
        for (const auto &kv : secrets)
            (*req.mutable_secrets())[kv.first] = kv.second;
        req.set_replace(replace);
        return Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::SetSecrets, req, node_);
    });
    return SecretsState{{resp.secret_names().begin(), resp.secret_names().end()},
                        resp.secrets_missing()};
}

bool Workspace::Close()
{
    pb::CloseRequest req;
    req.set_workspace_id(id());
    auto resp = Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Close, req, node_);
    closed_ = true;
    return resp.already_closed();
}

pb::WorkspaceRef Workspace::Release()
{
    closed_ = true;
    return ref();
}

pb::DescribeResponse Workspace::Describe()
{
    return Retrying([&] {
        pb::DescribeRequest req;
        req.set_workspace_id(id());
        return Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Describe, req, node_);
    });
}

pb::FileInfo Workspace::ReadFile(const std::string &path,
                                 const std::function<void(std::string_view)> &on_chunk,
                                 uint64_t offset, uint64_t length)
{
    bool delivered = false;
    auto once = [&] {
        pb::ReadFileRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        req.set_offset(offset);
        req.set_length(length);
        auto ctx = core_->Context(false, node_);
        auto reader = core_->fs->ReadFile(ctx.get(), req);
        pb::ReadFileResponse m;
        pb::FileInfo info;
        bool first = true;
        try {
            while (reader->Read(&m)) {
                if (first && m.has_info())
                    info = m.info();
                first = false;
                if (!m.data().empty()) {
                    delivered = true;
                    on_chunk(m.data());
                }
            }
        } catch (...) {
            // The callback gave up: end the call before unwinding.
            ctx->TryCancel();
            while (reader->Read(&m)) {
            }
            reader->Finish();
            throw;
        }
        ThrowIfError(reader->Finish());
        return info;
    };
    // Repeated after a re-resolve only while nothing reached on_chunk.
    try {
        return once();
    } catch (const Error &e) {
        if (delivered || !core_->eviction_retry || !Recoverable(e) || info_.ref().token().empty() ||
            !ReResolve())
            throw;
    }
    return once();
}

std::string Workspace::ReadFile(const std::string &path, uint64_t offset, uint64_t length)
{
    std::string out;
    ReadFile(
        path, [&out](std::string_view chunk) { out.append(chunk.data(), chunk.size()); }, offset,
        length);
    return out;
}

pb::FileInfo Workspace::ReadFile(const std::string &path, std::ostream &out)
{
    return ReadFile(path, [&out](std::string_view chunk) {
        out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
        if (!out)
            throw std::runtime_error("workspaced: writing the output stream failed");
    });
}

pb::WriteFileResponse Workspace::WriteFile(const std::string &path,
                                           const std::function<bool(std::string *)> &next,
                                           const WriteOptions &opts)
{
    auto ctx = core_->Context(false, node_);
    pb::WriteFileResponse resp;
    auto w = core_->fs->WriteFile(ctx.get(), &resp);
    pb::WriteFileRequest h;
    auto *hdr = h.mutable_header();
    hdr->set_workspace_id(id());
    hdr->set_path(path);
    hdr->set_mode(opts.mode);
    hdr->set_create_parents(opts.create_parents);
    hdr->set_if_match(opts.if_match);
    hdr->set_if_absent(opts.if_absent);
    // The last message carries finish: a cancelled stream, which can reach
    // the server looking like a half-close, never commits.
    hdr->set_require_finish(true);

    // One chunk of lookahead, so the last data message carries finish =
    // true: the commit is explicit, never inferred from a half-close.
    std::string cur, ahead;
    bool have_cur;
    try {
        have_cur = next(&cur);
        if (!have_cur) {
            h.set_finish(true);
            w->Write(h);
        } else if (w->Write(h)) {
            while (have_cur) {
                ahead.clear();
                bool have_ahead = next(&ahead);
                pb::WriteFileRequest d;
                d.set_data(std::move(cur));
                d.set_finish(!have_ahead);
                if (!w->Write(d))
                    break; // the server ended the call; Finish says why
                cur = std::move(ahead);
                have_cur = have_ahead;
            }
        }
    } catch (...) {
        // Cancel rather than half-close: a cancelled write commits nothing.
        ctx->TryCancel();
        w->Finish();
        throw;
    }
    w->WritesDone();
    ThrowIfError(w->Finish());
    return resp;
}

pb::WriteFileResponse Workspace::WriteFile(const std::string &path, std::string_view data,
                                           const WriteOptions &opts)
{
    size_t chunk = opts.chunk_size ? opts.chunk_size : (1 << 20);
    // The data is all here: the write can be made again from the start.
    return Retrying([&] {
        size_t off = 0;
        return WriteFile(
            path,
            [&](std::string *out) {
                if (off >= data.size())
                    return false;
                size_t n = std::min(chunk, data.size() - off);
                out->assign(data.data() + off, n);
                off += n;
                return true;
            },
            opts);
    });
}

pb::WriteFileResponse Workspace::WriteFile(const std::string &path, std::istream &in,
                                           const WriteOptions &opts)
{
    size_t chunk = opts.chunk_size ? opts.chunk_size : (1 << 20);
    return WriteFile(
        path,
        [&](std::string *out) {
            out->resize(chunk);
            in.read(&(*out)[0], static_cast<std::streamsize>(chunk));
            out->resize(static_cast<size_t>(in.gcount()));
            if (in.bad())
                throw std::runtime_error("workspaced: reading the input stream failed");
            return !out->empty();
        },
        opts);
}

pb::FileInfo Workspace::Stat(const std::string &path)
{
    return Retrying([&] {
        pb::StatRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        return Call(*core_, core_->fs.get(), &pb::FileSystem::Stub::Stat, req, node_).info();
    });
}

pb::ListDirResponse Workspace::ListDir(const std::string &path, uint32_t depth,
                                       uint32_t max_entries)
{
    return Retrying([&] {
        pb::ListDirRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        req.set_depth(depth);
        req.set_max_entries(max_entries);
        return Call(*core_, core_->fs.get(), &pb::FileSystem::Stub::ListDir, req, node_);
    });
}

pb::FileInfo Workspace::MakeDir(const std::string &path, bool parents, uint32_t mode)
{
    return Retrying([&] {
        pb::MakeDirRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        req.set_parents(parents);
        req.set_mode(mode);
        return Call(*core_, core_->fs.get(), &pb::FileSystem::Stub::MakeDir, req, node_).info();
    });
}

uint64_t Workspace::Remove(const std::string &path, bool recursive)
{
    return Retrying([&] {
        pb::RemoveRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        req.set_recursive(recursive);
        return Call(*core_, core_->fs.get(), &pb::FileSystem::Stub::Remove, req, node_).removed();
    });
}

pb::FileInfo Workspace::Move(const std::string &from, const std::string &to, bool replace)
{
    return Retrying([&] {
        pb::MoveRequest req;
        req.set_workspace_id(id());
        req.set_from_path(from);
        req.set_to_path(to);
        req.set_replace(replace);
        return Call(*core_, core_->fs.get(), &pb::FileSystem::Stub::Move, req, node_).info();
    });
}

pb::GlobResponse Workspace::Glob(const std::string &pattern, const std::string &path,
                                 uint32_t max_results)
{
    return Retrying([&] {
        pb::GlobRequest req;
        req.set_workspace_id(id());
        req.set_pattern(pattern);
        req.set_path(path);
        req.set_max_results(max_results);
        return Call(*core_, core_->fs.get(), &pb::FileSystem::Stub::Glob, req, node_);
    });
}

pb::GrepSummary Workspace::Grep(const std::string &pattern,
                                const std::function<void(const pb::GrepMatch &)> &on_match,
                                const GrepOptions &opts)
{
    pb::GrepRequest req;
    req.set_workspace_id(id());
    req.set_pattern(pattern);
    req.set_path(opts.path);
    req.set_include(opts.include);
    req.set_ignore_case(opts.ignore_case);
    req.set_max_matches(opts.max_matches);
    req.set_max_depth(opts.max_depth);
    auto ctx = core_->Context(false, node_);
    auto reader = core_->fs->Grep(ctx.get(), req);
    pb::GrepResponse m;
    pb::GrepSummary summary;
    try {
        while (reader->Read(&m)) {
            for (const auto &match : m.matches())
                on_match(match);
            if (m.has_summary())
                summary = m.summary();
        }
    } catch (...) {
        ctx->TryCancel();
        while (reader->Read(&m)) {
        }
        reader->Finish();
        throw;
    }
    ThrowIfError(reader->Finish());
    return summary;
}

std::vector<pb::GrepMatch> Workspace::Grep(const std::string &pattern, const GrepOptions &opts)
{
    std::vector<pb::GrepMatch> out;
    Grep(
        pattern, [&out](const pb::GrepMatch &m) { out.push_back(m); }, opts);
    return out;
}

pb::EditFileResponse Workspace::EditFile(const std::string &path, const std::string &old_text,
                                         const std::string &new_text, bool replace_all,
                                         const std::string &if_match)
{
    return Retrying([&] {
        pb::EditFileRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        req.set_old_text(old_text);
        req.set_new_text(new_text);
        req.set_replace_all(replace_all);
        req.set_if_match(if_match);
        return Call(*core_, core_->fs.get(), &pb::FileSystem::Stub::EditFile, req, node_);
    });
}

Process Workspace::Exec(const Command &cmd, ExecOptions opts)
{
    return Retrying([&] {
        auto st = std::make_unique<Process::State>();
        st->ctx = core_->Context(false, node_);
        st->core = core_;
        st->workspace_id = id();
        st->node = node_;
        st->on_output = opts.on_output;
        st->rw = core_->exec->Start(st->ctx.get());
        pb::StartRequest first;
        first.mutable_start()->set_workspace_id(id());
        *first.mutable_start()->mutable_process() = ToConfig(cmd, opts);
        // A failed write means the call already ended; the reader's Finish
        // says why.
        st->Write(first);
        Process::State *raw = st.get();
        st->reader = std::thread([raw] { raw->Loop(); });
        if (!st->WaitStarted()) {
            // Refused (guard, capability, ...): the stream's status is the error.
            st->reader.join();
            if (!st->status.ok())
                ThrowStatus(st->status);
            throw Error(grpc::StatusCode::UNKNOWN, "",
                        "Exec stream ended before the process started");
        }
        return Process(std::move(st));
    });
}

Process Workspace::Attach(const std::string &tag_or_id, uint64_t offset, OutputCallback on_output)
{
    return Retrying([&] {
        pb::AttachRequest req;
        req.set_workspace_id(id());
        if (LooksLikeProcessId(tag_or_id))
            req.set_id(tag_or_id);
        else
            req.set_tag(tag_or_id);
        req.set_offset(offset);
        auto st = std::make_unique<Process::State>();
        st->ctx = core_->Context(false, node_);
        st->core = core_;
        st->workspace_id = id();
        st->node = node_;
        st->on_output = on_output;
        st->r = core_->exec->Attach(st->ctx.get(), req);
        Process::State *raw = st.get();
        st->reader = std::thread([raw] { raw->Loop(); });
        if (!st->WaitStarted()) {
            st->reader.join();
            if (!st->status.ok())
                ThrowStatus(st->status);
            throw Error(grpc::StatusCode::UNKNOWN, "", "Attach stream ended before `started`");
        }
        return Process(std::move(st));
    });
}

RunResult Workspace::Run(const Command &cmd, const ExecOptions &opts, const std::string &stdin_data)
{
    return Retrying([&] {
        pb::RunRequest req;
        req.set_workspace_id(id());
        *req.mutable_process() = ToConfig(cmd, opts);
        req.set_stdin_data(stdin_data);
        // A command runs as long as it runs: no client deadline here (the
        // workspace's max duration bounds it).
        auto ctx = core_->Context(false, node_);
        pb::RunResponse resp;
        ThrowIfError(core_->exec->Run(ctx.get(), req, &resp));
        RunResult r;
        r.out = std::move(*resp.mutable_stdout());
        r.err = std::move(*resp.mutable_stderr());
        r.result.exited = resp.exited();
        r.process_id = resp.process_id();
        return r;
    });
}

std::vector<pb::ProcessInfo> Workspace::Ps()
{
    return Retrying([&] {
        pb::ListProcessesRequest req;
        req.set_workspace_id(id());
        auto resp = Call(*core_, core_->exec.get(), &pb::Exec::Stub::ListProcesses, req, node_);
        return std::vector<pb::ProcessInfo>(resp.processes().begin(), resp.processes().end());
    });
}

void Workspace::Kill(const std::string &tag_or_id, int sig)
{
    Retrying([&] {
        pb::SendSignalRequest req;
        req.set_workspace_id(id());
        if (LooksLikeProcessId(tag_or_id))
            req.set_id(tag_or_id);
        else
            req.set_tag(tag_or_id);
        req.set_signal(sig);
        Call(*core_, core_->exec.get(), &pb::Exec::Stub::SendSignal, req, node_);
    });
}

// ---------------------------------------------------------------- client

Client::Client(std::shared_ptr<Core> core) : core_(std::move(core))
{
}

namespace
{

// A PEM file's text. An empty or non-PEM file throws too: an empty CA
// would otherwise mean the system roots.
std::string ReadPemFile(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    if (!f)
        throw std::system_error(errno ? errno : EIO, std::generic_category(),
                                "workspaced: " + path);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad())
        throw std::system_error(EIO, std::generic_category(), "workspaced: " + path);
    if (text.find("-----BEGIN ") == std::string::npos)
        throw std::invalid_argument("workspaced: " + path + ": not a PEM file");
    return text;
}

} // namespace

TlsOptions TlsOptions::FromFiles(const std::string &ca_file, const std::string &cert_file,
                                 const std::string &key_file,
                                 const std::string &server_name_override)
{
    if (cert_file.empty() != key_file.empty())
        throw std::invalid_argument("workspaced: a client certificate and its key go together");
    TlsOptions o;
    if (!ca_file.empty())
        o.root_certs = ReadPemFile(ca_file);
    if (!cert_file.empty()) {
        o.cert_chain = ReadPemFile(cert_file);
        o.private_key = ReadPemFile(key_file);
    }
    o.server_name_override = server_name_override;
    return o;
}

Client Client::Connect(const std::string &address, ConnectOptions opts)
{
    auto core = std::make_shared<Core>();
    core->address = !address.empty() ? address : Env("WORKSPACED_ADDR");
    if (core->address.empty())
        core->address = "unix:/run/workspaced/workspaced.sock";
    core->token = opts.token ? *opts.token : Env("WORKSPACED_TOKEN");
    core->call_timeout = opts.call_timeout;
    core->eviction_retry = opts.eviction_retry;

    grpc::ChannelArguments args;
    // The server sends chunks of at most 256 KiB, but a ListDir or Glob
    // answer may approach its 4 MiB message limit.
    args.SetMaxReceiveMessageSize(8 << 20);
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (opts.tls) {
        grpc::SslCredentialsOptions ssl;
        ssl.pem_root_certs = opts.tls->root_certs;
        ssl.pem_cert_chain = opts.tls->cert_chain;
        ssl.pem_private_key = opts.tls->private_key;
        creds = grpc::SslCredentials(ssl);
        if (!opts.tls->server_name_override.empty())
            args.SetSslTargetNameOverride(opts.tls->server_name_override);
    } else {
        creds = grpc::InsecureChannelCredentials();
    }
    if (opts.interceptors)
        core->channel = grpc::experimental::CreateCustomChannelWithInterceptors(
            core->address, creds, args, opts.interceptors());
    else
        core->channel = grpc::CreateCustomChannel(core->address, creds, args);
    core->workspaces = pb::Workspaces::NewStub(core->channel);
    core->fs = pb::FileSystem::NewStub(core->channel);
    core->exec = pb::Exec::NewStub(core->channel);
    core->providers = pb::Providers::NewStub(core->channel);
    return Client(std::move(core));
}

const std::string &Client::address() const
{
    return core_->address;
}

Workspace Client::Open(const ProviderConfig &provider, const Capabilities &caps,
                       const RetryPolicy &retry)
{
    OpenOptions opts;
    opts.retry = retry;
    return Open(provider, caps, opts);
}

namespace
{

// A fresh request id for Open: 128 random bits in hex.
std::string NewRequestId()
{
    static std::mutex mu;
    static std::mt19937_64 rng{std::random_device{}()};
    std::lock_guard<std::mutex> lock(mu);
    static const char hex[] = "0123456789abcdef";
    std::string id = "cpp-";
    for (int i = 0; i < 2; i++) {
        uint64_t v = rng();
        for (int k = 0; k < 16; k++, v >>= 4)
            id += hex[v & 15];
    }
    return id;
}

} // namespace

Workspace Client::Open(const ProviderConfig &provider, const Capabilities &caps,
                       const OpenOptions &opts)
{
    pb::OpenRequest req;
    std::visit(
        [&req](const auto &cfg) {
            using T = std::decay_t<decltype(cfg)>;
            if constexpr (std::is_same_v<T, pb::MemoryConfig>)
                *req.mutable_memory() = cfg;
            else if constexpr (std::is_same_v<T, pb::LocalBashConfig>)
                *req.mutable_local_bash() = cfg;
            else if constexpr (std::is_same_v<T, pb::LocalSandboxConfig>)
                *req.mutable_local_sandbox() = cfg;
            else
                *req.mutable_docker() = cfg;
        },
        provider);
    *req.mutable_capabilities() = caps.proto();
    if (opts.lifetime.ttl.count() > 0 || opts.lifetime.idle_timeout.count() > 0) {
        req.mutable_lifetime()->set_ttl_ms(
            static_cast<uint64_t>(std::max<int64_t>(0, opts.lifetime.ttl.count())));
        req.mutable_lifetime()->set_idle_timeout_ms(
            static_cast<uint64_t>(std::max<int64_t>(0, opts.lifetime.idle_timeout.count())));
    }
    for (const auto &kv : opts.labels)
        (*req.mutable_labels())[kv.first] = kv.second;
    req.set_name(opts.name);
    for (const auto &kv : opts.env)
        (*req.mutable_env())[kv.first] = kv.second;
    for (const auto &kv : opts.secrets)
        (*req.mutable_secrets())[kv.first] = kv.second;
    req.set_from_snapshot(opts.from_snapshot);
    req.set_from_path(opts.from_path);
    // One id for every attempt: an attempt whose answer was lost is
    // answered, when retried, with the workspace it opened.
    req.set_request_id(opts.request_id.empty() ? NewRequestId() : opts.request_id);
    // Only the attempt that succeeds names the node: each attempt may land
    // on another one.
    std::string node;
    auto resp = opts.retry.Do(
        [&] {
            return Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Open, req, "",
                        &node);
        },
        [](const Error &e) { return e.transient() || e.reason_code() == pb::RETRY; });
    return Workspace(core_, resp.workspace(), std::move(node));
}

Workspace Client::Resolve(const pb::WorkspaceRef &ref, const std::string &node)
{
    pb::ResolveRequest req;
    *req.mutable_ref() = ref;
    std::string named;
    auto resp =
        Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Resolve, req, node, &named);
    return Workspace(core_, resp.workspace(), named.empty() ? node : std::move(named));
}

std::vector<pb::ProviderInfo> Client::Providers()
{
    auto resp = Call(*core_, core_->providers.get(), &pb::Providers::Stub::ListProviders,
                     pb::ListProvidersRequest());
    return {resp.providers().begin(), resp.providers().end()};
}

ListPage Client::ListOnePage(const ListOptions &opts, const std::string &page_token)
{
    pb::ListRequest req;
    req.set_label_selector(opts.label_selector);
    req.set_name(opts.name);
    req.set_page_size(opts.page_size);
    req.set_page_token(page_token);
    auto resp = Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::List, req);
    return ListPage{{resp.workspaces().begin(), resp.workspaces().end()}, resp.next_page_token()};
}

std::vector<pb::WorkspaceSummary> Client::List(const ListOptions &opts)
{
    std::vector<pb::WorkspaceSummary> all;
    std::string token;
    do {
        ListPage page = ListOnePage(opts, token);
        all.insert(all.end(), page.workspaces.begin(), page.workspaces.end());
        token = std::move(page.next_page_token);
    } while (!token.empty());
    return all;
}

// ---------------------------------------------------------------- watch

struct Watcher::State {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<pb::WatchEvent>> reader;
    std::optional<pb::WatchEvent> ready;
    std::atomic<bool> cancelled{false};
    bool done = false;

    // Ends the call (once) and reaps its status.
    grpc::Status End()
    {
        done = true;
        return reader->Finish();
    }
    ~State()
    {
        if (!done) {
            ctx->TryCancel();
            pb::WatchEvent ev;
            while (reader->Read(&ev)) {
            }
            reader->Finish();
        }
    }
};

Watcher::Watcher(std::unique_ptr<State> st) : st_(std::move(st))
{
}
Watcher::Watcher(Watcher &&) noexcept = default;
Watcher &Watcher::operator=(Watcher &&) noexcept = default;
Watcher::~Watcher() = default;

std::optional<pb::WatchEvent> Watcher::Next()
{
    if (!st_ || st_->done)
        return std::nullopt;
    if (st_->ready) {
        auto ev = std::move(st_->ready);
        st_->ready.reset();
        return ev;
    }
    pb::WatchEvent ev;
    if (st_->reader->Read(&ev))
        return ev;
    grpc::Status status = st_->End();
    if (!st_->cancelled)
        ThrowIfError(status);
    return std::nullopt;
}

void Watcher::Cancel()
{
    if (!st_)
        return;
    st_->cancelled = true;
    st_->ctx->TryCancel();
}

Watcher Workspace::Watch(const std::string &path, const WatchOptions &opts)
{
    return Retrying([&] {
        pb::WatchRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        req.set_recursive(opts.recursive);
        for (const auto &g : opts.include)
            req.add_include(g);
        for (const auto &g : opts.exclude)
            req.add_exclude(g);
        req.set_coalesce_ms(opts.coalesce_ms);
        auto st = std::make_unique<Watcher::State>();
        st->ctx = core_->Context(false, node_);
        st->reader = core_->fs->Watch(st->ctx.get(), req);
        pb::WatchEvent ev;
        // Returns once the watches are in place (READY), so that a change
        // made after Watch() returned is reported.
        if (!st->reader->Read(&ev)) {
            grpc::Status status = st->End();
            ThrowIfError(status);
            throw Error(grpc::StatusCode::INTERNAL, "", "Watch ended before its first event");
        }
        st->ready = std::move(ev);
        return Watcher(std::move(st));
    });
}

// ---------------------------------------------------------------- archives

pb::ArchiveTrailer Workspace::ReadArchive(const std::string &path,
                                          const std::function<void(std::string_view)> &on_chunk,
                                          const ReadArchiveOptions &opts)
{
    bool delivered = false;
    auto once = [&] {
        pb::ReadArchiveRequest req;
        req.set_workspace_id(id());
        req.set_path(path);
        req.set_format(opts.format);
        for (const auto &g : opts.include)
            req.add_include(g);
        for (const auto &g : opts.exclude)
            req.add_exclude(g);
        auto ctx = core_->Context(false, node_);
        auto reader = core_->fs->ReadArchive(ctx.get(), req);
        pb::ReadArchiveResponse m;
        pb::ArchiveTrailer trailer;
        try {
            while (reader->Read(&m)) {
                if (!m.data().empty()) {
                    delivered = true;
                    on_chunk(m.data());
                }
                if (m.has_trailer())
                    trailer = m.trailer();
            }
        } catch (...) {
            ctx->TryCancel();
            while (reader->Read(&m)) {
            }
            reader->Finish();
            throw;
        }
        ThrowIfError(reader->Finish());
        return trailer;
    };
    // Repeated after a re-resolve only while nothing reached on_chunk.
    try {
        return once();
    } catch (const Error &e) {
        if (delivered || !core_->eviction_retry || !Recoverable(e) || info_.ref().token().empty() ||
            !ReResolve())
            throw;
    }
    return once();
}

pb::ArchiveTrailer Workspace::ReadArchive(const std::string &path, std::ostream &out,
                                          const ReadArchiveOptions &opts)
{
    return ReadArchive(
        path,
        [&out](std::string_view chunk) {
            out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
            if (!out)
                throw std::runtime_error("workspaced: writing the output stream failed");
        },
        opts);
}

pb::ArchiveTrailer Workspace::WriteArchive(const std::string &path,
                                           const std::function<bool(std::string *)> &next,
                                           const WriteArchiveOptions &opts)
{
    auto ctx = core_->Context(false, node_);
    pb::WriteArchiveResponse resp;
    auto w = core_->fs->WriteArchive(ctx.get(), &resp);
    pb::WriteArchiveRequest h;
    auto *hdr = h.mutable_header();
    hdr->set_workspace_id(id());
    hdr->set_path(path);
    hdr->set_format(opts.format);
    hdr->set_overwrite(opts.overwrite);
    hdr->set_create_parents(opts.create_parents);
    // Commits only on an explicit finish, never on a half-close that a
    // cancelled stream can look like.
    hdr->set_require_finish(true);
    std::string cur, ahead;
    try {
        bool have_cur = next(&cur);
        if (!have_cur) {
            h.set_finish(true);
            w->Write(h);
        } else if (w->Write(h)) {
            while (have_cur) {
                ahead.clear();
                bool have_ahead = next(&ahead);
                pb::WriteArchiveRequest d;
                d.set_data(std::move(cur));
                d.set_finish(!have_ahead);
                if (!w->Write(d))
                    break; // the server ended the call; Finish says why
                cur = std::move(ahead);
                have_cur = have_ahead;
            }
        }
    } catch (...) {
        ctx->TryCancel();
        w->Finish();
        throw;
    }
    w->WritesDone();
    ThrowIfError(w->Finish());
    return resp.trailer();
}

pb::ArchiveTrailer Workspace::WriteArchive(const std::string &path, std::string_view data,
                                           const WriteArchiveOptions &opts)
{
    size_t chunk = opts.chunk_size ? opts.chunk_size : (1 << 20);
    size_t off = 0;
    return WriteArchive(
        path,
        [&](std::string *out) {
            if (off >= data.size())
                return false;
            size_t n = std::min(chunk, data.size() - off);
            out->assign(data.data() + off, n);
            off += n;
            return true;
        },
        opts);
}

pb::ArchiveTrailer Workspace::WriteArchive(const std::string &path, std::istream &in,
                                           const WriteArchiveOptions &opts)
{
    size_t chunk = opts.chunk_size ? opts.chunk_size : (1 << 20);
    return WriteArchive(
        path,
        [&](std::string *out) {
            out->resize(chunk);
            in.read(&(*out)[0], static_cast<std::streamsize>(chunk));
            out->resize(static_cast<size_t>(in.gcount()));
            if (in.bad())
                throw std::runtime_error("workspaced: reading the input stream failed");
            return !out->empty();
        },
        opts);
}

namespace
{

// A child process running the system's tar (execvp, no shell), reaped by
// the destructor (killed first when it still runs).
struct TarChild {
    pid_t pid = -1;
    int out = -1; // its stdout, when piped

    TarChild(const std::vector<std::string> &args, bool pipe_out)
    {
        int fds[2] = {-1, -1};
        if (pipe_out && pipe2(fds, O_CLOEXEC) != 0)
            throw std::system_error(errno, std::generic_category(), "workspaced: pipe");
        std::vector<char *> argv;
        for (const auto &a : args)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        pid = fork();
        if (pid < 0) {
            int e = errno;
            if (pipe_out) {
                close(fds[0]);
                close(fds[1]);
            }
            throw std::system_error(e, std::generic_category(), "workspaced: fork");
        }
        if (pid == 0) {
            if (pipe_out)
                dup2(fds[1], 1);
            execvp("tar", argv.data());
            _exit(127);
        }
        if (pipe_out) {
            close(fds[1]);
            out = fds[0];
        }
    }
    // Waits for the exit; throws unless tar exited 0.
    void Wait()
    {
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        pid = -1;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            throw std::runtime_error("workspaced: tar failed (" +
                                     (WIFEXITED(st)
                                          ? "exit status " + std::to_string(WEXITSTATUS(st))
                                          : std::string("killed by a signal")) +
                                     ")");
    }
    ~TarChild()
    {
        if (out >= 0)
            close(out);
        if (pid > 0) {
            kill(pid, SIGKILL);
            int st;
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
        }
    }
};

// Lexical components of a relative name ("." and empty ones dropped);
// throws UnsafeArchive for an absolute name or a ".." component.
std::vector<std::string> NameParts(const std::string &name, const std::string &entry)
{
    if (!name.empty() && name[0] == '/')
        throw UnsafeArchive(entry, "absolute");
    std::vector<std::string> parts;
    size_t i = 0;
    while (i <= name.size()) {
        size_t j = name.find('/', i);
        if (j == std::string::npos)
            j = name.size();
        std::string c = name.substr(i, j - i);
        if (c == "..")
            throw UnsafeArchive(entry, "dotdot");
        if (!c.empty() && c != ".")
            parts.push_back(c);
        i = j + 1;
    }
    return parts;
}

std::string Join(const std::vector<std::string> &parts, size_t n)
{
    std::string out;
    for (size_t i = 0; i < n && i < parts.size(); i++)
        out += (i ? "/" : "") + parts[i];
    return out;
}

uint64_t TarNumber(const char *f, size_t len)
{
    if (static_cast<unsigned char>(f[0]) & 0x80) {
        uint64_t v = 0;
        for (size_t i = 1; i < len; i++)
            v = (v << 8) | static_cast<unsigned char>(f[i]);
        return v;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < len && f[i]; i++)
        if (f[i] >= '0' && f[i] <= '7')
            v = v * 8 + static_cast<uint64_t>(f[i] - '0');
    return v;
}

std::string TarString(const char *f, size_t len)
{
    return std::string(f, strnlen(f, len));
}

// Checks every member of the tar at `file` before anything is extracted:
// names neither absolute nor with "..", no member below a symlink member,
// symlink targets that stay inside (resolved without passing through
// another symlink), hard links to earlier members, no special files.
void CheckTar(const std::string &file)
{
    std::ifstream in(file, std::ios::binary);
    struct Link {
        std::string name, target;
    };
    std::set<std::string> members, symlinks;
    std::vector<std::vector<std::string>> names;
    std::vector<Link> links;
    std::map<std::string, std::string> pax;
    std::string long_name, long_link;
    char h[512];
    for (;;) {
        if (!in.read(h, 512))
            throw UnsafeArchive("", "malformed");
        bool zero = true;
        for (char c : h)
            zero = zero && c == 0;
        if (zero)
            break;
        char type = h[156] ? h[156] : '0';
        uint64_t size = TarNumber(h + 124, 12);
        if (pax.count("size"))
            size = std::strtoull(pax["size"].c_str(), nullptr, 10);
        uint64_t padded = (size + 511) / 512 * 512;
        if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
            if (size > (64u << 20))
                throw UnsafeArchive("", "malformed");
            std::string body(padded, '\0');
            if (!in.read(&body[0], static_cast<std::streamsize>(padded)))
                throw UnsafeArchive("", "malformed");
            body.resize(size);
            if (type == 'L')
                long_name = TarString(body.data(), body.size());
            else if (type == 'K')
                long_link = TarString(body.data(), body.size());
            else if (type == 'x') {
                size_t off = 0;
                while (off < body.size()) {
                    size_t sp = body.find(' ', off);
                    if (sp == std::string::npos)
                        break;
                    size_t len = std::strtoull(body.c_str() + off, nullptr, 10);
                    if (len == 0 || off + len > body.size())
                        throw UnsafeArchive("", "malformed");
                    std::string rec = body.substr(sp + 1, off + len - sp - 2);
                    size_t eq = rec.find('=');
                    if (eq != std::string::npos)
                        pax[rec.substr(0, eq)] = rec.substr(eq + 1);
                    off += len;
                }
            }
            continue;
        }
        std::string prefix = TarString(h + 345, 155);
        std::string name = pax.count("path")    ? pax["path"]
                           : !long_name.empty() ? long_name
                           : !prefix.empty() && TarString(h + 257, 5) == "ustar"
                               ? prefix + "/" + TarString(h, 100)
                               : TarString(h, 100);
        std::string link = pax.count("linkpath") ? pax["linkpath"]
                           : !long_link.empty()  ? long_link
                                                 : TarString(h + 157, 100);
        pax.clear();
        long_name.clear();
        long_link.clear();
        auto parts = NameParts(name, name);
        if (type == '3' || type == '4' || type == '6')
            throw UnsafeArchive(name, "special");
        if (type == '1') {
            std::string target = Join(NameParts(link, name), SIZE_MAX);
            if (!members.count(target))
                throw UnsafeArchive(name, "link_outside");
        } else if (type == '2') {
            if (!link.empty() && link[0] == '/')
                throw UnsafeArchive(name, "link_outside");
            links.push_back({Join(parts, SIZE_MAX), link});
            symlinks.insert(Join(parts, SIZE_MAX));
        } else if (type != '0' && type != '7' && type != '5') {
            throw UnsafeArchive(name, "special");
        }
        members.insert(Join(parts, SIZE_MAX));
        names.push_back(parts);
        in.seekg(static_cast<std::streamoff>(padded), std::ios::cur);
    }
    // No member below a symlink member: it would be written through it.
    for (const auto &parts : names)
        for (size_t n = 1; n < parts.size(); n++)
            if (symlinks.count(Join(parts, n)))
                throw UnsafeArchive(Join(parts, SIZE_MAX), "link_outside");
    // Each symlink's target, resolved from its directory, stays inside and
    // passes through no other symlink (whose target could move it).
    for (const auto &l : links) {
        auto at = NameParts(l.name, l.name);
        at.pop_back();
        std::vector<std::string> comps;
        size_t i = 0;
        while (i <= l.target.size()) {
            size_t j = l.target.find('/', i);
            if (j == std::string::npos)
                j = l.target.size();
            comps.push_back(l.target.substr(i, j - i));
            i = j + 1;
        }
        for (size_t k = 0; k < comps.size(); k++) {
            const std::string &c = comps[k];
            if (c.empty() || c == ".")
                continue;
            if (c == "..") {
                if (at.empty())
                    throw UnsafeArchive(l.name, "link_outside");
                at.pop_back();
            } else {
                at.push_back(c);
            }
            if (k + 1 < comps.size() && symlinks.count(Join(at, SIZE_MAX)))
                throw UnsafeArchive(l.name, "link_outside");
        }
    }
}

} // namespace

pb::ArchiveTrailer Workspace::UploadTree(const std::string &local_dir, const std::string &path,
                                         const WriteArchiveOptions &opts)
{
    std::vector<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(local_dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    if (names.empty()) {
        // GNU tar refuses to make an empty archive: the end blocks alone.
        if (opts.format == pb::ARCHIVE_FORMAT_TAR_GZIP)
            throw std::invalid_argument("workspaced: UploadTree of an empty directory as tar.gz");
        return WriteArchive(path, std::string(1024, '\0'), opts);
    }
    std::vector<std::string> args = {
        "tar",          "--create",        "--file=-",
        "--format=pax", "--numeric-owner", "--owner=0",
        "--group=0",    "--sort=name",     "--pax-option=delete=atime,delete=ctime"};
    if (opts.format == pb::ARCHIVE_FORMAT_TAR_GZIP)
        args.push_back("--gzip");
    args.push_back("--directory=" + local_dir);
    args.push_back("--");
    args.insert(args.end(), names.begin(), names.end());
    TarChild tar(args, true);
    size_t chunk = opts.chunk_size ? opts.chunk_size : (1 << 20);
    bool eof = false;
    auto trailer = WriteArchive(
        path,
        [&](std::string *out) {
            if (eof)
                return false;
            out->resize(chunk);
            size_t got = 0;
            while (got < chunk) {
                ssize_t n = read(tar.out, &(*out)[got], chunk - got);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0)
                    throw std::system_error(errno, std::generic_category(), "workspaced: read tar");
                if (n == 0) {
                    eof = true;
                    break;
                }
                got += static_cast<size_t>(n);
            }
            out->resize(got);
            // A tar that failed must not commit what it wrote so far.
            if (eof)
                tar.Wait();
            return got > 0;
        },
        opts);
    return trailer;
}

pb::ArchiveTrailer Workspace::DownloadTree(const std::string &path, const std::string &local_dir,
                                           const ReadArchiveOptions &opts)
{
    std::filesystem::create_directories(local_dir);
    if (!std::filesystem::is_empty(local_dir))
        throw UnsafeArchive(local_dir, "not_empty");
    const char *tmpdir = getenv("TMPDIR");
    std::string tmpl = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/workspaced-tree-XXXXXX";
    int fd = mkstemp(&tmpl[0]);
    if (fd < 0)
        throw std::system_error(errno, std::generic_category(), "workspaced: mkstemp");
    close(fd);
    struct Unlink {
        std::string p;
        ~Unlink()
        {
            unlink(p.c_str());
        }
    } cleanup{tmpl};
    ReadArchiveOptions plain = opts;
    plain.format = pb::ARCHIVE_FORMAT_TAR;
    pb::ArchiveTrailer trailer;
    {
        std::ofstream out(tmpl, std::ios::binary | std::ios::trunc);
        trailer = ReadArchive(path, out, plain);
        out.close();
        if (!out)
            throw std::runtime_error("workspaced: writing " + tmpl + " failed");
    }
    CheckTar(tmpl);
    TarChild tar({"tar", "--extract", "--file=" + tmpl, "--directory=" + local_dir,
                  "--no-same-owner", "--no-overwrite-dir", "--same-permissions",
                  "--delay-directory-restore", "--warning=no-unknown-keyword"},
                 false);
    tar.Wait();
    return trailer;
}

// ---------------------------------------------------------------- snapshots

pb::Snapshot Workspace::Snapshot(const std::string &name,
                                 const std::map<std::string, std::string> &labels)
{
    return Retrying([&] {
        pb::SnapshotRequest req;
        req.set_workspace_id(id());
        req.set_name(name);
        for (const auto &kv : labels)
            (*req.mutable_labels())[kv.first] = kv.second;
        return Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Snapshot, req, node_)
            .snapshot();
    });
}

pb::RestoreResponse Workspace::Restore(const std::string &snapshot_id, bool force)
{
    return Retrying([&] {
        pb::RestoreRequest req;
        req.set_workspace_id(id());
        req.set_snapshot_id(snapshot_id);
        req.set_force(force);
        return Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::Restore, req, node_);
    });
}

SnapshotPage Client::ListSnapshotsPage(const ListSnapshotsOptions &opts,
                                       const std::string &page_token)
{
    pb::ListSnapshotsRequest req;
    req.set_workspace_id(opts.workspace_id);
    req.set_label_selector(opts.label_selector);
    req.set_name(opts.name);
    req.set_page_size(opts.page_size);
    req.set_page_token(page_token);
    auto resp = Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::ListSnapshots, req);
    return SnapshotPage{{resp.snapshots().begin(), resp.snapshots().end()}, resp.next_page_token()};
}

std::vector<pb::Snapshot> Client::ListSnapshots(const ListSnapshotsOptions &opts)
{
    std::vector<pb::Snapshot> all;
    std::string token;
    do {
        SnapshotPage page = ListSnapshotsPage(opts, token);
        all.insert(all.end(), page.snapshots.begin(), page.snapshots.end());
        token = std::move(page.next_page_token);
    } while (!token.empty());
    return all;
}

uint64_t Client::DeleteSnapshot(const std::string &snapshot_id)
{
    pb::DeleteSnapshotRequest req;
    req.set_snapshot_id(snapshot_id);
    return Call(*core_, core_->workspaces.get(), &pb::Workspaces::Stub::DeleteSnapshot, req)
        .reclaimed_bytes();
}

} // namespace workspaced
