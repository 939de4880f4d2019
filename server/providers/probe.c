#include "server/providers/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <limits.h>
#include <unistd.h>

#include <curl/curl.h>

#include "server/base/io.h"
#include "server/base/macros.h"
#include "server/base/time.h"

/* Where bwrap is looked for first; the server's PATH is the fallback. */
static const char *const bwrap_fixed_paths[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap"};

/* Where slirp4netns is looked for first; the server's PATH is the fallback. */
static const char *const usernet_fixed_paths[] = {"/usr/bin/slirp4netns",
                                                  "/usr/local/bin/slirp4netns"};

static const char *find_in_path(const char *name, char *buf, size_t size)
{
    const char *path = getenv("PATH");

    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        int n;

        if (len > 0 && path[0] == '/') {
            n = snprintf(buf, size, "%.*s/%s", (int)len, path, name);
            if (n > 0 && (size_t)n < size && access(buf, X_OK) == 0)
                return buf;
        }
        path = end ? end + 1 : NULL;
    }
    return NULL;
}

const char *ws_probe_bwrap_path(void)
{
    static _Thread_local char found[4096];
    const char *forced = getenv(WS_BWRAP_ENV);

    /* An operator's explicit choice replaces the search: if it is not
     * usable there is no backend, never a fallback to another binary. */
    if (forced && forced[0])
        return forced[0] == '/' && access(forced, X_OK) == 0 ? forced : NULL;
    for (size_t i = 0; i < WS_ELEMENTSOF(bwrap_fixed_paths); i++)
        if (access(bwrap_fixed_paths[i], X_OK) == 0)
            return bwrap_fixed_paths[i];
    return find_in_path("bwrap", found, sizeof(found));
}

const char *ws_probe_usernet_path(void)
{
    static _Thread_local char found[4096];
    const char *forced = getenv(WS_USERNET_ENV);

    /* As for bwrap: an explicit choice that is not usable means there is
     * none, never a fallback. */
    if (forced && forced[0])
        return forced[0] == '/' && access(forced, X_OK) == 0 ? forced : NULL;
    for (size_t i = 0; i < WS_ELEMENTSOF(usernet_fixed_paths); i++)
        if (access(usernet_fixed_paths[i], X_OK) == 0)
            return usernet_fixed_paths[i];
    return find_in_path(WS_USERNET_NAME, found, sizeof(found));
}

void ws_probe_usernet(struct ws_probe *ret)
{
    struct ws_probe r = {0};

    if (ws_probe_usernet_path())
        r.available = true;
    else
        snprintf(r.reason, sizeof(r.reason),
                 "sandboxes with network need " WS_USERNET_NAME
                 " (user-mode networking), which is not installed");
    *ret = r;
}

void ws_probe_tun(const char *path, bool workspace_uid, struct ws_probe *ret)
{
    struct ws_probe r = {0};
    struct stat st;

    if (stat(path, &st) < 0 || !S_ISCHR(st.st_mode))
        snprintf(r.reason, sizeof(r.reason),
                 "sandboxes with network need %s (the tun driver), which is missing", path);
    else if (workspace_uid ? (st.st_mode & 0006) != 0006 : access(path, R_OK | W_OK) < 0)
        snprintf(r.reason, sizeof(r.reason),
                 "sandboxes with network need %s readable and writable by %s, which runs "
                 "their user-mode network; it is mode %04o (udev makes it 0666)",
                 path, workspace_uid ? "every workspace's uid" : "the server",
                 (unsigned)(st.st_mode & 07777));
    else
        r.available = true;
    *ret = r;
}

const char *ws_probe_server_program(const char *env, const char *name, const char *subdir,
                                    char *buf, size_t size)
{
    const char *forced = getenv(env);
    char exe[PATH_MAX];
    ssize_t n;

    /* An operator's explicit choice replaces the search: if it is not
     * usable there is none, never a fallback to another binary. */
    if (forced && forced[0])
        return forced[0] == '/' && access(forced, X_OK) == 0 ? forced : NULL;
    /* Installed next to the server binary (or, in the build tree, in the
     * subdirectory beside it). */
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    for (int i = 0; i < 2; i++) {
        int k = i == 0 ? snprintf(buf, size, "%s/%s/%s", exe, subdir, name)
                       : snprintf(buf, size, "%s/%s", exe, name);
        if (k > 0 && (size_t)k < size && access(buf, X_OK) == 0)
            return buf;
    }
    return NULL;
}

const char *ws_probe_agent_path(void)
{
    static _Thread_local char found[PATH_MAX];

    return ws_probe_server_program(WS_AGENT_ENV, WS_AGENT_NAME, "progs", found, sizeof(found));
}

const char *ws_probe_inbox_init_path(void)
{
    static _Thread_local char found[PATH_MAX];

    return ws_probe_server_program(WS_INBOX_INIT_ENV, WS_INBOX_INIT_NAME, "progs", found,
                                   sizeof(found));
}

const char *ws_probe_sandbox_init_path(void)
{
    static _Thread_local char found[PATH_MAX];

    return ws_probe_server_program(WS_SANDBOX_INIT_ENV, WS_SANDBOX_INIT_NAME, "progs", found,
                                   sizeof(found));
}

/* Keeps the first line of a diagnostic, without anything that looks like a
 * path, so a reason never leaks host layout. */
static void first_line(char *s)
{
    char *nl = strchr(s, '\n');

    if (nl)
        *nl = '\0';
}

void ws_probe_bwrap(struct ws_probe *ret)
{
    const char *init = ws_probe_sandbox_init_path();
    /* The same shape as a command's sandbox (user namespace without nested
     * ones, no capabilities, our init as pid 1 reporting on fd 3), so a
     * bwrap too old for one of these options reads as unusable too. */
    char *const argv[] = {
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--ro-bind",
        (char *)(init ? init : "/nonexistent"),
        "/.workspaced-init",
        "--remount-ro",
        "/",
        "--",
        "/.workspaced-init",
        "3",
        "/usr/bin/true",
        NULL,
    };
    char *const envp[] = {NULL};
    struct ws_probe r = {0};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none;
    int pipefd[2] = {-1, -1};
    char err[WS_PROBE_REASON_MAX] = "";
    size_t err_len = 0;
    pid_t pid = -1;
    int status = 0;
    const char *bwrap = ws_probe_bwrap_path();

    if (!bwrap) {
        snprintf(r.reason, sizeof(r.reason), "bubblewrap (bwrap) is not installed");
        goto out;
    }
    if (!init) {
        snprintf(r.reason, sizeof(r.reason),
                 "the sandbox init (" WS_SANDBOX_INIT_NAME ") is not installed next to the server");
        goto out;
    }
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        snprintf(r.reason, sizeof(r.reason), "cannot probe bubblewrap: %s", strerror(errno));
        goto out;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 3); /* init's status line */
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
    int rc = posix_spawn(&pid, bwrap, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(pipefd[1]);
    pipefd[1] = -1;
    if (rc != 0) {
        snprintf(r.reason, sizeof(r.reason), "cannot run bubblewrap: %s", strerror(rc));
        goto out;
    }

    /* Drain stderr until EOF or the deadline, then reap: the exit status is
     * read only after the pipe is drained. */
    int64_t deadline = ws_mono_ms() + WS_PROBE_TIMEOUT_MS;
    for (;;) {
        int64_t left = deadline - ws_mono_ms();
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        char buf[512];

        if (left <= 0) {
            kill(pid, SIGKILL);
            snprintf(r.reason, sizeof(r.reason), "bubblewrap probe timed out");
            break;
        }
        int n = poll(&pfd, 1, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            continue;
        ssize_t got = WS_RETRY_EINTR(read(pipefd[0], buf, sizeof(buf)));
        if (got <= 0)
            break;
        size_t room = sizeof(err) - 1 - err_len;
        size_t take = (size_t)got < room ? (size_t)got : room;
        memcpy(err + err_len, buf, take);
        err_len += take;
        err[err_len] = '\0';
    }
    (void)WS_RETRY_EINTR(waitpid(pid, &status, 0));
    if (r.reason[0])
        goto out;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        struct ws_probe net;

        r.available = true;
        ws_probe_usernet(&net);
        if (!net.available)
            snprintf(r.reason, sizeof(r.reason), "%s", net.reason);
        goto out;
    }
    first_line(err);
    snprintf(r.reason, sizeof(r.reason), "bubblewrap cannot create a sandbox here%s%.200s",
             err[0] ? ": " : "", err);
out:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    *ret = r;
}

static size_t discard_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    char *body = userdata;
    size_t n = size * nmemb;
    size_t have = strlen(body);

    if (have < 7) {
        size_t take = n < 7 - have ? n : 7 - have;
        memcpy(body + have, ptr, take);
        body[have + take] = '\0';
    }
    return n;
}

/* When the daemon last answered /_ping (monotonic ms; 0: never). A success
 * is trusted for WS_PROBE_DOCKER_OK_MS, so a burst of Opens pings once; a
 * failure is never remembered, and a daemon gone within that window shows
 * up as the Open's own calls failing, reported the same way. */
#define WS_PROBE_DOCKER_OK_MS 2000
static _Atomic int64_t docker_ok_at;

void ws_probe_docker(struct ws_probe *ret)
{
    struct ws_probe r = {0};
    int64_t ok_at = atomic_load(&docker_ok_at);

    if (ok_at && ws_mono_ms() - ok_at < WS_PROBE_DOCKER_OK_MS) {
        r.available = true;
        *ret = r;
        return;
    }
    const char *host = getenv("DOCKER_HOST");
    char url[512];
    char body[8] = "";
    long code = 0;
    CURL *curl = curl_easy_init();

    if (!curl) {
        snprintf(r.reason, sizeof(r.reason), "cannot create an HTTP client");
        r.transient = true;
        goto out;
    }
    if (host && strncmp(host, "tcp://", 6) == 0) {
        snprintf(url, sizeof(url), "http://%s/_ping", host + 6);
    } else {
        const char *sock = "/var/run/docker.sock";

        if (host && strncmp(host, "unix://", 7) == 0)
            sock = host + 7;
        curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, sock);
        snprintf(url, sizeof(url), "http://localhost/_ping");
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
    CURLcode cc = curl_easy_perform(curl);
    if (cc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (cc == CURLE_OK && code == 200 && strncmp(body, "OK", 2) == 0) {
        r.available = true;
        atomic_store(&docker_ok_at, ws_mono_ms());
        goto out;
    }
    atomic_store(&docker_ok_at, 0);
    r.transient = true;
    if (cc != CURLE_OK)
        snprintf(r.reason, sizeof(r.reason), "Docker daemon not reachable: %s",
                 curl_easy_strerror(cc));
    else
        snprintf(r.reason, sizeof(r.reason), "Docker daemon answered /_ping with HTTP %ld", code);
out:
    if (curl)
        curl_easy_cleanup(curl);
    *ret = r;
}
