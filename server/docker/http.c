/* The Docker Engine API's HTTP transport on the pump thread; see http.h.
 *
 * Every curl_multi_* and curl_easy_* call on a handle that is in the multi
 * happens on the pump thread: the multi handle is not thread-safe, and
 * keeping it on one thread is what lets start, cancel and resume be called
 * from anywhere without a lock around curl. Other threads reach it only
 * through ws_pump_post(), whose FIFO order keeps a call's start ahead of
 * its cancel or resume.
 */
#include "server/docker/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "server/base/time.h"
#include "server/events/pump.h"
#include "server/work/pool.h"

/* "https://" + host + ":65535" + NUL, with room to spare. */
#define BASE_URL_MAX (WS_DOCKER_HTTP_HOST_MAX + 32)

/* One socket curl asked us to watch. Freed through ws_pump_post() after
 * curl drops it, because the pump may still hold an event for it in the
 * current batch (pump.h's lifetime rule); the posted free touches nothing
 * but the struct, so it may run after the client is gone. */
struct sock {
    struct ws_pump_watch w;
    struct ws_docker_http *h;
    struct sock *prev, *next; /* h->socks while curl uses it */
    struct sock *next_dead;   /* on h->dead when the post failed */
};

struct ws_docker_http {
    struct ws_pump *pump;
    CURLM *multi;
    int tfd;
    struct ws_pump_watch timer;
    char base_url[BASE_URL_MAX];
    struct ws_docker_http_config cfg;
    unsigned calls_max;
    unsigned live; /* calls started, not yet done (atomic) */
    bool closing;  /* ws_docker_http_free has begun (atomic) */
    /* Pump thread only: */
    struct ws_docker_http_call *calls; /* added to the multi, not yet done */
    struct sock *socks;                /* watched for curl */
    struct sock *dead;                 /* dropped sockets left to free */
    /* ws_docker_http_free's hand-over with the pump thread. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool torn_down;
};

struct ws_docker_http_call {
    struct ws_docker_http *h;
    CURL *easy;
    struct curl_slist *headers;
    ws_docker_http_body_fn on_body;
    ws_docker_http_done_fn on_done;
    void *arg;
    int refs; /* atomic: the transfer, the caller's, each pending post */
    /* Pump thread only: */
    int abort_err; /* on_body's error, which curl reports as WRITE_ERROR */
    bool done;
    struct ws_docker_http_call *prev, *next;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* --- Errors --------------------------------------------------------------- */

/* A finished transfer's CURLcode as a negated errno (the table in http.h). */
static int map_error(struct ws_docker_http_call *c, CURLcode rc)
{
    long os_errno = 0;

    switch (rc) {
    case CURLE_OK:
        return 0;
    case CURLE_WRITE_ERROR:
    case CURLE_ABORTED_BY_CALLBACK:
        return c->abort_err < 0 ? c->abort_err : -EIO;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        /* curl keeps connect()'s errno: a unix socket path that does not
         * exist is ENOENT, one nobody listens on is ECONNREFUSED. */
        curl_easy_getinfo(c->easy, CURLINFO_OS_ERRNO, &os_errno);
        if (os_errno == ENOENT || os_errno == EACCES || os_errno == ETIMEDOUT ||
            os_errno == EHOSTUNREACH || os_errno == ENETUNREACH)
            return -(int)os_errno;
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
        /* Without a socket error, curl refused what it received (a bad
         * chunk header, for one). */
        curl_easy_getinfo(c->easy, CURLINFO_OS_ERRNO, &os_errno);
        return os_errno ? -ECONNRESET : -EPROTO;
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return -EPROTO;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
        return -EKEYREJECTED;
    default:
        return -EIO;
    }
}

/* --- Calls: references and ending ---------------------------------------- */

static void call_ref(struct ws_docker_http_call *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
}

/* The transfer's resources; the easy handle must be out of the multi. */
static void release_transfer(struct ws_docker_http_call *c)
{
    if (c->easy)
        curl_easy_cleanup(c->easy);
    c->easy = NULL;
    curl_slist_free_all(c->headers);
    c->headers = NULL;
}

static void call_unref(struct ws_docker_http_call *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    release_transfer(c);
    free(c);
}

void ws_docker_http_call_unref(struct ws_docker_http_call *call)
{
    if (call)
        call_unref(call);
}

/* Ends a call that is in the multi: out of it, on_done, then the transfer's
 * reference. Pump thread, outside any curl callback. */
static void finish(struct ws_docker_http_call *c, int err)
{
    struct ws_docker_http *h = c->h;
    long status = 0;

    if (c->done)
        return;
    c->done = true;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(h->multi, c->easy);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    release_transfer(c);
    __atomic_sub_fetch(&h->live, 1, __ATOMIC_RELAXED);
    c->on_done(c->arg, err, status);
    call_unref(c);
}

/* Collects finished transfers after curl has run. */
static void check_done(struct ws_docker_http *h)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(h->multi, &left))) {
        struct ws_docker_http_call *c = NULL;

        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        /* msg is invalid once the handle leaves the multi. */
        CURLcode rc = msg->data.result;
        finish(c, map_error(c, rc));
    }
}

/* --- The pump side: sockets and timer ------------------------------------- */

static void free_sock(void *arg)
{
    free(arg);
}

static void sock_event(void *arg, uint32_t events)
{
    struct sock *s = arg;
    struct ws_docker_http *h = s->h;
    int action = 0, running;

    if (events & EPOLLIN)
        action |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        action |= CURL_CSELECT_OUT;
    if (events & EPOLLERR)
        action |= CURL_CSELECT_ERR;
    /* s may be dropped (and its free posted) inside this call. */
    curl_multi_socket_action(h->multi, s->w.fd, action, &running);
    check_done(h);
}

/* CURLMOPT_SOCKETFUNCTION: curl tells which sockets it wants watched for
 * what. Pump thread (curl runs nowhere else). */
/* Stops watching s and frees it once the current batch is over. */
static void drop_sock(struct ws_docker_http *h, struct sock *s)
{
    ws_pump_watch_del(h->pump, &s->w);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (ws_pump_post(h->pump, free_sock, s) < 0) {
        s->next_dead = h->dead;
        h->dead = s;
    }
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct ws_docker_http *h = userp;
    struct sock *s = socketp;
    int r;

    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(h->multi, fd, NULL);
            drop_sock(h, s);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return -1;
        s->w.fd = fd;
        s->w.cb = sock_event;
        s->w.arg = s;
        s->h = h;
        r = ws_pump_watch_add(h->pump, &s->w, false);
        if (r < 0) {
            free(s);
            return -1;
        }
        curl_multi_assign(h->multi, fd, s);
        s->next = h->socks;
        if (h->socks)
            h->socks->prev = s;
        h->socks = s;
    }
    bool in = what == CURL_POLL_IN || what == CURL_POLL_INOUT;
    bool out = what == CURL_POLL_OUT || what == CURL_POLL_INOUT;
    r = ws_pump_watch_set(h->pump, &s->w, in);
    if (r == -ENOENT) {
        /* The kernel forgot the fd: it was closed and its number reused
         * without curl reporting the close. Register the new file. */
        ws_pump_watch_del(h->pump, &s->w);
        r = ws_pump_watch_add(h->pump, &s->w, in);
    }
    if (r == 0)
        r = ws_pump_watch_set_out(h->pump, &s->w, out);
    return r < 0 ? -1 : 0;
}

/* CURLMOPT_TIMERFUNCTION: one-shot timerfd. A 0 ms timeout is armed as
 * 1 ns rather than acted on here: curl forbids calling back into it from
 * this callback. */
static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
    struct ws_docker_http *h = userp;
    struct itimerspec its = {0};

    (void)multi;
    if (timeout_ms > 0) {
        its.it_value.tv_sec = timeout_ms / 1000;
        its.it_value.tv_nsec = (timeout_ms % 1000) * 1000000L;
    } else if (timeout_ms == 0) {
        its.it_value.tv_nsec = 1;
    }
    return timerfd_settime(h->tfd, 0, &its, NULL) < 0 ? -1 : 0;
}

static void timer_event(void *arg, uint32_t events)
{
    struct ws_docker_http *h = arg;
    uint64_t n;
    int running;

    (void)events;
    /* EAGAIN is fine: the timer was re-armed since it fired. */
    if (read(h->tfd, &n, sizeof(n)) != (ssize_t)sizeof(n))
        return;
    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(h);
}

/* --- Client --------------------------------------------------------------- */

int ws_docker_http_new(struct ws_pump *pump, const struct ws_docker_http_config *cfg,
                       struct ws_docker_http **ret)
{
    struct ws_docker_http *h = NULL;
    int r, n;

    if (!pump || !cfg)
        return -EINVAL;
    if (cfg->transport == WS_DOCKER_HTTP_UNIX) {
        if (cfg->unix_path[0] != '/' || !memchr(cfg->unix_path, '\0', sizeof(cfg->unix_path)) ||
            cfg->tls)
            return -EINVAL;
    } else if (cfg->transport == WS_DOCKER_HTTP_TCP) {
        if (!cfg->host[0] || !memchr(cfg->host, '\0', sizeof(cfg->host)) || cfg->port == 0 ||
            cfg->port > 65535)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return -ENOMEM;

    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->pump = pump;
    h->cfg = *cfg;
    h->tfd = -1;
    h->calls_max = cfg->calls_max ? cfg->calls_max : WS_DOCKER_HTTP_CALLS_MAX_DEFAULT;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    if (cfg->transport == WS_DOCKER_HTTP_UNIX)
        /* The host part is required by HTTP/1.1 and ignored by dockerd. */
        n = snprintf(h->base_url, sizeof(h->base_url), "http://localhost");
    else
        n = snprintf(h->base_url, sizeof(h->base_url), "%s://%s:%u", cfg->tls ? "https" : "http",
                     cfg->host, cfg->port);
    if (n < 0 || (size_t)n >= sizeof(h->base_url)) {
        r = -EINVAL;
        goto fail;
    }
    h->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (h->tfd < 0) {
        r = -errno;
        goto fail;
    }
    h->multi = curl_multi_init();
    if (!h->multi) {
        r = -ENOMEM;
        goto fail;
    }
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      (long)(cfg->connections_max ? cfg->connections_max
                                                  : WS_DOCKER_HTTP_CONNECTIONS_MAX_DEFAULT));
    h->timer.fd = h->tfd;
    h->timer.cb = timer_event;
    h->timer.arg = h;
    r = ws_pump_watch_add(pump, &h->timer, true);
    if (r < 0)
        goto fail;
    *ret = h;
    return 0;
fail:
    if (h->multi)
        curl_multi_cleanup(h->multi);
    if (h->tfd >= 0)
        close(h->tfd);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    free(h);
    return r;
}

/* Posted by ws_docker_http_free: everything curl holds goes on the pump
 * thread, where curl lives. */
static void teardown(void *arg)
{
    struct ws_docker_http *h = arg;

    while (h->calls)
        finish(h->calls, -ECANCELED);
    /* Closing the cached connections reports their sockets as removed. */
    curl_multi_cleanup(h->multi);
    h->multi = NULL;
    /* Whatever curl did not report as removed (its sockets are closed by
     * now; epoll forgot them with the close). */
    while (h->socks)
        drop_sock(h, h->socks);
    ws_pump_watch_del(h->pump, &h->timer);
    pthread_mutex_lock(&h->lock);
    h->torn_down = true;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

void ws_docker_http_free(struct ws_docker_http *h)
{
    if (!h)
        return;
    /* From here on, start (say from an on_done run by the teardown)
     * refuses: a call posted after the teardown would outlive curl. */
    __atomic_store_n(&h->closing, true, __ATOMIC_RELEASE);
    /* Posting can only fail for memory; the teardown must happen on the
     * pump thread, so retry rather than tear curl down from here. */
    while (ws_pump_post(h->pump, teardown, h) < 0)
        usleep(1000);
    pthread_mutex_lock(&h->lock);
    while (!h->torn_down)
        pthread_cond_wait(&h->cond, &h->lock);
    pthread_mutex_unlock(&h->lock);
    while (h->dead) {
        struct sock *s = h->dead;
        h->dead = s->next_dead;
        free(s);
    }
    close(h->tfd);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    free(h);
}

/* --- Calls ---------------------------------------------------------------- */

/* CURLOPT_WRITEFUNCTION: hands body bytes to on_body. */
static size_t on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    struct ws_docker_http_call *c = userp;
    size_t len = size * nmemb;
    int r;

    if (!c->on_body || len == 0)
        return len;
    r = c->on_body(c->arg, data, len);
    if (r == WS_DOCKER_HTTP_PAUSE)
        return CURL_WRITEFUNC_PAUSE;
    if (r < 0) {
        c->abort_err = r;
        return 0; /* anything but len aborts: CURLE_WRITE_ERROR */
    }
    return len;
}

static bool valid_path(const char *p)
{
    size_t n = 0;

    if (!p || p[0] != '/')
        return false;
    for (; p[n]; n++) {
        unsigned char ch = (unsigned char)p[n];

        if (n >= WS_DOCKER_HTTP_PATH_MAX || ch <= 0x20 || ch >= 0x7f)
            return false;
    }
    return true;
}

/* Builds the easy handle; nothing touches the multi yet, so any thread. */
static int setup_easy(struct ws_docker_http *h, const struct ws_docker_http_request *req,
                      struct ws_docker_http_call *c)
{
    char url[BASE_URL_MAX + WS_DOCKER_HTTP_PATH_MAX + 1];
    long timeout = req->timeout_ms ? req->timeout_ms : WS_DOCKER_HTTP_TIMEOUT_MS_DEFAULT;
    long ctimeout = req->connect_timeout_ms ? req->connect_timeout_ms
                                            : WS_DOCKER_HTTP_CONNECT_TIMEOUT_MS_DEFAULT;
    CURL *e;
    CURLcode rc = CURLE_OK;

    snprintf(url, sizeof(url), "%s%s", h->base_url, req->path);
    e = c->easy = curl_easy_init();
    if (!e)
        return -ENOMEM;
    /* curl's default Expect: 100-continue would stall every POST body over
     * 1 KiB for a second; dockerd never asks for it. */
    c->headers = curl_slist_append(NULL, "Expect:");
    if (c->headers && req->body) {
        struct curl_slist *l = curl_slist_append(c->headers, "Content-Type: application/json");
        if (l)
            c->headers = l;
        else
            rc = CURLE_OUT_OF_MEMORY;
    }
    if (!c->headers)
        return -ENOMEM;
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_URL, url);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, h->cfg.tls ? "https" : "http");
    if (rc == CURLE_OK && h->cfg.transport == WS_DOCKER_HTTP_UNIX)
        rc = curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, h->cfg.unix_path);
    /* The daemon is addressed directly: no proxy from the environment. */
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_PROXY, "");
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (rc == CURLE_OK && timeout > 0)
        rc = curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ctimeout);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_PRIVATE, c);
    if (rc == CURLE_OK && h->cfg.transport == WS_DOCKER_HTTP_TCP)
        rc = curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    if (rc == CURLE_OK && h->cfg.tls) {
        rc = curl_easy_setopt(e, CURLOPT_CAINFO, h->cfg.tls_ca);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(e, CURLOPT_SSLCERT, h->cfg.tls_cert);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(e, CURLOPT_SSLKEY, h->cfg.tls_key);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    }
    if (rc == CURLE_OK) {
        switch (req->method) {
        case WS_DOCKER_HTTP_GET:
            rc = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
            break;
        case WS_DOCKER_HTTP_HEAD:
            rc = curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
            break;
        case WS_DOCKER_HTTP_POST:
        case WS_DOCKER_HTTP_PUT:
        case WS_DOCKER_HTTP_DELETE:
            if (req->body || req->method != WS_DOCKER_HTTP_DELETE) {
                /* Size first: COPYPOSTFIELDS copies that many bytes. */
                rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                                      (curl_off_t)(req->body ? req->body_len : 0));
                if (rc == CURLE_OK)
                    rc = curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, req->body ? req->body : "");
            }
            if (rc == CURLE_OK && req->method != WS_DOCKER_HTTP_POST)
                rc = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST,
                                      req->method == WS_DOCKER_HTTP_PUT ? "PUT" : "DELETE");
            break;
        }
    }
    if (rc == CURLE_OUT_OF_MEMORY)
        return -ENOMEM;
    return rc == CURLE_OK ? 0 : -EINVAL;
}

/* Posted by start: the call joins the multi. */
static void add_call(void *arg)
{
    struct ws_docker_http_call *c = arg;
    struct ws_docker_http *h = c->h;
    CURLMcode mc = curl_multi_add_handle(h->multi, c->easy);

    if (mc != CURLM_OK) {
        /* start already returned 0, so the call must still end through
         * on_done, exactly once. */
        c->done = true;
        release_transfer(c);
        __atomic_sub_fetch(&h->live, 1, __ATOMIC_RELAXED);
        c->on_done(c->arg, mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO, 0);
        call_unref(c);
        return;
    }
    c->next = h->calls;
    if (h->calls)
        h->calls->prev = c;
    h->calls = c;
    /* curl_multi_add_handle sets a 0 ms timeout through on_timer, which
     * kicks the transfer off on the next loop iteration. */
}

int ws_docker_http_start(struct ws_docker_http *h, const struct ws_docker_http_request *req,
                         struct ws_docker_http_call **ret)
{
    struct ws_docker_http_call *c;
    int r;

    if (!h || !req || !req->on_done || !valid_path(req->path) || (req->body_len && !req->body) ||
        req->timeout_ms < WS_DOCKER_HTTP_NO_TIMEOUT || req->connect_timeout_ms < 0 ||
        (unsigned)req->method > WS_DOCKER_HTTP_HEAD)
        return -EINVAL;
    if (req->body && req->body_len > WS_DOCKER_HTTP_REQUEST_BODY_MAX)
        return -E2BIG;
    if (__atomic_load_n(&h->closing, __ATOMIC_ACQUIRE))
        return -ESHUTDOWN;
    if (__atomic_add_fetch(&h->live, 1, __ATOMIC_RELAXED) > h->calls_max) {
        __atomic_sub_fetch(&h->live, 1, __ATOMIC_RELAXED);
        return -EBUSY;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        r = -ENOMEM;
        goto fail;
    }
    c->h = h;
    c->on_body = req->on_body;
    c->on_done = req->on_done;
    c->arg = req->arg;
    c->refs = ret ? 2 : 1;
    r = setup_easy(h, req, c);
    if (r < 0)
        goto fail;
    r = ws_pump_post(h->pump, add_call, c);
    if (r < 0)
        goto fail;
    if (ret)
        *ret = c;
    return 0;
fail:
    if (c) {
        release_transfer(c);
        free(c);
    }
    __atomic_sub_fetch(&h->live, 1, __ATOMIC_RELAXED);
    return r;
}

static void cancel_call(void *arg)
{
    struct ws_docker_http_call *c = arg;

    if (!c->done)
        finish(c, -ECANCELED);
    call_unref(c);
}

int ws_docker_http_cancel(struct ws_docker_http_call *call)
{
    int r;

    call_ref(call);
    r = ws_pump_post(call->h->pump, cancel_call, call);
    if (r < 0)
        call_unref(call);
    return r;
}

static void resume_call(void *arg)
{
    struct ws_docker_http_call *c = arg;
    struct ws_docker_http *h = c->h;

    if (!c->done) {
        /* May deliver the held-back bytes to on_body right here (which
         * may abort the call), and schedules the transfer through
         * on_timer. */
        CURLcode rc = curl_easy_pause(c->easy, CURLPAUSE_CONT);

        if (rc != CURLE_OK)
            finish(c, map_error(c, rc));
        check_done(h);
    }
    call_unref(c);
}

int ws_docker_http_resume(struct ws_docker_http_call *call)
{
    int r;

    call_ref(call);
    r = ws_pump_post(call->h->pump, resume_call, call);
    if (r < 0)
        call_unref(call);
    return r;
}

/* --- Blocking calls ------------------------------------------------------- */

struct sync_state {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int err;
    long status;
    char *buf;
    size_t len, cap, max;
    bool keep;
};

static int sync_body(void *arg, const char *data, size_t len)
{
    struct sync_state *s = arg;

    if (len > s->max - s->len)
        return -EMSGSIZE;
    if (!s->keep) {
        s->len += len;
        return 0;
    }
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        char *p;

        while (cap < s->len + len + 1)
            cap *= 2;
        if (cap > s->max + 1)
            cap = s->max + 1;
        p = realloc(s->buf, cap);
        if (!p)
            return -ENOMEM;
        s->buf = p;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return 0;
}

static void sync_done(void *arg, int err, long status)
{
    struct sync_state *s = arg;

    pthread_mutex_lock(&s->lock);
    s->done = true;
    s->err = err;
    s->status = status;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int ws_docker_http_call_sync(struct ws_docker_http *h, const struct ws_docker_http_request *req,
                             char **ret_body, size_t *ret_len, long *ret_status, size_t max_body)
{
    struct ws_docker_http_request r2;
    struct sync_state s = {.max = max_body ? max_body : WS_DOCKER_HTTP_SYNC_BODY_MAX_DEFAULT,
                           .keep = ret_body != NULL};
    int r;

    if (!h || !req || req->timeout_ms < 0)
        return -EINVAL;
    /* Room for the NUL without overflowing the size. */
    if (s.max > SIZE_MAX / 2)
        s.max = SIZE_MAX / 2;
    /* The answer could only come from the thread that is waiting for it. */
    if (ws_pump_on_thread(h->pump))
        return -EDEADLK;
    r2 = *req;
    r2.on_body = sync_body;
    r2.on_done = sync_done;
    r2.arg = &s;
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.cond, NULL);
    r = ws_docker_http_start(h, &r2, NULL);
    if (r < 0)
        goto out;
    pthread_mutex_lock(&s.lock);
    while (!s.done)
        pthread_cond_wait(&s.cond, &s.lock);
    pthread_mutex_unlock(&s.lock);
    r = s.err;
    if (r < 0)
        goto out;
    if (ret_body) {
        if (!s.buf) {
            s.buf = malloc(1);
            if (!s.buf) {
                r = -ENOMEM;
                goto out;
            }
        }
        s.buf[s.len] = '\0';
        *ret_body = s.buf;
        s.buf = NULL;
    }
    if (ret_len)
        *ret_len = s.len;
    if (ret_status)
        *ret_status = s.status;
out:
    free(s.buf);
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.cond);
    return r;
}

/* call_ctl's wait: the caller's on_body, and the end. */
struct ctl_state {
    ws_docker_http_body_fn on_body;
    void *arg;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC */
    bool done;
    int err;
    long status;
};

static int ctl_body(void *arg, const char *data, size_t len)
{
    struct ctl_state *s = arg;

    return s->on_body ? s->on_body(s->arg, data, len) : 0;
}

static void ctl_done(void *arg, int err, long status)
{
    struct ctl_state *s = arg;

    pthread_mutex_lock(&s->lock);
    s->done = true;
    s->err = err;
    s->status = status;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int ws_docker_http_call_ctl(struct ws_docker_http *h, const struct ws_docker_http_request *req,
                            const struct ws_work_ctl *ctl, long *ret_status)
{
    struct ws_docker_http_request r2;
    struct ws_docker_http_call *call = NULL;
    struct ctl_state s = {0};
    pthread_condattr_t cattr;
    bool cancelled = false;
    int stop = 0, r;

    if (!h || !req || req->timeout_ms < 0)
        return -EINVAL;
    if (ws_pump_on_thread(h->pump))
        return -EDEADLK;
    s.on_body = req->on_body;
    s.arg = req->arg;
    r2 = *req;
    r2.on_body = ctl_body;
    r2.on_done = ctl_done;
    r2.arg = &s;
    pthread_mutex_init(&s.lock, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&s.cond, &cattr);
    pthread_condattr_destroy(&cattr);
    r = ws_docker_http_start(h, &r2, &call);
    if (r < 0)
        goto out;
    pthread_mutex_lock(&s.lock);
    while (!s.done) {
        if (!ctl) {
            pthread_cond_wait(&s.cond, &s.lock);
            continue;
        }
        if (stop == 0)
            stop = ws_work_ctl_check(ctl);
        /* The end still comes after a cancel, and s must live until it
         * has; short of memory the cancel is tried at the next look. */
        if (stop < 0 && !cancelled)
            cancelled = ws_docker_http_cancel(call) == 0;
        int64_t at = ws_mono_ns() + WS_DOCKER_HTTP_CTL_POLL_MS * WS_NSEC_PER_MSEC;
        struct timespec ts = {.tv_sec = (time_t)(at / WS_NSEC_PER_SEC),
                              .tv_nsec = (long)(at % WS_NSEC_PER_SEC)};
        (void)pthread_cond_timedwait(&s.cond, &s.lock, &ts);
    }
    pthread_mutex_unlock(&s.lock);
    ws_docker_http_call_unref(call);
    r = s.err;
    if (r < 0 && stop < 0)
        r = stop;
    if (r == 0 && ret_status)
        *ret_status = s.status;
out:
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.cond);
    return r;
}
