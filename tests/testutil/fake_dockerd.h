// A fake Docker daemon for tests: HTTP/1.1 on a unix socket, answering the
// few Engine API calls the server makes to open, describe and close a Docker
// workspace, and nothing else. It runs no containers; a container is the
// create body it was sent, echoed back by inspect as dockerd would report it,
// so the server's read-back of the hardening passes.
//
// What it answers (any path may carry a "/vMAJOR.MINOR" prefix):
//   GET    /_ping                          200 "OK"
//   GET    /version                        200 {"ApiVersion":"1.43",...}
//   GET    /info                           200 {"Runtimes":{...}}: the runtimes of
//                                          SetRuntimes, once a test called it (before,
//                                          not handled, like any call a test did not
//                                          set the fake up for)
//   GET    /containers/json?...            200 [] (nothing for a reconcile to remove)
//   GET    /images/REF/json                200, an image without VOLUMEs; while
//                                          HoldImageInspect(true), the answer waits
//                                          for Release()
//   POST   /containers/create?name=N       201 {"Id":...}; the body is stored. A name
//                                          already taken is replaced (dockerd would
//                                          answer 409), so a restarted server's create
//                                          costs no extra DELETE
//   POST   /containers/ID-or-NAME/start    204
//   GET    /containers/ID-or-NAME/json     200, the stored body as inspect shows it:
//                                          Config (the body less HostConfig),
//                                          HostConfig, Mounts and a running State
//   DELETE /containers/ID-or-NAME?...      204
// A container it does not know gets dockerd's 404 "No such container". Any
// other request gets 404 {"message":"fake: not handled"} and counts in
// Unhandled(), which a test asserts is 0: a call the server started making
// shows up there rather than as a confusing failure further on.
//
// Every connection is served on its own thread, with keep-alive, so a held
// image inspect never delays another request. Request bodies may come with
// Content-Length or chunked; answers carry Content-Length.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace testutil
{

class FakeDockerd
{
  public:
    // Starts serving on `socket_path` (which must not exist and must fit a
    // sockaddr_un); "" picks a fresh path under the test's temporary
    // directory (or /tmp when that is too long) and removes it at the end.
    // Throws std::runtime_error when it cannot listen.
    explicit FakeDockerd(std::string socket_path = "");
    // Releases held requests, ends every connection and removes the socket.
    ~FakeDockerd();
    FakeDockerd(const FakeDockerd &) = delete;
    FakeDockerd &operator=(const FakeDockerd &) = delete;

    // "unix:///PATH", for --docker-host or DOCKER_HOST.
    std::string Host() const;
    const std::string &socket_path() const
    {
        return path_;
    }

    // While on, image inspects wait (without answering) until Release() or
    // HoldImageInspect(false). Turning it on resets what
    // WaitImageInspectArrived() waits for. Release before stopping a server
    // whose attach is held: its drain waits for that call, up to the server's
    // own timeout for a daemon call.
    void HoldImageInspect(bool hold);
    // True once an image inspect has arrived and is being held since the
    // hold was turned on; false after timeout_ms without one.
    bool WaitImageInspectArrived(int timeout_ms);
    // Ends the hold: every held request answers, later ones are not held.
    void Release();

    // Requests seen so far whose "METHOD TARGET" starts with the argument
    // ("DELETE /", "GET /_ping", "GET /v1.43/images/"). Counted when the
    // request has been read, before it is answered.
    int Requests(const std::string &method_and_path_prefix) const;
    // Requests answered with "fake: not handled".
    int Unhandled() const;
    // Ids of the containers that exist now (created and not deleted).
    std::vector<std::string> Containers() const;
    // The OCI runtimes GET /info reports as registered from now on.
    void SetRuntimes(std::vector<std::string> names);

  private:
    struct Request;
    struct Response;
    struct Container {
        std::string id;
        std::string name;
        std::string body; // the create body, as sent
        bool running = false;
    };
    struct Conn {
        int fd = -1;
        std::thread thread;
        bool done = false;
    };

    void AcceptLoop();
    void Serve(Conn *c);
    Response Handle(const Request &r);
    Response ImageInspect();
    bool HasRuntimes() const;
    Response Info() const;
    Response Create(const Request &r, const std::string &query);
    Response ContainerOp(const std::string &method, const std::string &ref, const std::string &op);
    Container *FindLocked(const std::string &ref);
    void ReapLocked();

    std::string path_;
    std::string made_dir_; // removed at the end when the path was chosen here
    int listen_fd_ = -1;
    int stop_r_ = -1, stop_w_ = -1; // stop_w_ closed: every poll wakes
    std::thread acceptor_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    bool hold_ = false;
    int held_arrived_ = 0;
    std::vector<std::string> seen_;
    int unhandled_ = 0;
    std::mt19937_64 rng_;
    std::map<std::string, Container> containers_; // by id
    bool has_runtimes_ = false;
    std::vector<std::string> runtimes_;
    std::list<std::unique_ptr<Conn>> conns_;
};

} // namespace testutil
