#include "tests/testutil/fake_dockerd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include <jansson.h>

namespace testutil
{

namespace
{

// Bounds on what one request may send; beyond, the connection is answered
// 413 and closed, as a daemon would refuse it.
constexpr size_t kHeaderMax = 64 * 1024;
constexpr size_t kBodyMax = 4 * 1024 * 1024;

// What the fake claims to be. 1.43 is older than the newest API the server
// speaks and newer than its minimum, so the server negotiates down to it and
// every versioned path it sends starts with /v1.43.
const char kVersionDoc[] = "{\"ApiVersion\":\"1.43\",\"MinAPIVersion\":\"1.12\","
                           "\"Version\":\"24.0.0\",\"Os\":\"linux\",\"Arch\":\"amd64\"}";
const char kApiVersion[] = "1.43";

// An image with an environment and no VOLUMEs: the two things the server
// reads from an image inspect.
const char kImageDoc[] =
    "{\"Id\":\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\","
    "\"Config\":{\"Env\":[\"PATH=/usr/bin:/bin\"],\"Volumes\":null}}";

const char kNotHandled[] = "{\"message\":\"fake: not handled\"}";

std::string Lower(std::string s)
{
    for (auto &c : s)
        c = (char)tolower((unsigned char)c);
    return s;
}

bool StartsWith(const std::string &s, const std::string &prefix)
{
    return s.compare(0, prefix.size(), prefix) == 0;
}

bool EndsWith(const std::string &s, const std::string &suffix)
{
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The path without a leading "/vMAJOR.MINOR": dockerd serves both forms.
std::string StripVersion(const std::string &path)
{
    size_t i = 2;
    if (!StartsWith(path, "/v") || path.size() < 3 || !isdigit((unsigned char)path[2]))
        return path;
    while (i < path.size() && isdigit((unsigned char)path[i]))
        i++;
    if (i >= path.size() || path[i] != '.')
        return path;
    i++;
    size_t digits = i;
    while (i < path.size() && isdigit((unsigned char)path[i]))
        i++;
    if (i == digits || i >= path.size() || path[i] != '/')
        return path;
    return path.substr(i);
}

// One query parameter's raw value ("" when absent).
std::string QueryParam(const std::string &query, const std::string &name)
{
    size_t pos = 0;
    while (pos <= query.size()) {
        size_t end = query.find('&', pos);
        if (end == std::string::npos)
            end = query.size();
        std::string kv = query.substr(pos, end - pos);
        if (StartsWith(kv, name + "="))
            return kv.substr(name.size() + 1);
        pos = end + 1;
    }
    return "";
}

std::string Dump(json_t *doc)
{
    char *s = json_dumps(doc, JSON_COMPACT);
    std::string out = s ? s : "";
    free(s);
    return out;
}

std::string Message(const std::string &text)
{
    json_t *doc = json_pack("{s:s}", "message", text.c_str());
    std::string out = Dump(doc);
    json_decref(doc);
    return out;
}

const char *Reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 413:
        return "Payload Too Large";
    default:
        return "Internal Server Error";
    }
}

// Writes all of `data`; false when the peer has gone. MSG_NOSIGNAL: a
// client that hung up must not kill the test with SIGPIPE.
bool SendAll(int fd, const std::string &data)
{
    size_t off = 0;
    while (off < data.size()) {
        ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

// A directory for the socket: under the test's temporary directory when the
// socket path fits a sockaddr_un, else under /tmp.
std::string MakeSocketDir()
{
    const char *base = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/fakedockerd.XXXXXX";
    if (tmpl.size() + sizeof("/docker.sock") > sizeof(sockaddr_un::sun_path))
        tmpl = "/tmp/fakedockerd.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
        throw std::runtime_error("fake dockerd: mkdtemp " + tmpl + ": " + strerror(errno));
    return buf.data();
}

} // namespace

struct FakeDockerd::Request {
    std::string method;
    std::string target; // as sent: path and query
    std::string path;   // without the query and the version prefix
    std::string query;
    std::string body;
    bool close = false;
};

struct FakeDockerd::Response {
    int status = 200;
    std::string body;
    std::string content_type = "application/json";
};

FakeDockerd::FakeDockerd(std::string socket_path)
    : path_(std::move(socket_path)), rng_(std::random_device{}())
{
    if (path_.empty()) {
        made_dir_ = MakeSocketDir();
        path_ = made_dir_ + "/docker.sock";
    }
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    if (path_.size() >= sizeof(addr.sun_path))
        throw std::runtime_error("fake dockerd: socket path too long: " + path_);
    memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    int p[2];
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0 || bind(listen_fd_, (sockaddr *)&addr, sizeof(addr)) < 0 ||
        listen(listen_fd_, 64) < 0 || pipe2(p, O_CLOEXEC) < 0) {
        std::string why = strerror(errno);
        if (listen_fd_ >= 0)
            close(listen_fd_);
        throw std::runtime_error("fake dockerd: cannot listen on " + path_ + ": " + why);
    }
    stop_r_ = p[0];
    stop_w_ = p[1];
    acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeDockerd::~FakeDockerd()
{
    {
        std::lock_guard<std::mutex> l(mu_);
        stopping_ = true;
        hold_ = false;
    }
    cv_.notify_all();
    // Closing the write end makes the read end readable in every poll.
    close(stop_w_);
    acceptor_.join();
    // The acceptor is gone, so nothing adds connections any more.
    for (auto &c : conns_)
        c->thread.join();
    conns_.clear();
    close(listen_fd_);
    close(stop_r_);
    unlink(path_.c_str());
    if (!made_dir_.empty())
        rmdir(made_dir_.c_str());
}

std::string FakeDockerd::Host() const
{
    return "unix://" + path_;
}

void FakeDockerd::HoldImageInspect(bool hold)
{
    {
        std::lock_guard<std::mutex> l(mu_);
        hold_ = hold;
        if (hold)
            held_arrived_ = 0;
    }
    cv_.notify_all();
}

bool FakeDockerd::WaitImageInspectArrived(int timeout_ms)
{
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(timeout_ms),
                        [this] { return held_arrived_ > 0; });
}

void FakeDockerd::Release()
{
    HoldImageInspect(false);
}

int FakeDockerd::Requests(const std::string &method_and_path_prefix) const
{
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const auto &s : seen_)
        if (StartsWith(s, method_and_path_prefix))
            n++;
    return n;
}

int FakeDockerd::Unhandled() const
{
    std::lock_guard<std::mutex> l(mu_);
    return unhandled_;
}

std::vector<std::string> FakeDockerd::Containers() const
{
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::string> ids;
    for (const auto &kv : containers_)
        ids.push_back(kv.first);
    return ids;
}

void FakeDockerd::SetRuntimes(std::vector<std::string> names)
{
    std::lock_guard<std::mutex> l(mu_);
    runtimes_ = std::move(names);
    has_runtimes_ = true;
}

bool FakeDockerd::HasRuntimes() const
{
    std::lock_guard<std::mutex> l(mu_);
    return has_runtimes_;
}

// Only what the server reads of dockerd's /info: each runtime as an object,
// as dockerd writes {"path": ...}.
FakeDockerd::Response FakeDockerd::Info() const
{
    json_t *runtimes = json_object();
    {
        std::lock_guard<std::mutex> l(mu_);
        for (const auto &name : runtimes_)
            json_object_set_new(runtimes, name.c_str(), json_pack("{s:s}", "path", name.c_str()));
    }
    json_t *doc = json_pack("{s:o}", "Runtimes", runtimes);
    char *text = json_dumps(doc, JSON_COMPACT);
    std::string body = text ? text : "{}";
    free(text);
    json_decref(doc);
    return Response{200, body};
}

// Joins the connection threads that have ended, so a long test does not
// pile them up.
void FakeDockerd::ReapLocked()
{
    for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done) {
            (*it)->thread.join();
            it = conns_.erase(it);
        } else {
            ++it;
        }
    }
}

void FakeDockerd::AcceptLoop()
{
    for (;;) {
        pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_r_, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (fds[1].revents)
            return;
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        std::lock_guard<std::mutex> l(mu_);
        ReapLocked();
        auto c = std::make_unique<Conn>();
        Conn *raw = c.get();
        raw->fd = fd;
        conns_.push_back(std::move(c));
        raw->thread = std::thread([this, raw] { Serve(raw); });
    }
}

void FakeDockerd::Serve(Conn *c)
{
    std::string buf;
    // Reads more bytes into buf; false on end of stream, an error, or the
    // fake stopping.
    auto more = [&]() {
        for (;;) {
            pollfd fds[2] = {{c->fd, POLLIN, 0}, {stop_r_, POLLIN, 0}};
            if (poll(fds, 2, -1) < 0) {
                if (errno == EINTR)
                    continue;
                return false;
            }
            if (fds[1].revents)
                return false;
            char tmp[65536];
            ssize_t n = recv(c->fd, tmp, sizeof(tmp), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return false;
            buf.append(tmp, (size_t)n);
            return true;
        }
    };
    auto refuse = [&](int status, const std::string &why) {
        std::string body = Message(why);
        SendAll(c->fd, "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) +
                           "\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
        std::lock_guard<std::mutex> l(mu_);
        unhandled_++;
    };

    for (;;) {
        size_t end;
        while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
            if (buf.size() > kHeaderMax) {
                refuse(413, "fake: headers too long");
                goto out;
            }
            if (!more())
                goto out;
        }
        Request r;
        size_t content_length = 0;
        bool chunked = false, expect_continue = false;
        {
            size_t line_end = buf.find("\r\n");
            std::string line = buf.substr(0, line_end);
            size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
            if (sp1 == std::string::npos || sp2 == sp1) {
                refuse(400, "fake: bad request line");
                goto out;
            }
            r.method = line.substr(0, sp1);
            r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
            r.close = line.substr(sp2 + 1) == "HTTP/1.0";
            size_t pos = line_end + 2;
            while (pos < end) {
                size_t eol = buf.find("\r\n", pos);
                std::string h = buf.substr(pos, eol - pos);
                pos = eol + 2;
                size_t colon = h.find(':');
                if (colon == std::string::npos)
                    continue;
                std::string name = Lower(h.substr(0, colon));
                std::string value = h.substr(colon + 1);
                value.erase(0, value.find_first_not_of(" \t"));
                if (name == "content-length")
                    content_length = strtoull(value.c_str(), nullptr, 10);
                else if (name == "transfer-encoding")
                    chunked = Lower(value).find("chunked") != std::string::npos;
                else if (name == "connection")
                    r.close = Lower(value) == "close";
                else if (name == "expect")
                    expect_continue = Lower(value) == "100-continue";
            }
        }
        size_t pos = end + 4;
        if (expect_continue && !SendAll(c->fd, "HTTP/1.1 100 Continue\r\n\r\n"))
            goto out;
        if (chunked) {
            for (;;) {
                size_t eol;
                while ((eol = buf.find("\r\n", pos)) == std::string::npos)
                    if (!more())
                        goto out;
                size_t size = strtoull(buf.c_str() + pos, nullptr, 16);
                pos = eol + 2;
                if (size == 0) {
                    // Trailer lines, if any, then the empty line.
                    for (;;) {
                        while ((eol = buf.find("\r\n", pos)) == std::string::npos)
                            if (!more())
                                goto out;
                        bool last = eol == pos;
                        pos = eol + 2;
                        if (last)
                            break;
                    }
                    break;
                }
                if (r.body.size() + size > kBodyMax) {
                    refuse(413, "fake: body too large");
                    goto out;
                }
                while (buf.size() < pos + size + 2)
                    if (!more())
                        goto out;
                r.body.append(buf, pos, size);
                pos += size + 2;
            }
        } else {
            if (content_length > kBodyMax) {
                refuse(413, "fake: body too large");
                goto out;
            }
            while (buf.size() < pos + content_length)
                if (!more())
                    goto out;
            r.body = buf.substr(pos, content_length);
            pos += content_length;
        }
        buf.erase(0, pos);

        size_t q = r.target.find('?');
        r.path = StripVersion(r.target.substr(0, q));
        r.query = q == std::string::npos ? "" : r.target.substr(q + 1);
        {
            std::lock_guard<std::mutex> l(mu_);
            seen_.push_back(r.method + " " + r.target);
        }
        Response resp = Handle(r);
        std::string out = "HTTP/1.1 " + std::to_string(resp.status) + " " + Reason(resp.status) +
                          "\r\nApi-Version: " + kApiVersion + "\r\nServer: fake-dockerd\r\n";
        // 204 carries no body and, by RFC 9110, no Content-Length.
        if (resp.status != 204)
            out += "Content-Type: " + resp.content_type +
                   "\r\nContent-Length: " + std::to_string(resp.body.size()) + "\r\n";
        if (r.close)
            out += "Connection: close\r\n";
        out += "\r\n";
        if (resp.status != 204)
            out += resp.body;
        if (!SendAll(c->fd, out) || r.close)
            goto out;
    }
out:
    close(c->fd);
    std::lock_guard<std::mutex> l(mu_);
    c->done = true;
}

FakeDockerd::Response FakeDockerd::Handle(const Request &r)
{
    const std::string &p = r.path;
    const std::string containers = "/containers/";

    if (r.method == "GET" && p == "/_ping")
        return Response{200, "OK", "text/plain; charset=utf-8"};
    if (r.method == "GET" && p == "/version")
        return Response{200, kVersionDoc};
    if (r.method == "GET" && p == "/containers/json")
        return Response{200, "[]"};
    if (r.method == "GET" && p == "/info" && HasRuntimes())
        return Info();
    if (r.method == "GET" && StartsWith(p, "/images/") && EndsWith(p, "/json") &&
        p.size() > sizeof("/images//json") - 1)
        return ImageInspect();
    if (r.method == "POST" && p == "/containers/create")
        return Create(r, r.query);
    if (StartsWith(p, containers) && p.size() > containers.size()) {
        std::string rest = p.substr(containers.size());
        size_t slash = rest.find('/');
        std::string ref = rest.substr(0, slash);
        std::string op = slash == std::string::npos ? "" : rest.substr(slash + 1);
        if ((r.method == "GET" && op == "json") || (r.method == "POST" && op == "start") ||
            (r.method == "DELETE" && op.empty()))
            return ContainerOp(r.method, ref, op);
    }
    std::lock_guard<std::mutex> l(mu_);
    unhandled_++;
    return Response{404, kNotHandled};
}

FakeDockerd::Response FakeDockerd::ImageInspect()
{
    std::unique_lock<std::mutex> l(mu_);
    if (hold_ && !stopping_) {
        held_arrived_++;
        cv_.notify_all();
        cv_.wait(l, [this] { return !hold_ || stopping_; });
    }
    return Response{200, kImageDoc};
}

FakeDockerd::Response FakeDockerd::Create(const Request &r, const std::string &query)
{
    std::string name = QueryParam(query, "name");
    json_t *doc = json_loadb(r.body.data(), r.body.size(), JSON_REJECT_DUPLICATES, nullptr);
    bool ok =
        json_is_object(doc) && json_is_object(json_object_get(doc, "HostConfig")) && !name.empty();
    json_decref(doc);
    std::lock_guard<std::mutex> l(mu_);
    if (!ok) {
        // Not what the server should ever send: counted like an unknown call.
        unhandled_++;
        return Response{400, Message("fake: a create needs ?name= and a body with HostConfig")};
    }
    for (auto it = containers_.begin(); it != containers_.end(); ++it)
        if (it->second.name == name) {
            containers_.erase(it);
            break;
        }
    char id[65];
    for (int i = 0; i < 4; i++)
        snprintf(id + 16 * i, 17, "%016llx", (unsigned long long)rng_());
    Container c;
    c.id = id;
    c.name = name;
    c.body = r.body;
    containers_[c.id] = c;
    json_t *ans = json_pack("{s:s, s:[]}", "Id", id, "Warnings");
    Response resp{201, Dump(ans)};
    json_decref(ans);
    return resp;
}

FakeDockerd::Container *FakeDockerd::FindLocked(const std::string &ref)
{
    auto it = containers_.find(ref);
    if (it != containers_.end())
        return &it->second;
    for (auto &kv : containers_)
        if (kv.second.name == ref)
            return &kv.second;
    return nullptr;
}

// The inspect document of a container: what dockerd reports for the create
// body it was given. Mounts are the HostConfig's, in the shape inspect uses
// (Destination and RW instead of Target and ReadOnly).
static std::string InspectDoc(const std::string &id, const std::string &name,
                              const std::string &body, bool running)
{
    json_t *config = json_loads(body.c_str(), 0, nullptr);
    json_t *hc = json_incref(json_object_get(config, "HostConfig"));
    json_object_del(config, "HostConfig");
    json_t *mounts = json_array();
    json_t *m;
    size_t i;
    json_array_foreach(json_object_get(hc, "Mounts"), i, m)
    {
        json_t *src = json_object_get(m, "Source");
        json_t *dst = json_object_get(m, "Target");
        json_array_append_new(mounts,
                              json_pack("{s:O, s:O, s:O, s:b}", "Type", json_object_get(m, "Type"),
                                        "Source", src, "Destination", dst, "RW",
                                        !json_is_true(json_object_get(m, "ReadOnly"))));
    }
    json_t *doc = json_pack(
        "{s:s, s:s, s:{s:s, s:b, s:b, s:b, s:i, s:i}, s:s, s:o, s:o, s:o}", "Id", id.c_str(),
        "Name", ("/" + name).c_str(), "State", "Status", running ? "running" : "created", "Running",
        running, "Paused", 0, "OOMKilled", 0, "ExitCode", 0, "Pid", running ? 4242 : 0, "Image",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "Config", config,
        "HostConfig", hc, "Mounts", mounts);
    std::string out = Dump(doc);
    json_decref(doc);
    return out;
}

FakeDockerd::Response FakeDockerd::ContainerOp(const std::string &method, const std::string &ref,
                                               const std::string &op)
{
    std::lock_guard<std::mutex> l(mu_);
    Container *c = FindLocked(ref);
    if (!c)
        return Response{404, Message("No such container: " + ref)};
    if (method == "DELETE") {
        containers_.erase(c->id);
        return Response{204, ""};
    }
    if (op == "start") {
        c->running = true;
        return Response{204, ""};
    }
    return Response{200, InspectDoc(c->id, c->name, c->body, c->running)};
}

} // namespace testutil
