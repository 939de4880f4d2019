/* workspaced: flags, the state directory, signal handling and the
 * graceful drain. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <grpc/grpc.h>

#include "server/exec/exec.h"
#include "server/metrics/http.h"
#include "server/registry/registry.h"
#include "server/rpc/call.h"
#include "server/rpc/log.h"
#include "server/rpc/services/services.h"

#define DEFAULT_LISTEN   "127.0.0.1:7878"
#define DEFAULT_GRACE_MS 10000
/* gRPC message ceiling: a 4 MiB chunk plus its envelope. */
#define MAX_MESSAGE_DEFAULT (4 * 1024 * 1024 + 64 * 1024)
#define MAX_MESSAGE_MIN     (64 * 1024)
#define MAX_MESSAGE_MAX     (64 * 1024 * 1024)

struct options {
    const char *listen;
    const char *state_dir;
    const char *workspace_root;
    unsigned long max_workspaces;
    unsigned long long max_file_size;
    unsigned long long memory_max_bytes;
    long threads;
    long grace_ms;
    long kill_grace_ms;
    long keepalive_ms;
    const char *exec_path;
    bool force_subreaper;
    const char *tokens_file;
    const char *tls_cert;
    const char *tls_key;
    const char *tls_client_ca;
    bool allow_plaintext;
    unsigned long tenant_max_workspaces;
    unsigned long tenant_opens_per_minute;
    unsigned long tenant_max_commands;
    unsigned long long tenant_max_bytes;
    /* Observability and transport limits. */
    const char *metrics_listen;
    bool metrics_allow_remote;
    long max_message_bytes;
    long max_streams;
    long long memory_quota_bytes;
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: workspaced [options]\n"
        "  --listen ADDR          host:port or unix:PATH [" DEFAULT_LISTEN "]; a\n"
        "                         non-loopback address needs --tokens-file or\n"
        "                         --tls-client-ca, and TLS or --allow-plaintext\n"
        "  --tokens-file PATH     bearer tokens, 'TENANT SHA256HEX' lines; re-read on SIGHUP\n"
        "  --tls-cert FILE --tls-key FILE  serve TLS (PEM)\n"
        "  --tls-client-ca FILE   require client certificates signed by this CA (mTLS);\n"
        "                         the certificate's CN is the tenant when no token is sent\n"
        "  --allow-plaintext      allow a non-loopback address without TLS\n"
        "  --tenant-max-workspaces N   open workspaces per tenant, 0: no quota [0]\n"
        "  --tenant-opens-per-minute N Opens per tenant and minute, 0: no quota [0]\n"
        "  --tenant-max-commands N     running commands per tenant, 0: no quota [0]\n"
        "  --tenant-max-bytes BYTES    bytes of files in a tenant's workspaces, 0: no quota [0]\n"
        "  --state-dir DIR        refs key, workspace records (created 0700) [required]\n"
        "  --workspace-root DIR   per-workspace directories [STATE_DIR/workspaces]\n"
        "  --max-workspaces N     cap on open workspaces [%d]\n"
        "  --max-file-size BYTES  default and ceiling of a workspace's file size cap [%llu]\n"
        "  --memory-workspace-bytes BYTES  what one memory workspace may hold [%llu]\n"
        "  --threads N            completion-queue threads [number of CPUs]\n"
        "  --drain-grace-ms MS    how long in-flight calls may finish on SIGTERM [%d]\n"
        "  --kill-grace-ms MS     SIGTERM-to-SIGKILL grace when a command is ended [%d]\n"
        "  --keepalive-ms MS      ping interval and ping timeout: a client gone without\n"
        "                         closing its connection is dropped (and its commands\n"
        "                         killed) after about twice this; 0 disables [%d]\n"
        "  --exec-path DIRS       where commands are looked up, and their PATH\n"
        "                         [" WS_SERVICES_EXEC_PATH_DEFAULT "]\n"
        "  --process-containment auto|subreaper\n"
        "                         how a command's whole tree is ended: a cgroup per\n"
        "                         command where possible (auto), or the subreaper sweep [auto]\n"
        "  --metrics-listen ADDR  serve GET /metrics (Prometheus text) on host:port,\n"
        "                         loopback only unless --metrics-allow-remote [off]\n"
        "  --metrics-allow-remote let --metrics-listen bind a non-loopback address\n"
        "  --max-message-bytes N  largest gRPC message either way [%d]\n"
        "  --max-streams-per-connection N  concurrent calls one connection may hold [%d]\n"
        "  --memory-quota-bytes N memory gRPC's transport may use in all [%lld]\n"
        "environment:\n"
        "  WORKSPACED_BWRAP       the bubblewrap binary for local-sandbox (no search when set)\n"
        "  DOCKER_HOST            the Docker daemon (unix://PATH or tcp://HOST:PORT)\n",
        WS_DEFAULT_MAX_WORKSPACES, (unsigned long long)WS_DEFAULT_MAX_FILE_SIZE,
        (unsigned long long)WS_DEFAULT_MEMORY_MAX_BYTES, DEFAULT_GRACE_MS, WS_EXEC_GRACE_MS_DEFAULT,
        WS_RPC_KEEPALIVE_MS_DEFAULT, MAX_MESSAGE_DEFAULT, WS_RPC_MAX_STREAMS_DEFAULT,
        WS_RPC_MEMORY_QUOTA_DEFAULT);
}

static bool parse_ull(const char *s, unsigned long long max, unsigned long long *ret)
{
    char *end;
    unsigned long long v;

    if (!s || !*s || *s == '-')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return false;
    *ret = v;
    return true;
}

/* Without authentication only loopback and unix sockets may be bound: a
 * workspace server on a public address would hand a shell to anyone. The
 * host must be a literal loopback address or "localhost". */
static bool listen_is_local(const char *addr)
{
    char host[256];
    const char *end;
    struct in_addr v4;
    struct in6_addr v6;

    if (strncmp(addr, "unix:", 5) == 0)
        return addr[5] != '\0';
    if (addr[0] == '[') {
        end = strchr(addr, ']');
        if (!end || end[1] != ':')
            return false;
        addr++;
    } else {
        end = strrchr(addr, ':');
        if (!end)
            return false;
    }
    if ((size_t)(end - addr) >= sizeof(host))
        return false;
    memcpy(host, addr, (size_t)(end - addr));
    host[end - addr] = '\0';
    if (strcmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6);
    return false;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    enum {
        LISTEN = 256,
        STATE,
        ROOT,
        MAXWS,
        MAXSIZE,
        MEMBYTES,
        THREADS,
        GRACE,
        KILLGRACE,
        KEEPALIVE,
        EXECPATH,
        CONTAIN,
        TOKENS,
        TLSCERT,
        TLSKEY,
        TLSCA,
        PLAINTEXT,
        TENANTWS,
        TENANTOPENS,
        TENANTCMDS,
        TENANTBYTES,
        METRICS,
        METRICS_REMOTE,
        MAXMSG,
        MAXSTREAMS,
        MEMQUOTA,
        HELP
    };
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, LISTEN},
        {"state-dir", required_argument, NULL, STATE},
        {"workspace-root", required_argument, NULL, ROOT},
        {"max-workspaces", required_argument, NULL, MAXWS},
        {"max-file-size", required_argument, NULL, MAXSIZE},
        {"memory-workspace-bytes", required_argument, NULL, MEMBYTES},
        {"threads", required_argument, NULL, THREADS},
        {"drain-grace-ms", required_argument, NULL, GRACE},
        {"kill-grace-ms", required_argument, NULL, KILLGRACE},
        {"keepalive-ms", required_argument, NULL, KEEPALIVE},
        {"exec-path", required_argument, NULL, EXECPATH},
        {"process-containment", required_argument, NULL, CONTAIN},
        {"tokens-file", required_argument, NULL, TOKENS},
        {"tls-cert", required_argument, NULL, TLSCERT},
        {"tls-key", required_argument, NULL, TLSKEY},
        {"tls-client-ca", required_argument, NULL, TLSCA},
        {"allow-plaintext", no_argument, NULL, PLAINTEXT},
        {"tenant-max-workspaces", required_argument, NULL, TENANTWS},
        {"tenant-opens-per-minute", required_argument, NULL, TENANTOPENS},
        {"tenant-max-commands", required_argument, NULL, TENANTCMDS},
        {"tenant-max-bytes", required_argument, NULL, TENANTBYTES},
        {"metrics-listen", required_argument, NULL, METRICS},
        {"metrics-allow-remote", no_argument, NULL, METRICS_REMOTE},
        {"max-message-bytes", required_argument, NULL, MAXMSG},
        {"max-streams-per-connection", required_argument, NULL, MAXSTREAMS},
        {"memory-quota-bytes", required_argument, NULL, MEMQUOTA},
        {"help", no_argument, NULL, HELP},
        {NULL, 0, NULL, 0},
    };
    unsigned long long v;
    int c;

    *o = (struct options){.listen = DEFAULT_LISTEN, .grace_ms = DEFAULT_GRACE_MS};
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case LISTEN:
            o->listen = optarg;
            break;
        case STATE:
            o->state_dir = optarg;
            break;
        case ROOT:
            o->workspace_root = optarg;
            break;
        case MAXWS:
            if (!parse_ull(optarg, 1000000, &v) || v == 0)
                goto bad;
            o->max_workspaces = (unsigned long)v;
            break;
        case MAXSIZE:
            if (!parse_ull(optarg, 1ull << 40, &v) || v == 0)
                goto bad;
            o->max_file_size = v;
            break;
        case MEMBYTES:
            if (!parse_ull(optarg, 1ull << 40, &v) || v == 0)
                goto bad;
            o->memory_max_bytes = v;
            break;
        case THREADS:
            if (!parse_ull(optarg, 256, &v))
                goto bad;
            o->threads = (long)v;
            break;
        case GRACE:
            if (!parse_ull(optarg, 3600000, &v))
                goto bad;
            o->grace_ms = (long)v;
            break;
        case KILLGRACE:
            if (!parse_ull(optarg, WS_EXEC_GRACE_MS_MAX, &v))
                goto bad;
            /* 0 on the command line means no grace (the config's 0 is
             * "default"). */
            o->kill_grace_ms = v ? (long)v : -1;
            break;
        case KEEPALIVE:
            if (!parse_ull(optarg, 3600000, &v) || (v && v < WS_RPC_KEEPALIVE_MS_MIN))
                goto bad;
            o->keepalive_ms = v ? (long)v : -1;
            break;
        case EXECPATH:
            if (!ws_services_exec_path_valid(optarg))
                goto bad;
            o->exec_path = optarg;
            break;
        case CONTAIN:
            if (strcmp(optarg, "auto") == 0)
                o->force_subreaper = false;
            else if (strcmp(optarg, "subreaper") == 0)
                o->force_subreaper = true;
            else
                goto bad;
            break;
        case TOKENS:
            o->tokens_file = optarg;
            break;
        case TLSCERT:
            o->tls_cert = optarg;
            break;
        case TLSKEY:
            o->tls_key = optarg;
            break;
        case TLSCA:
            o->tls_client_ca = optarg;
            break;
        case PLAINTEXT:
            o->allow_plaintext = true;
            break;
        case TENANTWS:
            if (!parse_ull(optarg, 1000000, &v))
                goto bad;
            o->tenant_max_workspaces = (unsigned long)v;
            break;
        case TENANTOPENS:
            if (!parse_ull(optarg, 1000000, &v))
                goto bad;
            o->tenant_opens_per_minute = (unsigned long)v;
            break;
        case TENANTCMDS:
            if (!parse_ull(optarg, 1000000, &v))
                goto bad;
            o->tenant_max_commands = (unsigned long)v;
            break;
        case TENANTBYTES:
            if (!parse_ull(optarg, 1ull << 50, &v))
                goto bad;
            o->tenant_max_bytes = v;
            break;
        case METRICS:
            o->metrics_listen = optarg;
            break;
        case METRICS_REMOTE:
            o->metrics_allow_remote = true;
            break;
        case MAXMSG:
            if (!parse_ull(optarg, MAX_MESSAGE_MAX, &v) || v < MAX_MESSAGE_MIN)
                goto bad;
            o->max_message_bytes = (long)v;
            break;
        case MAXSTREAMS:
            if (!parse_ull(optarg, WS_RPC_MAX_STREAMS_MAX, &v) || v == 0)
                goto bad;
            o->max_streams = (long)v;
            break;
        case MEMQUOTA:
            if (!parse_ull(optarg, 1ull << 40, &v) || v < WS_RPC_MEMORY_QUOTA_MIN)
                goto bad;
            o->memory_quota_bytes = (long long)v;
            break;
        case HELP:
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "workspaced: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->state_dir) {
        fprintf(stderr, "workspaced: --state-dir is required\n");
        return -1;
    }
    if (!o->tls_cert != !o->tls_key) {
        fprintf(stderr, "workspaced: --tls-cert and --tls-key go together\n");
        return -1;
    }
    if (o->tls_client_ca && !o->tls_cert) {
        fprintf(stderr, "workspaced: --tls-client-ca needs --tls-cert and --tls-key\n");
        return -1;
    }
    /* A workspace server reachable from other hosts without authentication
     * would hand a shell to anyone; one without TLS would hand the tokens
     * to anyone on the path, unless the operator says the network is
     * trusted. Loopback and unix sockets stay as they always were. */
    if (!listen_is_local(o->listen)) {
        if (!o->tokens_file && !o->tls_client_ca) {
            fprintf(stderr,
                    "workspaced: refusing to listen on '%s' without authentication: give "
                    "--tokens-file or --tls-client-ca (loopback addresses and unix: sockets "
                    "need none)\n",
                    o->listen);
            return -1;
        }
        if (!o->tls_cert && !o->allow_plaintext) {
            fprintf(stderr,
                    "workspaced: refusing to listen on '%s' in plaintext: give --tls-cert and "
                    "--tls-key, or --allow-plaintext\n",
                    o->listen);
            return -1;
        }
        if (!o->tls_cert)
            fprintf(stderr,
                    "workspaced: warning: serving '%s' in plaintext (--allow-plaintext): "
                    "tokens cross the network in the clear\n",
                    o->listen);
    }
    /* /metrics says how many workspaces and commands there are: no secret,
     * but not for the network unless asked for. */
    if (o->metrics_listen && !o->metrics_allow_remote &&
        !ws_metrics_http_addr_is_loopback(o->metrics_listen)) {
        fprintf(stderr,
                "workspaced: refusing to serve metrics on '%s': only loopback addresses "
                "(127.0.0.1, [::1], localhost) unless --metrics-allow-remote is given\n",
                o->metrics_listen);
        return -1;
    }
    return 0;
bad:
    fprintf(stderr, "workspaced: invalid value '%s'\n", optarg);
    return -1;
}

/* gRPC's teardown (grpc_shutdown) joins its executor threads, and one of
 * them can be inside a poll with seconds left on it (seen after keepalive
 * dropped a connection: ~10 s). The server's own state is already gone by
 * then, so the process does not wait for it past this. */
#define GRPC_TEARDOWN_WAIT_MS 1000

struct teardown {
    struct ws_rpc_server *server;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool done;
};

static void *teardown_main(void *arg)
{
    struct teardown *t = arg;

    ws_rpc_server_free(t->server);
    pthread_mutex_lock(&t->mu);
    t->done = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Frees the server on another thread; true when that finished within ms.
 * On false the thread still runs and the caller must _exit. */
static bool free_server_bounded(struct ws_rpc_server *s, int ms)
{
    static struct teardown t = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    struct timespec deadline;
    pthread_t th;
    bool done;

    t.server = s;
    if (pthread_create(&th, NULL, teardown_main, &t) != 0) {
        ws_rpc_server_free(s);
        return true;
    }
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&t.mu);
    while (!t.done && pthread_cond_timedwait(&t.cond, &t.mu, &deadline) == 0)
        ;
    done = t.done;
    pthread_mutex_unlock(&t.mu);
    if (done)
        pthread_join(th, NULL);
    return done;
}

/* A unix socket left behind by a server that died would make the bind
 * fail, and gRPC would silently take over the path of a live one. So: a
 * socket nobody answers on is removed; one a server answers on is
 * -EADDRINUSE. */
static int claim_unix_socket(const char *listen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *path = listen + 5;
    struct stat st;
    int fd, err = 0;

    if (strncmp(listen, "unix:", 5) != 0)
        return 0;
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        err = -EADDRINUSE;
    else if (errno == ECONNREFUSED && unlink(path) < 0)
        err = -errno;
    close(fd);
    return err;
}

/* This server's id (16 hex digits) from <state>/server-id, made on first
 * start: it names and labels the Docker containers of this state
 * directory's workspaces, so a restart finds what it left and two servers
 * on one daemon never touch each other's. */
static int load_server_id(const char *dir, char ret[17])
{
    char path[PATH_MAX], buf[17];
    ssize_t n = 0;
    int fd;

    if (snprintf(path, sizeof(path), "%s/server-id", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        n = read(fd, buf, 16);
        close(fd);
        if (n == 16) {
            buf[16] = '\0';
            if (strspn(buf, "0123456789abcdef") == 16) {
                memcpy(ret, buf, 17);
                return 0;
            }
        }
        return -EINVAL;
    }
    if (errno != ENOENT)
        return -errno;
    uint8_t rnd[8];
    if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
        return -EIO;
    for (int i = 0; i < 8; i++)
        snprintf(buf + 2 * i, 3, "%02x", rnd[i]);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    n = write(fd, buf, 16);
    if (n != 16 || fsync(fd) < 0) {
        close(fd);
        unlink(path);
        return -EIO;
    }
    close(fd);
    memcpy(ret, buf, 17);
    return 0;
}

static int make_state_dir(const char *dir)
{
    struct stat st;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (stat(dir, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    struct ws_registry *reg = NULL;
    struct ws_services *svc = NULL;
    struct ws_rpc_server *server = NULL;
    struct ws_metrics_http *metrics = NULL;
    sigset_t sigs;
    int port = 0, sig = 0, rc = 1, err;

    err = parse_args(argc, argv, &o);
    if (err != 0)
        return err > 0 ? 0 : 2;

    /* Signals are handled by this thread alone (sigwait below): block them
     * before any other thread exists so every thread inherits the mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    umask(077);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    err = make_state_dir(o.state_dir);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot create the state directory: %s",
                   strerror(-err));
        goto out;
    }
    struct ws_registry_config rc_cfg = {
        .state_dir = o.state_dir,
        .workspace_root = o.workspace_root,
        .max_workspaces = (unsigned)o.max_workspaces,
        .max_file_size = o.max_file_size,
        .memory_max_bytes = o.memory_max_bytes,
        .tenant_max_workspaces = (unsigned)o.tenant_max_workspaces,
        .tenant_opens_per_minute = (unsigned)o.tenant_opens_per_minute,
        .tenant_max_bytes = o.tenant_max_bytes,
    };
    err = ws_registry_new(&rc_cfg, &reg);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot open the state directory: %s",
                   strerror(-err < 4096 ? -err : EINVAL));
        goto out;
    }
    err = claim_unix_socket(o.listen);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot listen on '%s': %s", o.listen,
                   err == -EADDRINUSE ? "another server is listening there" : strerror(-err));
        goto out;
    }
    char sandbox_dir[PATH_MAX];
    if (snprintf(sandbox_dir, sizeof(sandbox_dir), "%s/sandbox", o.state_dir) >=
        (int)sizeof(sandbox_dir)) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "--state-dir is too long");
        goto out;
    }
    char server_id[17];
    err = load_server_id(o.state_dir, server_id);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed",
                   "cannot read or make <state>/server-id: %s", strerror(-err));
        goto out;
    }
    char audit_dir[PATH_MAX];
    if (snprintf(audit_dir, sizeof(audit_dir), "%s/audit", o.state_dir) >= (int)sizeof(audit_dir)) {
        fprintf(stderr, "workspaced: --state-dir is too long\n");
        goto out;
    }
    struct ws_services_config sc = {
        .kill_grace_ms = (int)o.kill_grace_ms,
        .force_subreaper = o.force_subreaper,
        .exec_path = o.exec_path,
        .sandbox_dir = sandbox_dir,
        .server_id = server_id,
        .audit_dir = audit_dir,
        .tenant_max_commands = (unsigned)o.tenant_max_commands,
    };
    err = ws_services_new(reg, &sc, &svc);
    if (err < 0)
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot start the exec layer: %s",
                   strerror(-err < 4096 ? -err : EINVAL));
    if (err < 0)
        goto out;
    struct ws_diag rd = {0};
    int removed = ws_services_reconcile(svc, &rd);
    if (removed > 0)
        ws_log_msg(WS_RPC_LOG_INFO, "server.reconciled",
                   "removed %d container(s) left by an earlier run", removed);
    else if (removed < 0)
        ws_log_msg(WS_RPC_LOG_ERROR, "server.reconcile_failed",
                   "containers left by an earlier run not checked: %s", rd.message);
    size_t n_methods;
    const struct ws_rpc_method *methods = ws_services_methods(svc, &n_methods);
    char why[512] = "";
    struct ws_rpc_config cfg = {
        .listen = o.listen,
        .threads = (int)o.threads,
        .keepalive_ms = (int)o.keepalive_ms,
        .tokens_file = o.tokens_file,
        .tls_cert = o.tls_cert,
        .tls_key = o.tls_key,
        .tls_client_ca = o.tls_client_ca,
        .why = why,
        .why_len = sizeof(why),
        .max_message_bytes = (int)o.max_message_bytes,
        .max_streams_per_connection = (int)o.max_streams,
        .memory_quota_bytes = o.memory_quota_bytes,
    };
    err = ws_rpc_server_new(&cfg, methods, n_methods, &server, &port);
    if (err < 0 && why[0]) {
        fprintf(stderr, "workspaced: %s\n", why);
        goto out;
    }
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot listen on '%s': %s", o.listen,
                   strerror(-err < 4096 ? -err : EINVAL));
        goto out;
    }
    err = ws_rpc_server_start(server);
    if (err < 0) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot start: %s",
                   strerror(-err < 4096 ? -err : EINVAL));
        goto out;
    }
    /* metrics: its own listener, started before the "listening" line so
     * whoever waits for that line finds the metrics address logged. */
    if (o.metrics_listen) {
        int mport = 0;
        err = ws_metrics_http_start(o.metrics_listen, &metrics, &mport);
        if (err < 0) {
            ws_log_msg(WS_RPC_LOG_ERROR, "server.start_failed", "cannot serve metrics on '%s': %s",
                       o.metrics_listen, strerror(-err));
            goto out;
        }
        char fields[32];
        snprintf(fields, sizeof(fields), "{\"port\":%d}", mport);
        ws_log_json(WS_RPC_LOG_INFO, "metrics.listen", fields);
    }
    if (strncmp(o.listen, "unix:", 5) == 0) {
        printf("workspaced listening on %s\n", o.listen);
    } else {
        const char *colon = strrchr(o.listen, ':');
        printf("workspaced listening on %.*s:%d\n", (int)(colon - o.listen), o.listen, port);
    }
    fflush(stdout);

    for (;;) {
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            /* A bad file keeps the old table; the RPC layer logs either way. */
            ws_rpc_server_reload_tokens(server, why, sizeof(why));
            continue;
        }
        break;
    }
    ws_log_msg(WS_RPC_LOG_INFO, "server.drain", "%s received, draining", strsignal(sig));
    ws_metrics_http_stop(metrics);
    metrics = NULL;
    ws_services_drain(svc);
    ws_rpc_server_shutdown(server, (int)o.grace_ms);
    /* No call is left: end every command and workspace now, then gRPC's
     * own teardown, which is not waited for past a bound. */
    ws_services_free(svc);
    svc = NULL;
    ws_registry_free(reg);
    reg = NULL;
    if (!free_server_bounded(server, GRPC_TEARDOWN_WAIT_MS)) {
        ws_log_msg(WS_RPC_LOG_ERROR, "server.teardown_slow",
                   "gRPC teardown still busy after %d ms; exiting", GRPC_TEARDOWN_WAIT_MS);
        fflush(NULL);
        _exit(0);
    }
    server = NULL;
    rc = 0;
out:
    ws_metrics_http_stop(metrics);
    ws_rpc_server_free(server);
    ws_services_free(svc);
    ws_registry_free(reg);
    curl_global_cleanup();
    return rc;
}
