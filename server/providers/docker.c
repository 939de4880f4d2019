#include "server/providers/docker.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "server/agent/client.h"
#include "server/agent/wire.h"
#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/time.h"
#include "server/docker/http.h"
#include "server/events/pump.h"
#include "server/providers/probe.h"
#include "server/work/pool.h"

/* Longest status line the relay writes ("signaled 64 core oom\n"). */
#define STATUS_MAX 64
/* "p_" and 16 hex digits: the init's handle for a command. */
#define HANDLE_LEN 18
/* Random bytes of an exit record's nonce, and its hex digits. */
#define NONCE_BYTES 16
#define NONCE_HEX   (2 * NONCE_BYTES)
/* The environment variable the init takes its nonce from. */
#define NONCE_ENV "WSINIT_NONCE"
/* What the init is exec'd as when it takes the identities: root, with the
 * container's few capabilities, only until it has split. */
#define ROOT_USER "0:0"
/* A uid or gid in decimal, with the NUL. */
#define ID_TEXT_MAX 12
/* The variable the agent takes its one-time secret from. */
#define SECRET_ENV "WSAGENT_SECRET"

/* What the runtime knows of one workspace's container. */
struct box {
    struct box *next;
    char workspace_id[WS_DOCKER_LABEL_ID_MAX + 1];
    char container_id[WS_DOCKER_ID_LEN + 1];
    /* The image's Config.Env names: removed from every exec's
     * environment. */
    char **image_env;
    /* Whom the container's commands run as. */
    struct ws_docker_identity id;
    /* The RLIMIT_NPROC every command gets from the init: the pids cap
     * under gVisor, whose guest the host's pids cgroup does not count (see
     * WS_DOCKER_RUNTIME_GVISOR); 0 elsewhere. */
    int64_t nproc;
    /* Agent mode: the container's agent; NULL: per-command. */
    struct ws_agent *agent;
    /* Under gVisor, which cannot take a host terminal as one: a command
     * with a terminal starts through `docker exec` even in agent mode. */
    bool gvisor;
    /* The agent was lost: the box is failed until a Resolve makes it
     * again (under rt->lock). */
    bool failed;
    char why[WS_AGENT_WHY_MAX];
    struct ws_docker_rt *rt;
};

struct ws_docker_rt {
    struct ws_pump *pump;
    struct ws_docker_http *http;
    char server_id[WS_DOCKER_LABEL_ID_MAX + 1];
    /* The relay's --host and TLS arguments: DOCKER_HOST as read at start. */
    char *host_arg;
    char *cert_path;
    bool tls;
    /* Where the agents' channel directories are made; NULL: no agent
     * mode. */
    char *channel_root;
    pthread_mutex_t lock;
    /* The pump that reads the agents' channels, made with the first. */
    struct ws_pump *agent_pump;
    bool have_version;
    struct ws_docker_api_version version;
    struct box *boxes;
    /* Containers a failed Open made (or may have made) and could not
     * remove then, the daemon gone: removed at the next attach or detach
     * that reaches it (under lock). */
    struct orphan *orphans;
    size_t n_orphans;
};

/* A container to remove once the daemon answers: its id, or its name
 * when the daemon may have made it without the answer reaching us (the
 * name of a workspace that no longer exists). */
struct orphan {
    struct orphan *next;
    char ref[WS_DOCKER_NAME_MAX + 1];
};

/* One command's relay and in-container handle. */
struct run {
    struct ws_docker_rt *rt;
    char container_id[WS_DOCKER_ID_LEN + 1];
    char handle[HANDLE_LEN + 1];
    /* The helper uid `signal` drops to; 0: none (no identities). */
    uid_t helper;
    char *argv[24];
    size_t argc;
    int status_fd;   /* ours: the relay's exit record */
    int child_fd[1]; /* the relay's end, given as fd 3 */
    bool killed;
};

/* ---- paths of our programs ---- */

const char *ws_docker_rt_init_path(void)
{
    static _Thread_local char found[PATH_MAX];

    return ws_probe_server_program(WS_DOCKER_INIT_ENV, WS_DOCKER_INIT_NAME, "progs", found,
                                   sizeof(found));
}

const char *ws_docker_rt_relay_path(void)
{
    static _Thread_local char found[PATH_MAX];

    return ws_probe_server_program(WS_DOCKER_RELAY_ENV, WS_DOCKER_RELAY_NAME, "progs", found,
                                   sizeof(found));
}

/* ---- life ---- */

int ws_docker_rt_new(const char *server_id, const char *channel_root, struct ws_docker_rt **ret)
{
    struct ws_docker_http_config cfg;
    struct ws_docker_rt *rt;
    const char *host = getenv("DOCKER_HOST");
    const char *certs = getenv("DOCKER_CERT_PATH");
    int err;

    if (!server_id || !*server_id || strlen(server_id) > WS_DOCKER_LABEL_ID_MAX)
        return -EINVAL;
    err = ws_docker_http_config_from_env(&cfg);
    if (err < 0)
        return -EINVAL;
    rt = calloc(1, sizeof(*rt));
    if (!rt)
        return -ENOMEM;
    snprintf(rt->server_id, sizeof(rt->server_id), "%s", server_id);
    rt->tls = cfg.tls;
    rt->host_arg = strdup(host && *host ? host : "unix://" WS_DOCKER_HTTP_DEFAULT_SOCKET);
    rt->cert_path = certs && *certs ? strdup(certs) : NULL;
    rt->channel_root = channel_root ? strdup(channel_root) : NULL;
    pthread_mutex_init(&rt->lock, NULL);
    if (!rt->host_arg || (channel_root && !rt->channel_root)) {
        err = -ENOMEM;
        goto fail;
    }
    err = ws_pump_new(&rt->pump);
    if (err < 0)
        goto fail;
    err = ws_docker_http_new(rt->pump, &cfg, &rt->http);
    if (err < 0)
        goto fail;
    *ret = rt;
    return 0;
fail:
    ws_docker_rt_free(rt);
    return err;
}

static void box_free(struct box *b)
{
    if (b) {
        /* The channel shut: the agent ends the container's commands. */
        ws_agent_free(b->agent);
        ws_docker_names_free(b->image_env);
        free(b);
    }
}

void ws_docker_rt_free(struct ws_docker_rt *rt)
{
    if (!rt)
        return;
    while (rt->boxes) {
        struct box *b = rt->boxes;
        rt->boxes = b->next;
        box_free(b);
    }
    while (rt->orphans) {
        struct orphan *o = rt->orphans;
        rt->orphans = o->next;
        free(o);
    }
    ws_pump_free(rt->agent_pump);
    ws_docker_http_free(rt->http);
    ws_pump_free(rt->pump);
    pthread_mutex_destroy(&rt->lock);
    free(rt->host_arg);
    free(rt->cert_path);
    free(rt->channel_root);
    free(rt);
}

/* ---- calls ---- */

static int remove_container(struct ws_docker_rt *rt, struct ws_docker_api_version v,
                            const char *ref, struct ws_diag *d);

/* Remembers a container to remove later; beyond WS_DOCKER_ORPHANS_MAX it
 * is left to the reconcile of the server's next start. */
static void orphan_add(struct ws_docker_rt *rt, const char *ref)
{
    struct orphan *o = calloc(1, sizeof(*o));

    if (!o)
        return;
    snprintf(o->ref, sizeof(o->ref), "%s", ref);
    pthread_mutex_lock(&rt->lock);
    if (rt->n_orphans >= WS_DOCKER_ORPHANS_MAX) {
        pthread_mutex_unlock(&rt->lock);
        free(o);
        return;
    }
    o->next = rt->orphans;
    rt->orphans = o;
    rt->n_orphans++;
    pthread_mutex_unlock(&rt->lock);
}

/* Removes the remembered containers now that the daemon answers; the
 * ones it still cannot remove are kept for the next time. */
static void orphans_sweep(struct ws_docker_rt *rt, struct ws_docker_api_version v)
{
    struct orphan *list, *keep = NULL;
    size_t kept = 0;

    pthread_mutex_lock(&rt->lock);
    list = rt->orphans;
    rt->orphans = NULL;
    rt->n_orphans = 0;
    pthread_mutex_unlock(&rt->lock);
    while (list) {
        struct orphan *o = list;
        struct ws_diag ignored = {0};
        list = o->next;
        if (remove_container(rt, v, o->ref, &ignored) == 0) {
            free(o);
            continue;
        }
        o->next = keep;
        keep = o;
        kept++;
    }
    if (!keep)
        return;
    pthread_mutex_lock(&rt->lock);
    for (struct orphan *o = keep;; o = o->next)
        if (!o->next) {
            o->next = rt->orphans;
            break;
        }
    rt->orphans = keep;
    rt->n_orphans += kept;
    pthread_mutex_unlock(&rt->lock);
}

/* Transport errors: the daemon is not there (now). */
static int unreachable(struct ws_diag *d, int err)
{
    ws_diag_set(d, "docker backend unavailable: the Docker daemon is not reachable (%s)",
                strerror(-err));
    ws_diag_meta(d, "transient", "true");
    if (d)
        d->transient = true;
    return -WS_EFAILED;
}

/* The daemon's message from an error body, for a diag. */
static void daemon_message(const char *body, size_t len, char *buf, size_t size)
{
    if (ws_docker_parse_error(body, len, buf, size) < 0)
        snprintf(buf, size, "no message");
}

/* One call to its end. 0 with the body (caller frees) and status, or a
 * transport error turned into -WS_EFAILED (transient). */
static int call(struct ws_docker_rt *rt, enum ws_docker_http_method method, const char *path,
                const char *body, long timeout_ms, char **ret_body, size_t *ret_len,
                long *ret_status, struct ws_diag *d)
{
    struct ws_docker_http_request req = {
        .method = method,
        .path = path,
        .body = body,
        .body_len = body ? strlen(body) : 0,
        .timeout_ms = timeout_ms ? timeout_ms : WS_DOCKER_CALL_TIMEOUT_MS,
    };
    int err = ws_docker_http_call_sync(rt->http, &req, ret_body, ret_len, ret_status,
                                       WS_DOCKER_RESPONSE_MAX);

    if (err == -ENOMEM)
        return err;
    if (err < 0)
        return unreachable(d, err);
    return 0;
}

/* The API version to speak, negotiated once per runtime from /version
 * (a failure is never remembered). */
static int version(struct ws_docker_rt *rt, struct ws_docker_api_version *ret, struct ws_diag *d)
{
    struct ws_docker_version dv;
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    int err;

    pthread_mutex_lock(&rt->lock);
    if (rt->have_version) {
        *ret = rt->version;
        pthread_mutex_unlock(&rt->lock);
        return 0;
    }
    pthread_mutex_unlock(&rt->lock);
    err = call(rt, WS_DOCKER_HTTP_GET, WS_DOCKER_PATH_VERSION, NULL, 0, &body, &len, &status, d);
    if (err < 0)
        return err;
    if (status != 200 || ws_docker_parse_version(body, len, &dv) < 0) {
        free(body);
        ws_diag_set(d, "the Docker daemon answered /version with HTTP %ld", status);
        return -WS_EFAILED;
    }
    free(body);
    if (ws_docker_negotiate(&dv, ret) < 0) {
        ws_diag_set(d, "the Docker daemon's API %u.%u is not supported (need %u.%u or newer)",
                    dv.api.major, dv.api.minor, WS_DOCKER_API_MIN_MAJOR, WS_DOCKER_API_MIN_MINOR);
        return -WS_EFAILED;
    }
    pthread_mutex_lock(&rt->lock);
    rt->version = *ret;
    rt->have_version = true;
    pthread_mutex_unlock(&rt->lock);
    return 0;
}

int ws_docker_rt_ping(struct ws_docker_rt *rt, char *api_version, size_t size, struct ws_diag *d)
{
    struct ws_docker_api_version v;
    char *body = NULL;
    long status = 0;
    int err =
        call(rt, WS_DOCKER_HTTP_GET, WS_DOCKER_PATH_PING, NULL, 5000, &body, NULL, &status, d);

    free(body);
    if (err < 0)
        return err;
    if (status != 200) {
        ws_diag_set(d, "the Docker daemon answered /_ping with HTTP %ld", status);
        return -WS_EFAILED;
    }
    err = version(rt, &v, d);
    if (err < 0)
        return err;
    snprintf(api_version, size, "%u.%u", v.major, v.minor);
    return 0;
}

/* ---- containers ---- */

static struct box *box_find_locked(struct ws_docker_rt *rt, const char *workspace_id)
{
    for (struct box *b = rt->boxes; b; b = b->next)
        if (!strcmp(b->workspace_id, workspace_id))
            return b;
    return NULL;
}

/* Replaces (or, with b NULL, drops) what is remembered of a workspace.
 * The old box is freed without the lock: freeing an agent waits for its
 * `lost`, which takes the lock. */
static void box_set(struct ws_docker_rt *rt, const char *workspace_id, struct box *b)
{
    struct box *old = NULL;

    pthread_mutex_lock(&rt->lock);
    for (struct box **p = &rt->boxes; *p; p = &(*p)->next)
        if (!strcmp((*p)->workspace_id, workspace_id)) {
            old = *p;
            *p = old->next;
            break;
        }
    if (b) {
        b->next = rt->boxes;
        rt->boxes = b;
    }
    pthread_mutex_unlock(&rt->lock);
    box_free(old);
}

/* The box's agent was lost (it died, the container went, or it broke the
 * protocol): failed until a Resolve makes the container again. */
static void box_lost(void *arg, const char *why)
{
    struct box *b = arg;

    pthread_mutex_lock(&b->rt->lock);
    b->failed = true;
    snprintf(b->why, sizeof(b->why), "%s", why);
    pthread_mutex_unlock(&b->rt->lock);
}

const char *ws_docker_rt_exec_mode(struct ws_docker_rt *rt, const char *workspace_id)
{
    pthread_mutex_lock(&rt->lock);
    struct box *b = box_find_locked(rt, workspace_id);
    const char *mode = !b ? NULL : b->agent ? "agent" : "per-command";
    pthread_mutex_unlock(&rt->lock);
    return mode;
}

bool ws_docker_rt_box_failed(struct ws_docker_rt *rt, const char *workspace_id, char *why,
                             size_t size)
{
    pthread_mutex_lock(&rt->lock);
    struct box *b = box_find_locked(rt, workspace_id);
    bool failed = b && b->failed;
    if (failed && why)
        snprintf(why, size, "%s", b->why);
    pthread_mutex_unlock(&rt->lock);
    return failed;
}

/* Whether the workspace's box runs a live agent (agent mode, and nothing
 * lost it since). */
static bool box_agent_alive(struct ws_docker_rt *rt, const char *workspace_id)
{
    pthread_mutex_lock(&rt->lock);
    struct box *b = box_find_locked(rt, workspace_id);
    bool alive = b && b->agent && !b->failed;
    pthread_mutex_unlock(&rt->lock);
    return alive;
}

/* DELETE ?force=true&v=true; a missing container is not an error. */
static int remove_container(struct ws_docker_rt *rt, struct ws_docker_api_version v,
                            const char *ref, struct ws_diag *d)
{
    char path[WS_DOCKER_PATH_MAX], msg[WS_DOCKER_MESSAGE_MAX];
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    int err;

    if (ws_docker_path_container(v, ref, WS_DOCKER_CONTAINER_REMOVE, path, sizeof(path)) < 0)
        return -EINVAL;
    err = call(rt, WS_DOCKER_HTTP_DELETE, path, NULL, 0, &body, &len, &status, d);
    if (err < 0)
        return err;
    if (status == 204 || status == 404) {
        free(body);
        return 0;
    }
    daemon_message(body, len, msg, sizeof(msg));
    free(body);
    /* 409 "removal already in progress": another remover has it. */
    if (status == 409 && strstr(msg, "in progress"))
        return 0;
    ws_diag_set(d, "the Docker daemon did not remove the container: %s", msg);
    return -WS_EFAILED;
}

/* ---- pulls ---- */

/* What a pull's progress stream said so far; on the pump thread while the
 * call runs, the caller's after. */
struct pull {
    /* The line being received; skipped when it outgrew the buffer. */
    char line[WS_DOCKER_PULL_LINE_MAX];
    size_t line_len;
    bool line_over;
    /* The stream's {"error": ...} (which wins), or the daemon's
     * {"message": ...} of a refusal, sanitized. */
    bool failed;
    bool have_message;
    char msg[WS_DOCKER_MESSAGE_MAX];
};

/* Takes what one line of the answer says. A pull reports progress as a
 * stream of JSON lines whose status is 200 once the stream has begun, so
 * a failure after that is an {"error": ...} line; a refusal before it is
 * a {"message": ...} body with its own status. */
static void pull_line(struct pull *p, const char *line, size_t len)
{
    json_t *doc, *e;

    if (p->failed || !memmem(line, len, "\"error\"", 7)) {
        if (!p->failed && !p->have_message &&
            ws_docker_parse_error(line, len, p->msg, sizeof(p->msg)) >= 0)
            p->have_message = true;
        return;
    }
    doc = json_loadb(line, len, 0, NULL);
    e = doc ? json_object_get(doc, "error") : NULL;
    if (json_is_string(e)) {
        snprintf(p->msg, sizeof(p->msg), "%s", json_string_value(e));
        for (char *c = p->msg; *c; c++)
            if ((unsigned char)*c < 0x20)
                *c = ' ';
        p->failed = true;
    }
    json_decref(doc);
}

/* on_body: cuts the stream into lines as it comes, so however long a pull
 * talks only one line is kept. */
static int pull_body(void *arg, const char *data, size_t len)
{
    struct pull *p = arg;

    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;

        if (!p->line_over && n <= sizeof(p->line) - p->line_len) {
            memcpy(p->line + p->line_len, data, n);
            p->line_len += n;
        } else {
            p->line_over = true;
        }
        if (nl) {
            if (!p->line_over)
                pull_line(p, p->line, p->line_len);
            p->line_len = 0;
            p->line_over = false;
            n++;
        }
        data += n;
        len -= n;
    }
    return 0;
}

/* How long a pull may take: the server's limit, or less when ctl's
 * deadline comes sooner (then *ret_caller is true); 0 when no time is
 * left for it. */
static long pull_budget_ms(const struct ws_work_ctl *ctl, bool *ret_caller)
{
    long budget = WS_DOCKER_PULL_TIMEOUT_MS;

    *ret_caller = false;
    if (ctl && ctl->deadline_mono_ms > 0) {
        int64_t left = ctl->deadline_mono_ms - ws_mono_ms() - WS_DOCKER_PULL_MARGIN_MS;

        if (left < budget) {
            budget = left > 0 ? (long)left : 0;
            *ret_caller = true;
        }
    }
    return budget;
}

/* POST /images/create for image, bounded as ws_docker_rt_attach says. */
static int pull(struct ws_docker_rt *rt, struct ws_docker_api_version v, const char *image,
                const struct ws_work_ctl *ctl, struct ws_diag *d)
{
    char path[WS_DOCKER_PATH_MAX];
    struct pull *p;
    bool caller;
    long budget = pull_budget_ms(ctl, &caller), status = 0;
    int64_t t0 = ws_mono_ms();
    int err = ws_work_ctl_check(ctl);

    if (ws_docker_path_image_pull(v, image, path, sizeof(path)) < 0)
        return -EINVAL;
    if (err == 0 && budget == 0)
        err = -ETIMEDOUT;
    if (err < 0) {
        ws_diag_set(d, "no time was left before the call's deadline to pull image %s", image);
        ws_diag_meta(d, "image", "%s", image);
        return err;
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    struct ws_docker_http_request req = {
        .method = WS_DOCKER_HTTP_POST,
        .path = path,
        .timeout_ms = budget,
        .on_body = pull_body,
        .arg = p,
    };
    err = ws_docker_http_call_ctl(rt->http, &req, ctl, &status);
    /* The stream's last line need not end with a newline. */
    if (!p->line_over && p->line_len > 0)
        pull_line(p, p->line, p->line_len);
    /* curl's own timer ends the pull at the budget, a little before ctl's
     * deadline: that is how a caller's deadline usually shows. A timeout
     * sooner than the budget is the connect's (the daemon is not there). */
    if (err == -ETIMEDOUT && ws_mono_ms() - t0 >= budget) {
        if (caller) {
            ws_diag_set(d, "pulling image %s did not finish before the call's deadline", image);
            ws_diag_meta(d, "timeout_ms", "%ld", budget);
        } else {
            ws_diag_set(d, "pulling image %s did not finish within the server's limit of %ld ms",
                        image, budget);
            ws_diag_meta(d, "limit_ms", "%ld", budget);
        }
        ws_diag_meta(d, "image", "%s", image);
    } else if (err == -ECANCELED && ws_work_ctl_check(ctl) < 0) {
        ws_diag_set(d, "the call was cancelled while image %s was being pulled", image);
    } else if (err < 0 && err != -ENOMEM) {
        err = unreachable(d, err);
    } else if (err == 0 && (status != 200 || p->failed)) {
        ws_diag_set(d, "pulling image %s failed: %s", image,
                    p->failed || p->have_message ? p->msg : "no message");
        ws_diag_meta(d, "image", "%s", image);
        err = -WS_EFAILED;
    }
    free(p);
    return err;
}

/* The image present (pulled if cfg's pull policy allows, within ctl), its
 * VOLUMEs refused, its environment's names in *ret_env. */
static int ensure_image(struct ws_docker_rt *rt, struct ws_docker_api_version v,
                        const Workspace__V1__DockerConfig *cfg, const struct ws_work_ctl *ctl,
                        char ***ret_env, struct ws_diag *d)
{
    char path[WS_DOCKER_PATH_MAX], msg[WS_DOCKER_MESSAGE_MAX];
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    bool volumes = false;
    int err;

    if (ws_docker_path_image_inspect(v, cfg->image, path, sizeof(path)) < 0)
        return -EINVAL;
    err = call(rt, WS_DOCKER_HTTP_GET, path, NULL, 0, &body, &len, &status, d);
    if (err < 0)
        return err;
    if (status == 404) {
        free(body);
        body = NULL;
        if (cfg->pull_policy == WORKSPACE__V1__PULL_POLICY__PULL_NEVER) {
            ws_diag_set(d, "image %s is not present and pull_policy is never", cfg->image);
            ws_diag_meta(d, "image", "%s", cfg->image);
            return -WS_EFAILED;
        }
        err = pull(rt, v, cfg->image, ctl, d);
        if (err < 0)
            return err;
        err = call(rt, WS_DOCKER_HTTP_GET, path, NULL, 0, &body, &len, &status, d);
        if (err < 0)
            return err;
    }
    if (status != 200) {
        daemon_message(body, len, msg, sizeof(msg));
        free(body);
        ws_diag_set(d, "inspecting image %s failed: %s", cfg->image, msg);
        return -WS_EFAILED;
    }
    err = ws_docker_parse_image_volumes(body, len, &volumes);
    if (err == 0 && volumes) {
        free(body);
        ws_diag_set(d,
                    "image %s declares VOLUMEs, which would be writable outside the "
                    "workspace and its limits: refused",
                    cfg->image);
        ws_diag_meta(d, "image", "%s", cfg->image);
        return -WS_EFAILED;
    }
    if (err == 0)
        err = ws_docker_parse_image_env_names(body, len, ret_env);
    free(body);
    if (err < 0) {
        ws_diag_set(d, "the Docker daemon's image document is not understood");
        return err == -ENOMEM ? err : -WS_EFAILED;
    }
    return 0;
}

/* What the container of a workspace with identities is given back after
 * CapDrop ALL: enough for the init, exec'd as root, to take the command's
 * uid and gid and to signal the command from the helper's. */
static const char *const identity_caps[] = {"KILL", "SETGID", "SETUID", NULL};

/* Neither the command nor the helper is root, and the helper is neither
 * the command's uid nor its gid (one uid for both would let the command
 * signal and trace the init). */
static bool identity_valid(const struct ws_docker_identity *id)
{
    if (id->uid == 0)
        return true;
    return id->gid != 0 && id->helper != 0 && id->helper != id->uid &&
           (gid_t)id->helper != id->gid && id->uid != (uid_t)-1 && id->gid != (gid_t)-1 &&
           id->helper != (uid_t)-1;
}

/* Writes dir/name with `text` unless it holds it already (0644, through a
 * temporary file and a rename: a container being created never sees half
 * a file). */
static int write_account_file(const char *dir, const char *name, const char *text, char *path,
                              size_t size)
{
    char tmp[PATH_MAX], have[512];
    size_t len = strlen(text);
    ssize_t n;
    int fd, err = 0;

    if (snprintf(path, size, "%s/%s", dir, name) >= (int)size ||
        snprintf(tmp, sizeof(tmp), "%s/.%s.%ld", dir, name, (long)getpid()) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        n = ws_read_all(fd, have, sizeof(have));
        close(fd);
        if (n == (ssize_t)len && memcmp(have, text, len) == 0)
            return 0;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    err = fchmod(fd, 0644) < 0 ? -errno : ws_write_all(fd, text, len);
    close(fd);
    if (err == 0 && rename(tmp, path) < 0)
        err = -errno;
    if (err < 0)
        (void)unlink(tmp);
    return err;
}

/* The container's /etc/passwd and /etc/group for id (ws_docker_identity):
 * their host paths, or "" when it has no accounts_dir. */
static int account_files(const struct ws_docker_identity *id, char *passwd, char *group,
                         size_t size)
{
    char text[512], name[32];
    int err;

    passwd[0] = group[0] = '\0';
    if (!id->accounts_dir || id->uid == 0)
        return 0;
    if (mkdir(id->accounts_dir, 0755) < 0 && errno != EEXIST)
        return -errno;
    snprintf(text, sizeof(text),
             "root:x:0:0:root:/root:/bin/sh\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
             "workspace:x:%u:%u:workspace:" WS_DOCKER_WORKDIR ":/bin/sh\n",
             (unsigned)id->uid, (unsigned)id->gid);
    snprintf(name, sizeof(name), "%u.passwd", (unsigned)id->uid);
    err = write_account_file(id->accounts_dir, name, text, passwd, size);
    if (err < 0)
        return err;
    snprintf(text, sizeof(text), "root:x:0:\nnogroup:x:65534:\nworkspace:x:%u:\n",
             (unsigned)id->gid);
    snprintf(name, sizeof(name), "%u.group", (unsigned)id->uid);
    return write_account_file(id->accounts_dir, name, text, group, size);
}

/* ---- the agent's channel ---- */

/* A container's channel while it is being made: the listening socket in
 * the workspace's channel directory, which the container sees read-only
 * at WS_DOCKER_CHANNEL_TARGET, and the secret its agent must present. */
struct channel {
    char dir[PATH_MAX];
    int dir_fd;
    int listen_fd;
    char secret[WS_WIRE_SECRET_HEX + 1];
    char secret_env[sizeof(SECRET_ENV "=") + WS_WIRE_SECRET_HEX];
};

static void channel_close(struct channel *ch)
{
    if (ch->dir_fd >= 0)
        (void)unlinkat(ch->dir_fd, WS_DOCKER_CHANNEL_SOCKET, 0);
    ws_close_fd(&ch->listen_fd);
    ws_close_fd(&ch->dir_fd);
    explicit_bzero(ch->secret, sizeof(ch->secret));
    explicit_bzero(ch->secret_env, sizeof(ch->secret_env));
}

/* Lowercase hex of n bytes into out (2n + 1 bytes). */
static void hex(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Makes <channel root>/<workspace id> (0700, owned by whom the agent runs
 * as, so that no command's uid can even look in) with a listening socket
 * in it (0600, the same owner), and a fresh secret. The socket is bound
 * through /proc/self/fd: the directory's path may be longer than a
 * socket address takes. */
static int channel_open(struct ws_docker_rt *rt, const char *workspace_id, uid_t owner, gid_t group,
                        struct channel *ch, struct ws_diag *d)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    uint8_t rnd[WS_WIRE_SECRET_HEX / 2];
    int err;

    *ch = (struct channel){.dir_fd = -1, .listen_fd = -1};
    if (!rt->channel_root) {
        ws_diag_set(d, "agent mode is not available: the server has no directory for the "
                       "agents' channels");
        return -WS_EFAILED;
    }
    if (snprintf(ch->dir, sizeof(ch->dir), "%s/%s", rt->channel_root, workspace_id) >=
        (int)sizeof(ch->dir))
        return -ENAMETOOLONG;
    if ((mkdir(rt->channel_root, 0711) < 0 && errno != EEXIST) ||
        (mkdir(ch->dir, 0700) < 0 && errno != EEXIST))
        goto sys;
    ch->dir_fd = open(ch->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ch->dir_fd < 0 || fchmod(ch->dir_fd, 0700) < 0 ||
        ((owner != geteuid() || group != getegid()) && fchown(ch->dir_fd, owner, group) < 0))
        goto sys;
    if (unlinkat(ch->dir_fd, WS_DOCKER_CHANNEL_SOCKET, 0) < 0 && errno != ENOENT)
        goto sys;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", ch->dir_fd,
             WS_DOCKER_CHANNEL_SOCKET);
    ch->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (ch->listen_fd < 0 || bind(ch->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        fchmodat(ch->dir_fd, WS_DOCKER_CHANNEL_SOCKET, 0600, 0) < 0 ||
        ((owner != geteuid() || group != getegid()) &&
         fchownat(ch->dir_fd, WS_DOCKER_CHANNEL_SOCKET, owner, group, AT_SYMLINK_NOFOLLOW) < 0) ||
        listen(ch->listen_fd, 1) < 0)
        goto sys;
    if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
        goto sys;
    hex(rnd, sizeof(rnd), ch->secret);
    explicit_bzero(rnd, sizeof(rnd));
    snprintf(ch->secret_env, sizeof(ch->secret_env), "%s=%s", SECRET_ENV, ch->secret);
    return 0;
sys:
    err = -errno;
    ws_diag_set(d, "the agent's channel cannot be made in %s: %s", ch->dir, strerror(-err));
    channel_close(ch);
    return -WS_EFAILED;
}

/* Removes a workspace's channel directory (empty once its socket went). */
static void channel_remove(struct ws_docker_rt *rt, const char *workspace_id)
{
    char dir[PATH_MAX];

    if (rt->channel_root &&
        snprintf(dir, sizeof(dir), "%s/%s", rt->channel_root, workspace_id) < (int)sizeof(dir)) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            (void)unlinkat(fd, WS_DOCKER_CHANNEL_SOCKET, 0);
            close(fd);
        }
        (void)rmdir(dir);
    }
}

/* Takes the one connection the agent makes (within WS_AGENT_HELLO_MS),
 * then removes the socket: nothing can connect after it. Returns the
 * connection, or -WS_EFAILED with d set. */
static int channel_accept(struct channel *ch, struct ws_diag *d)
{
    struct pollfd p = {.fd = ch->listen_fd, .events = POLLIN};
    int64_t end = ws_mono_ms() + WS_AGENT_HELLO_MS;
    int fd = -1;

    for (;;) {
        int64_t left = end - ws_mono_ms();
        int n = poll(&p, 1, left > 0 ? (int)left : 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        fd = accept4(ch->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0 || (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED))
            break;
    }
    (void)unlinkat(ch->dir_fd, WS_DOCKER_CHANNEL_SOCKET, 0);
    ws_close_fd(&ch->listen_fd);
    if (fd < 0)
        ws_diag_set(d, "the container's agent did not connect within %d ms",
                    (int)WS_AGENT_HELLO_MS);
    return fd < 0 ? -WS_EFAILED : fd;
}

/* A workspace's container as asked for, with the strings its spec points
 * at: filled in place and never copied. */
struct container {
    struct ws_docker_container_spec spec;
    char user[WS_DOCKER_USER_MAX];
    char tmp_user[WS_DOCKER_USER_MAX];
    char helper[ID_TEXT_MAX];
    char passwd[PATH_MAX];
    char group[PATH_MAX];
    /* The container's main process: our init, which the image need not
     * provide anything for, or the agent; with identities it becomes the
     * helper. */
    const char *keepalive[WS_DOCKER_KEEPALIVE_ARGS_MAX];
    const char *env[2];
};

/* HostConfig.PidsLimit for a container whose commands may have `pids`
 * processes: that, but under gVisor the host budget for its sandbox (see
 * WS_DOCKER_RUNTIME_GVISOR), the cap itself being the commands'
 * RLIMIT_NPROC. */
static int64_t host_pids_limit(int64_t pids, bool gvisor)
{
    int64_t budget = pids * WS_DOCKER_GVISOR_HOST_TASKS_PER_PID + WS_DOCKER_GVISOR_HOST_TASKS_BASE;

    if (!gvisor)
        return pids;
    return budget < WS_DOCKER_PIDS_MAX ? budget : WS_DOCKER_PIDS_MAX;
}

static bool runtime_is_gvisor(const Workspace__V1__DockerConfig *cfg)
{
    return cfg->runtime && !strcmp(cfg->runtime, WS_DOCKER_RUNTIME_GVISOR);
}

/* ch: agent mode, with this channel; NULL: per-command. */
static int container_fill(const char *server_id, const char *workspace_id, const char *dir,
                          const Workspace__V1__DockerConfig *cfg,
                          const struct ws_docker_identity *id, const char *init_path,
                          const struct channel *ch, struct container *ret)
{
    bool split = id->uid != 0;
    size_t n = 0;

    if (ch) {
        ret->keepalive[n++] = WS_DOCKER_AGENT_TARGET;
        ret->keepalive[n++] = "--init";
        ret->keepalive[n++] = WS_DOCKER_INIT_TARGET;
        ret->keepalive[n++] = "--connect";
        ret->keepalive[n++] = WS_DOCKER_CHANNEL_TARGET "/" WS_DOCKER_CHANNEL_SOCKET;
        ret->env[0] = ch->secret_env;
        ret->env[1] = NULL;
    } else {
        ret->keepalive[n++] = WS_DOCKER_INIT_TARGET;
        ret->keepalive[n++] = "keepalive";
    }
    ret->keepalive[n] = NULL;
    if (split) {
        /* Root only for the init's split: Docker gives an exec as root the
         * container's capabilities only when the container's user is root
         * too. */
        snprintf(ret->user, sizeof(ret->user), "%s", ROOT_USER);
        if (ws_docker_user_format(id->uid, id->gid, ret->tmp_user, sizeof(ret->tmp_user)) < 0)
            return -EINVAL;
        snprintf(ret->helper, sizeof(ret->helper), "%u", (unsigned)id->helper);
        ret->keepalive[n++] = "--helper";
        ret->keepalive[n++] = ret->helper;
        ret->keepalive[n] = NULL;
    } else if (cfg->user && cfg->user[0]) {
        snprintf(ret->user, sizeof(ret->user), "%s", cfg->user);
    } else if (ws_docker_user_format(getuid(), getgid(), ret->user, sizeof(ret->user)) < 0) {
        return -EINVAL;
    }
    ret->spec = (struct ws_docker_container_spec){
        .image = cfg->image,
        .workspace_dir = dir,
        .user = ret->user,
        .server_id = server_id,
        .workspace_id = workspace_id,
        .network_allow = cfg->network == WORKSPACE__V1__NETWORK__NETWORK_ALLOW,
        .memory_bytes = (int64_t)cfg->memory_mb << 20,
        .nano_cpus = cfg->cpus > 0 ? (int64_t)(cfg->cpus * 1e9 + 0.5) : 0,
        .pids_limit = host_pids_limit(cfg->pids_limit ? cfg->pids_limit : WS_DOCKER_PIDS_DEFAULT,
                                      runtime_is_gvisor(cfg)),
        .init_path = init_path,
        .keepalive = ret->keepalive,
        .cap_add = split ? identity_caps : NULL,
        .runtime = cfg->runtime && cfg->runtime[0] ? cfg->runtime : NULL,
        .tmp_user = split ? ret->tmp_user : NULL,
        /* No process of the container stays root: Docker's init would,
         * as the container's user. The agent reaps as pid 1 too. */
        .keepalive_is_pid1 = split || ch,
        .agent_path = ch ? ws_probe_agent_path() : NULL,
        .channel_dir = ch ? ch->dir : NULL,
        .env = ch ? ret->env : NULL,
    };
    if (ch && !ret->spec.agent_path)
        return -ENOENT;
    if (split) {
        int err = account_files(id, ret->passwd, ret->group, sizeof(ret->passwd));

        if (err < 0)
            return err;
        if (ret->passwd[0]) {
            ret->spec.passwd_path = ret->passwd;
            ret->spec.group_path = ret->group;
        }
    }
    return 0;
}

/* Whether a runtime's registered arguments (Runtimes.NAME.runtimeArgs of
 * /info) take the network away: runsc's --network=none, which gVisor needs
 * where the daemon runs in the host's network namespace, leaves a
 * container nothing but loopback whatever its NetworkMode says. Go's flag
 * syntax: one or two dashes, the value after '=' or as the next word. */
static bool runtime_args_deny_network(json_t *args)
{
    size_t i;
    json_t *arg;

    json_array_foreach(args, i, arg)
    {
        const char *a = json_string_value(arg);

        if (!a)
            continue;
        a += a[0] == '-' && a[1] == '-' ? 2 : a[0] == '-' ? 1 : 0;
        if (!strcmp(a, "network=none"))
            return true;
        if (!strcmp(a, "network") && json_is_string(json_array_get(args, i + 1)) &&
            !strcmp(json_string_value(json_array_get(args, i + 1)), "none"))
            return true;
    }
    return false;
}

/* Whether a runtime's registered arguments let the container connect to a
 * host unix socket bound into it: runsc's --host-uds=open (or all), which
 * the agent's channel needs under gVisor. */
static bool runtime_args_allow_host_uds(json_t *args)
{
    size_t i;
    json_t *arg;

    json_array_foreach(args, i, arg)
    {
        const char *a = json_string_value(arg);
        const char *next = json_string_value(json_array_get(args, i + 1));

        if (!a)
            continue;
        a += a[0] == '-' && a[1] == '-' ? 2 : a[0] == '-' ? 1 : 0;
        if (!strcmp(a, "host-uds=open") || !strcmp(a, "host-uds=all") ||
            !strcmp(a, "fsgofer-host-uds") || !strcmp(a, "fsgofer-host-uds=true"))
            return true;
        if (!strcmp(a, "host-uds") && next && (!strcmp(next, "open") || !strcmp(next, "all")))
            return true;
    }
    return false;
}

/* The daemon has the OCI runtime `name` registered (GET /info, Runtimes),
 * and, when the container is to have a network, registered without
 * arguments that take it away: 0, or -WS_EFAILED with d naming it. Asked
 * before every create under a named runtime, so that its absence is said
 * as such and a workspace is never made again under a weaker one, nor
 * made without the network it asked for. With `agent`, gVisor must also
 * let the agent reach its channel (runtime_args_allow_host_uds): else
 * -EOPNOTSUPP, d saying so. */
static int runtime_check(struct ws_docker_rt *rt, struct ws_docker_api_version v, const char *name,
                         bool network_allow, bool agent, struct ws_diag *d)
{
    char path[WS_DOCKER_PATH_MAX];
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    json_t *info = NULL, *runtimes;
    json_t *entry;
    bool have, no_network, host_uds;
    int err;

    snprintf(path, sizeof(path), "/v%u.%u/info", v.major, v.minor);
    err = call(rt, WS_DOCKER_HTTP_GET, path, NULL, 0, &body, &len, &status, d);
    if (err < 0)
        return err;
    if (status == 200 && len <= WS_DOCKER_RESPONSE_MAX)
        info = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    free(body);
    runtimes = json_object_get(info, "Runtimes");
    if (!json_is_object(runtimes)) {
        json_decref(info);
        ws_diag_set(d, "the Docker daemon did not say which runtimes it has (/info: HTTP %ld)",
                    status);
        return -WS_EFAILED;
    }
    entry = json_object_get(runtimes, name);
    have = json_is_object(entry);
    no_network = have && runtime_args_deny_network(json_object_get(entry, "runtimeArgs"));
    host_uds = have && runtime_args_allow_host_uds(json_object_get(entry, "runtimeArgs"));
    json_decref(info);
    if (!have) {
        ws_diag_set(d,
                    "docker runtime %s is not available on this server: the Docker daemon has "
                    "no runtime of that name registered",
                    name);
        ws_diag_meta(d, "runtime", "%s", name);
        ws_diag_meta(d, "transient", "false");
        return -WS_EFAILED;
    }
    if (network_allow && no_network) {
        ws_diag_set(d,
                    "docker runtime %s cannot give the container a network: the Docker daemon "
                    "registers it with --network=none",
                    name);
        ws_diag_meta(d, "runtime", "%s", name);
        ws_diag_meta(d, "field", "network");
        ws_diag_meta(d, "transient", "false");
        return -WS_EFAILED;
    }
    if (agent && !strcmp(name, WS_DOCKER_RUNTIME_GVISOR) && !host_uds) {
        ws_diag_set(d,
                    "docker runtime %s cannot run the in-box agent: the Docker daemon registers "
                    "it without --host-uds=open, so the agent could not reach the server (ask "
                    "exec_mode PER_COMMAND, or register the runtime with --host-uds=open)",
                    name);
        ws_diag_meta(d, "runtime", "%s", name);
        ws_diag_meta(d, "field", "exec_mode");
        ws_diag_meta(d, "transient", "false");
        return -EOPNOTSUPP;
    }
    return 0;
}

int ws_docker_rt_runtime_usable(struct ws_docker_rt *rt, const char *name, struct ws_diag *d)
{
    struct ws_docker_api_version v;
    int err = version(rt, &v, d);

    return err < 0 ? err : runtime_check(rt, v, name, false, false, d);
}

/* GET /containers/{ref}/json into hardening and state; 404: -ENOENT. */
static int inspect(struct ws_docker_rt *rt, struct ws_docker_api_version v, const char *ref,
                   struct ws_docker_hardening *ret_h, struct ws_docker_state *ret_s, char *ret_id,
                   struct ws_diag *d)
{
    char path[WS_DOCKER_PATH_MAX], msg[WS_DOCKER_MESSAGE_MAX];
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    int err;

    if (ws_docker_path_container(v, ref, WS_DOCKER_CONTAINER_INSPECT, path, sizeof(path)) < 0)
        return -EINVAL;
    err = call(rt, WS_DOCKER_HTTP_GET, path, NULL, 0, &body, &len, &status, d);
    if (err < 0)
        return err;
    if (status == 404) {
        free(body);
        return -ENOENT;
    }
    if (status != 200) {
        daemon_message(body, len, msg, sizeof(msg));
        free(body);
        ws_diag_set(d, "inspecting the container failed: %s", msg);
        return -WS_EFAILED;
    }
    err = ws_docker_parse_hardening(body, len, ret_h);
    if (err == 0)
        err = ws_docker_parse_state(body, len, ret_s);
    if (err == 0 && ret_id) {
        struct ws_docker_created c;
        /* The inspect document carries "Id" like a create's answer. */
        err = ws_docker_parse_created(body, len, &c);
        if (err == 0)
            memcpy(ret_id, c.id, sizeof(c.id));
    }
    free(body);
    if (err < 0) {
        ws_diag_set(d, "the Docker daemon's container document is not understood");
        return err == -ENOMEM ? err : -WS_EFAILED;
    }
    return 0;
}

bool ws_docker_agent_mode(const Workspace__V1__DockerConfig *cfg)
{
    if (!cfg)
        return false;
    if (cfg->exec_mode == WORKSPACE__V1__EXEC_MODE__EXEC_MODE_AGENT)
        return true;
    /* The default: agent mode, but a docker.user's commands could not
     * enter /workspace as themselves (see docker_check). */
    return cfg->exec_mode == WORKSPACE__V1__EXEC_MODE__EXEC_MODE_DEFAULT &&
           !(cfg->user && cfg->user[0]);
}

/* Takes the agent's connection and HELLO: b runs its commands through
 * it from now on. */
static int agent_connect(struct ws_docker_rt *rt, struct box *b, struct channel *ch,
                         struct ws_diag *d)
{
    char why[WS_AGENT_WHY_MAX] = "";
    int err = 0, fd;

    pthread_mutex_lock(&rt->lock);
    if (!rt->agent_pump)
        err = ws_pump_new(&rt->agent_pump);
    struct ws_pump *pump = rt->agent_pump;
    pthread_mutex_unlock(&rt->lock);
    if (err < 0)
        return err;
    fd = channel_accept(ch, d);
    if (fd < 0)
        return fd;
    struct ws_agent_config cfg = {
        .pump = pump,
        .fd = fd,
        .secret = ch->secret,
        .lost = box_lost,
        .arg = b,
    };
    err = ws_agent_new(&cfg, &b->agent, why, sizeof(why));
    if (err < 0) {
        ws_diag_set(d, "the container's agent did not come up: %s", why);
        return err == -ENOMEM ? err : -WS_EFAILED;
    }
    return 0;
}

int ws_docker_rt_attach(struct ws_docker_rt *rt, const char *workspace_id, const char *dir,
                        const Workspace__V1__DockerConfig *cfg,
                        const struct ws_docker_identity *ident, bool fresh,
                        const struct ws_work_ctl *ctl, struct ws_diag *d)
{
    struct container c;
    const struct ws_docker_container_spec *spec = &c.spec;
    struct ws_docker_api_version v;
    struct ws_docker_hardening h;
    struct ws_docker_state st;
    struct ws_docker_created created;
    char name[WS_DOCKER_NAME_MAX + 1], path[WS_DOCKER_PATH_MAX], msg[WS_DOCKER_MESSAGE_MAX];
    char id[WS_DOCKER_ID_LEN + 1] = "";
    const char *init = ws_docker_rt_init_path();
    char *json = NULL, *body = NULL;
    size_t len = 0;
    long status = 0;
    struct box *b = NULL;
    bool made = false, create_lost = false, agent = ws_docker_agent_mode(cfg);
    const bool asked = cfg->exec_mode == WORKSPACE__V1__EXEC_MODE__EXEC_MODE_AGENT;
    struct channel ch = {.dir_fd = -1, .listen_fd = -1};
    int err;

    /* The default falls back to per-command where agent mode cannot run
     * (Describe says which it got); AGENT asked for is refused instead. */
    if (agent && !asked && (!ws_probe_agent_path() || !rt->channel_root))
        agent = false;
    if (!init || !ws_docker_rt_relay_path()) {
        ws_diag_set(d, "docker backend unavailable: the %s program is missing",
                    init ? WS_DOCKER_RELAY_NAME : WS_DOCKER_INIT_NAME);
        return -WS_EFAILED;
    }
    if (rt->tls) {
        /* The relay speaks to the daemon in the clear only: refuse rather
         * than open a workspace whose commands could not run. */
        ws_diag_set(d, "docker backend unavailable: commands cannot be run through a TLS "
                       "daemon (DOCKER_TLS_VERIFY) yet");
        return -WS_EFAILED;
    }
    if (agent && !ws_probe_agent_path()) {
        ws_diag_set(d,
                    "docker backend unavailable in agent mode: the in-box agent (%s) is "
                    "missing",
                    WS_AGENT_NAME);
        return -WS_EFAILED;
    }
    if (agent && !rt->channel_root) {
        ws_diag_set(d, "agent mode is not available: the server has no directory for the "
                       "agents' channels");
        return -WS_EFAILED;
    }
    if (!identity_valid(ident))
        return -EINVAL;
    err = ws_docker_container_name(rt->server_id, workspace_id, name, sizeof(name));
    if (err < 0)
        return -EINVAL;
    err = version(rt, &v, d);
    if (err < 0)
        return err;
    orphans_sweep(rt, v);
    if (agent && !asked && runtime_is_gvisor(cfg)) {
        struct ws_diag ignored = {0};
        if (runtime_check(rt, v, cfg->runtime, false, true, &ignored) == -EOPNOTSUPP)
            agent = false;
    }
    /* The channel's directory is named now; its socket and secret are
     * made only for a container that is to be created. */
    if (agent && snprintf(ch.dir, sizeof(ch.dir), "%s/%s", rt->channel_root, workspace_id) >=
                     (int)sizeof(ch.dir))
        return -ENAMETOOLONG;
    err =
        container_fill(rt->server_id, workspace_id, dir, cfg, ident, init, agent ? &ch : NULL, &c);
    if (err < 0)
        return err;

    b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    snprintf(b->workspace_id, sizeof(b->workspace_id), "%s", workspace_id);
    b->id = *ident;
    b->rt = rt;
    b->gvisor = runtime_is_gvisor(cfg);
    if (b->gvisor)
        b->nproc = cfg->pids_limit ? cfg->pids_limit : WS_DOCKER_PIDS_DEFAULT;
    err = ensure_image(rt, v, cfg, ctl, &b->image_env, d);
    if (err < 0)
        goto out;
    /* A pull may have outlasted the caller's wish for a workspace: then
     * no container is made that nobody would use. */
    err = ws_work_ctl_check(ctl);
    if (err < 0) {
        ws_diag_set(d, err == -ETIMEDOUT ? "the call's deadline passed before the container "
                                           "was made"
                                         : "the call was cancelled before the container was "
                                           "made");
        goto out;
    }

    if (!fresh) {
        /* Keep a container that runs and reads back right; in agent mode,
         * one whose agent is still ours. */
        err = inspect(rt, v, name, &h, &st, id, d);
        if (err == 0 && st.running && !ws_docker_hardening_mismatch(&h, spec) && agent &&
            box_agent_alive(rt, workspace_id)) {
            err = 0;
            goto out;
        }
        if (err == 0 && st.running && !ws_docker_hardening_mismatch(&h, spec) && !agent) {
            memcpy(b->container_id, id, sizeof(id));
            box_set(rt, workspace_id, b);
            return 0;
        }
        if (err < 0 && err != -ENOENT)
            goto out;
    }
    if (spec->runtime) {
        err = runtime_check(rt, v, spec->runtime, spec->network_allow, agent, d);
        if (err == -EOPNOTSUPP)
            err = -WS_EFAILED;
        if (err < 0)
            goto out;
    }
    if (agent) {
        err = channel_open(rt, workspace_id, ident->uid ? ident->helper : geteuid(),
                           ident->uid ? (gid_t)ident->helper : getegid(), &ch, d);
        if (err < 0)
            goto out;
    }
    if (!fresh) {
        err = remove_container(rt, v, name, d);
        if (err < 0)
            goto out;
    }
    err = ws_docker_create_body(spec, &json);
    if (err < 0) {
        ws_diag_set(d, "the container's configuration is not valid");
        err = err == -ENOMEM ? err : -WS_EFAILED;
        goto out;
    }
    if (ws_docker_path_create(v, name, path, sizeof(path)) < 0) {
        err = -EINVAL;
        goto out;
    }
    err = call(rt, WS_DOCKER_HTTP_POST, path, json, 0, &body, &len, &status, d);
    if (err == 0 && status == 409) {
        /* The name is taken: what an earlier run of this workspace left
         * (a re-attach after a restart the reconcile could not clean).
         * Removed, then created once more. */
        free(body);
        body = NULL;
        err = remove_container(rt, v, name, d);
        if (err == 0)
            err = call(rt, WS_DOCKER_HTTP_POST, path, json, 0, &body, &len, &status, d);
    }
    /* Sent, with no answer: the daemon may have made it all the same. */
    create_lost = err < 0;
    if (err < 0)
        goto out;
    if (status != 201 || ws_docker_parse_created(body, len, &created) < 0) {
        daemon_message(body, len, msg, sizeof(msg));
        ws_diag_set(d, "the Docker daemon did not create the container: %s", msg);
        err = -WS_EFAILED;
        goto out;
    }
    made = true;
    memcpy(id, created.id, sizeof(id));
    free(body);
    body = NULL;

    if (ws_docker_path_container(v, id, WS_DOCKER_CONTAINER_START, path, sizeof(path)) < 0) {
        err = -EINVAL;
        goto out;
    }
    err = call(rt, WS_DOCKER_HTTP_POST, path, NULL, 0, &body, &len, &status, d);
    if (err < 0)
        goto out;
    if (status != 204 && status != 304) {
        daemon_message(body, len, msg, sizeof(msg));
        ws_diag_set(d, "the Docker daemon did not start the container: %s", msg);
        err = -WS_EFAILED;
        goto out;
    }
    /* Read back, never assumed: a daemon may drop what its kernel cannot
     * enforce with a warning only. */
    err = inspect(rt, v, id, &h, &st, NULL, d);
    if (err == -ENOENT) {
        ws_diag_set(d, "the container vanished right after its start");
        err = -WS_EFAILED;
    }
    if (err < 0)
        goto out;
    const char *bad = ws_docker_hardening_mismatch(&h, spec);
    if (bad) {
        ws_diag_set(d, "the Docker daemon did not apply %s as asked: refused", bad);
        ws_diag_meta(d, "setting", "%s", bad);
        err = -WS_EFAILED;
        goto out;
    }
    if (!st.running) {
        ws_diag_set(d, "the container stopped right after its start (status %s, exit code %d)",
                    st.status, st.exit_code);
        err = -WS_EFAILED;
        goto out;
    }
    if (agent) {
        err = agent_connect(rt, b, &ch, d);
        if (err < 0)
            goto out;
    }
    memcpy(b->container_id, id, sizeof(id));
    box_set(rt, workspace_id, b);
    b = NULL;
    err = 0;
out:
    if (err < 0 && made) {
        /* Compensation: nothing of a failed Open stays behind. */
        struct ws_diag ignored = {0};
        if (remove_container(rt, v, id, &ignored) < 0)
            orphan_add(rt, id);
    } else if (err < 0 && create_lost && fresh) {
        orphan_add(rt, name);
    }
    channel_close(&ch);
    box_free(b);
    free(json);
    free(body);
    return err;
}

int ws_docker_rt_detach(struct ws_docker_rt *rt, const char *workspace_id, struct ws_diag *d)
{
    struct ws_docker_api_version v;
    char name[WS_DOCKER_NAME_MAX + 1];
    int err;

    if (ws_docker_container_name(rt->server_id, workspace_id, name, sizeof(name)) < 0)
        return -EINVAL;
    err = version(rt, &v, d);
    if (err == 0) {
        orphans_sweep(rt, v);
        err = remove_container(rt, v, name, d);
    }
    if (err < 0) {
        char why[WS_DIAG_MESSAGE_MAX];
        snprintf(why, sizeof(why), "%s", d ? d->message : "");
        ws_diag_set(d, "the workspace's container could not be removed (Close can be retried): %s",
                    why);
        return err;
    }
    box_set(rt, workspace_id, NULL);
    channel_remove(rt, workspace_id);
    return 0;
}

void ws_docker_rt_forget(struct ws_docker_rt *rt, const char *workspace_id)
{
    box_set(rt, workspace_id, NULL);
    channel_remove(rt, workspace_id);
}

int ws_docker_rt_reconcile(struct ws_docker_rt *rt, struct ws_diag *d)
{
    struct ws_docker_api_version v;
    char path[WS_DOCKER_PATH_MAX];
    char *body = NULL, **ids = NULL;
    size_t len = 0;
    long status = 0;
    int err, n = 0;

    err = version(rt, &v, d);
    if (err < 0)
        return err;
    if (ws_docker_path_list_by_label(v, WS_DOCKER_LABEL_SERVER, rt->server_id, path, sizeof(path)) <
        0)
        return -EINVAL;
    err = call(rt, WS_DOCKER_HTTP_GET, path, NULL, 0, &body, &len, &status, d);
    if (err < 0)
        return err;
    if (status != 200 || ws_docker_parse_container_ids(body, len, &ids) < 0) {
        free(body);
        ws_diag_set(d, "listing this server's containers failed (HTTP %ld)", status);
        return -WS_EFAILED;
    }
    free(body);
    for (size_t i = 0; ids[i]; i++)
        if (remove_container(rt, v, ids[i], d) == 0)
            n++;
    ws_docker_names_free(ids);
    return n;
}

void ws_docker_rt_describe(struct ws_docker_rt *rt, const char *workspace_id,
                           struct ws_docker_rt_info *ret)
{
    struct ws_docker_rt_info info = {0};
    struct ws_docker_api_version v;
    struct ws_docker_state st;
    struct ws_diag d = {0};
    char name[WS_DOCKER_NAME_MAX + 1];

    if (version(rt, &v, &d) == 0) {
        info.reachable = true;
        snprintf(info.api_version, sizeof(info.api_version), "%u.%u", v.major, v.minor);
        int err = ws_docker_container_name(rt->server_id, workspace_id, name, sizeof(name)) >= 0
                      ? inspect(rt, v, name, &info.hardening, &st, info.container_id, &d)
                      : -EINVAL;
        if (err == 0) {
            info.running = st.running;
            info.oom_killed = st.oom_killed;
        } else {
            info.container_id[0] = '\0';
            /* The version is remembered; the inspect is what asked now. */
            if (d.transient)
                info.reachable = false;
        }
    }
    *ret = info;
}

/* ---- commands ---- */

static void run_free(struct run *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->argc; i++)
        free(r->argv[i]);
    ws_close_fd(&r->status_fd);
    ws_close_fd(&r->child_fd[0]);
    free(r);
}

/* An in-container signal: exec "init signal HANDLE SIG" detached. Two
 * calls on the runtime's pump, chained; nobody waits for them. */
struct sig_call {
    struct ws_docker_rt *rt;
    char container_id[WS_DOCKER_ID_LEN + 1];
    char handle[HANDLE_LEN + 1];
    int sig;
    char body[1024];
    size_t len;
    bool overflow;
};

static int sig_body(void *arg, const char *data, size_t len)
{
    struct sig_call *c = arg;

    if (c->len + len >= sizeof(c->body)) {
        c->overflow = true;
        return 0;
    }
    memcpy(c->body + c->len, data, len);
    c->len += len;
    c->body[c->len] = '\0';
    return 0;
}

static void sig_started(void *arg, int err, long status)
{
    (void)err;
    (void)status;
    free(arg);
}

static void sig_created(void *arg, int err, long status)
{
    struct sig_call *c = arg;
    struct ws_docker_created created;
    char path[WS_DOCKER_PATH_MAX];

    if (err < 0 || status != 201 || c->overflow ||
        ws_docker_parse_created(c->body, c->len, &created) < 0 ||
        ws_docker_path_exec(c->rt->version, created.id, WS_DOCKER_EXEC_START, path, sizeof(path)) <
            0) {
        free(c);
        return;
    }
    static const char detached[] = "{\"Detach\":true,\"Tty\":false}";
    struct ws_docker_http_request req = {
        .method = WS_DOCKER_HTTP_POST,
        .path = path,
        .body = detached,
        .body_len = sizeof(detached) - 1,
        .on_done = sig_started,
        .arg = c,
    };
    if (ws_docker_http_start(c->rt->http, &req, NULL) < 0)
        free(c);
}

static void send_signal(struct run *r, int sig)
{
    struct ws_docker_rt *rt = r->rt;
    char path[WS_DOCKER_PATH_MAX], num[16], helper[ID_TEXT_MAX], *json = NULL;
    const char *argv[7];
    size_t n = 0;
    /* With identities `signal` starts as root too, and drops to the
     * helper keeping CAP_KILL before it looks at anything. */
    struct ws_docker_exec_spec es = {.argv = argv, .user = r->helper ? ROOT_USER : NULL};
    struct sig_call *c;

    snprintf(num, sizeof(num), "%d", sig);
    argv[n++] = WS_DOCKER_INIT_TARGET;
    argv[n++] = "signal";
    if (r->helper) {
        snprintf(helper, sizeof(helper), "%u", (unsigned)r->helper);
        argv[n++] = "--helper";
        argv[n++] = helper;
    }
    argv[n++] = r->handle;
    argv[n++] = num;
    argv[n] = NULL;
    if (ws_docker_path_container(rt->version, r->container_id, WS_DOCKER_CONTAINER_EXEC, path,
                                 sizeof(path)) < 0 ||
        ws_docker_exec_body(&es, &json) < 0)
        return;
    c = calloc(1, sizeof(*c));
    if (!c) {
        free(json);
        return;
    }
    c->rt = rt;
    c->sig = sig;
    memcpy(c->container_id, r->container_id, sizeof(c->container_id));
    memcpy(c->handle, r->handle, sizeof(c->handle));
    struct ws_docker_http_request req = {
        .method = WS_DOCKER_HTTP_POST,
        .path = path,
        .body = json,
        .body_len = strlen(json),
        .on_body = sig_body,
        .on_done = sig_created,
        .arg = c,
    };
    if (ws_docker_http_start(rt->http, &req, NULL) < 0)
        free(c);
    free(json);
}

static int hook_signal(void *arg, struct ws_tree *tree, pid_t leader, int sig)
{
    (void)tree;
    (void)leader;
    send_signal(arg, sig);
    return 0;
}

static void hook_kill(void *arg)
{
    struct run *r = arg;

    if (!r->killed) {
        r->killed = true;
        send_signal(r, SIGKILL);
    }
}

/* The relay's line: "exited CODE" or "signaled SIG[ core][ oom]". Without
 * one the init's record never came (the relay said why on stderr): the
 * relay's own exit stands, but for WS_DOCKER_RELAY_EXIT_UNKNOWN, the
 * relay's word for a command whose end it could not learn (the daemon
 * died or broke the stream, the container went): not a command's exit
 * code but the container lost under it, EVICTED, as in agent mode. */
static void hook_exited(void *arg, struct ws_child_exit *e, enum ws_cause *ret_cause)
{
    struct run *r = arg;
    char buf[STATUS_MAX], word[16] = "", extra1[8] = "", extra2[8] = "";
    ssize_t n;
    size_t have;
    int v = -1;

    if (r->status_fd < 0)
        return;
    n = ws_read_all(r->status_fd, buf, sizeof(buf) - 1);
    have = n > 0 ? (size_t)n : 0;
    buf[have] = '\0';
    if (have == 0 && !e->signaled && e->exit_code == WS_DOCKER_RELAY_EXIT_UNKNOWN) {
        *ret_cause = WS_CAUSE_EVICTED;
        return;
    }
    if (have == 0 || buf[have - 1] != '\n' || memchr(buf, '\n', have) != buf + have - 1)
        return;
    if (sscanf(buf, "%15s %d %7s %7s", word, &v, extra1, extra2) < 2)
        return;
    if (!strcmp(word, "exited") && v >= 0 && v <= 255) {
        /* The command's status; the rusage stays the relay's. */
        e->signaled = false;
        e->exit_code = v;
        e->signal = 0;
        e->core_dumped = false;
    } else if (!strcmp(word, "signaled") && v > 0 && v < NSIG) {
        e->signaled = true;
        e->exit_code = 0;
        e->signal = v;
        e->core_dumped = !strcmp(extra1, "core");
        if (v == SIGKILL && (!strcmp(extra1, "oom") || !strcmp(extra2, "oom")))
            *ret_cause = WS_CAUSE_OOM;
    }
}

static void hook_spawned(void *arg)
{
    struct run *r = arg;

    ws_close_fd(&r->child_fd[0]);
}

static void hook_free(void *arg)
{
    run_free(arg);
}

void ws_docker_rt_discard(struct ws_proc_wrapper *w)
{
    if (w && w->arg) {
        /* An agent's wrapper frees itself; a relay's is a run. */
        if (w->free && w->free != hook_free)
            w->free(w->arg);
        else
            run_free(w->arg);
        w->arg = NULL;
    }
}

static int add(struct run *r, const char *s)
{
    if (r->argc + 1 >= sizeof(r->argv) / sizeof(r->argv[0]))
        return -E2BIG;
    r->argv[r->argc] = strdup(s);
    if (!r->argv[r->argc])
        return -ENOMEM;
    r->argc++;
    return 0;
}

/* Names to remove from an exec's inherited environment: the image's and
 * the daemon's own, less those the command sets (a removal would not
 * matter for them, but the list stays short). */
static int unset_list(const struct box *b, const char *const *envp, const char ***ret)
{
    static const char *const daemon_vars[] = {"HOSTNAME", "TERM"};
    size_t n = 0, cap = 2;
    const char **out;

    for (size_t i = 0; b->image_env && b->image_env[i]; i++)
        cap++;
    out = calloc(cap + 1, sizeof(*out));
    if (!out)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++) {
        const char *name = i < 2 ? daemon_vars[i] : b->image_env[i - 2];
        size_t len = strlen(name);
        bool set = false, dup = false;

        for (size_t k = 0; envp && envp[k] && !set; k++)
            set = !strncmp(envp[k], name, len) && envp[k][len] == '=';
        for (size_t k = 0; k < n && !dup; k++)
            dup = !strcmp(out[k], name);
        if (!set && !dup)
            out[n++] = name;
    }
    *ret = out;
    return 0;
}

/* The command's environment for the exec: envp without any NONCE_ENV of
 * the client's (the daemon keeps the last of a name, the init the first:
 * neither may be the client's), then `nonce`. The array is the caller's
 * to free; its strings are envp's and nonce. */
static int exec_env(const char *const *envp, const char *nonce, const char ***ret)
{
    const size_t name_len = sizeof(NONCE_ENV) - 1;
    size_t n = 0, k = 0;
    const char **out;

    while (envp && envp[n])
        n++;
    out = calloc(n + 2, sizeof(*out));
    if (!out)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], NONCE_ENV "=", name_len + 1) != 0)
            out[k++] = envp[i];
    out[k] = nonce;
    *ret = out;
    return 0;
}

/* A command through the box's agent; rt->lock held, so the box and its
 * agent stay while the wrapper takes its reference. */
static int agent_wrap_locked(const struct box *b, const struct ws_docker_rt_exec *spec,
                             struct ws_proc_wrapper *ret, struct ws_diag *d)
{
    char cwd[WS_DOCKER_CWD_MAX + 1];
    int err;

    if (b->failed) {
        ws_diag_set(d,
                    "the workspace's container ended (%s); Resolve brings up a fresh one over "
                    "the same files",
                    b->why);
        ws_diag_meta(d, "transient", "false");
        ws_diag_meta(d, "resolve", "true");
        return -WS_EFAILED;
    }
    if (!spec->cwd || !spec->cwd[0] || !strcmp(spec->cwd, "."))
        snprintf(cwd, sizeof(cwd), "%s", WS_DOCKER_WORKDIR);
    else if ((size_t)snprintf(cwd, sizeof(cwd), "%s/%s", WS_DOCKER_WORKDIR, spec->cwd) >=
             sizeof(cwd))
        return -WS_EBADPATH;
    struct ws_agent_command c = {
        .argv = spec->argv,
        .envp = spec->envp,
        .cwd = cwd,
        /* The exec layer's own timeout acts first; this is the box's
         * backstop should the server's kill never arrive. */
        .timeout_ms = spec->timeout_ms ? spec->timeout_ms + WS_DOCKER_BACKSTOP_MARGIN_MS : 0,
        .pty = spec->tty,
        .identity = b->id.uid != 0,
        .uid = b->id.uid,
        .gid = b->id.gid,
        .nproc = b->nproc > 0 ? (uint64_t)b->nproc : 0,
    };
    err = ws_agent_wrap(b->agent, &c, ret);
    if (err == -ECONNRESET) {
        ws_diag_set(d, "the workspace's container lost its agent; Resolve brings up a fresh one "
                       "over the same files");
        ws_diag_meta(d, "transient", "false");
        ws_diag_meta(d, "resolve", "true");
        return -WS_EFAILED;
    }
    if (err == -E2BIG) {
        ws_diag_set(d, "the command and its environment do not fit the agent's channel");
        return -WS_EMALFORMED;
    }
    return err;
}

int ws_docker_rt_wrap(struct ws_docker_rt *rt, const struct ws_docker_rt_exec *spec,
                      struct ws_proc_wrapper *ret, struct ws_diag *d)
{
    const char *relay = ws_docker_rt_relay_path();
    char path[WS_DOCKER_PATH_MAX], msg[WS_DOCKER_MESSAGE_MAX], backstop[24], api[16];
    char cwd[WS_DOCKER_CWD_MAX + 1], exec_id[WS_DOCKER_ID_LEN + 1];
    char uid[ID_TEXT_MAX], gid[ID_TEXT_MAX], helper[ID_TEXT_MAX], nproc[24];
    char nonce[NONCE_HEX + 1], nonce_env[sizeof(NONCE_ENV "=") + NONCE_HEX];
    const char **argv = NULL, **unset = NULL, **envp = NULL;
    struct ws_docker_identity ident = {0};
    int64_t nproc_cap = 0;
    struct ws_docker_api_version v;
    struct ws_docker_created created;
    uint8_t rnd[8], nonce_rnd[NONCE_BYTES];
    char *json = NULL, *body = NULL;
    size_t argc = 0, len = 0, at = 0;
    long status = 0;
    struct run *r = NULL;
    struct box *b;
    int err, p[2];

    pthread_mutex_lock(&rt->lock);
    b = box_find_locked(rt, spec->workspace_id);
    if (b && b->agent && !(spec->tty && b->gvisor)) {
        err = agent_wrap_locked(b, spec, ret, d);
        pthread_mutex_unlock(&rt->lock);
        return err;
    }
    pthread_mutex_unlock(&rt->lock);
    if (!relay || !ws_docker_rt_init_path())
        return -ENOENT;
    err = version(rt, &v, d);
    if (err < 0)
        return err;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->rt = rt;
    r->status_fd = r->child_fd[0] = -1;
    /* The handle names the command to `signal`; the nonce marks the one
     * record the init writes. Neither is for the command to guess. */
    if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd) ||
        getrandom(nonce_rnd, sizeof(nonce_rnd), 0) != sizeof(nonce_rnd)) {
        err = -errno;
        goto out;
    }
    memcpy(r->handle, "p_", 2);
    hex(rnd, sizeof(rnd), r->handle + 2);
    hex(nonce_rnd, sizeof(nonce_rnd), nonce);
    snprintf(nonce_env, sizeof(nonce_env), "%s=%s", NONCE_ENV, nonce);
    err = exec_env(spec->envp, nonce_env, &envp);
    if (err < 0)
        goto out;
    pthread_mutex_lock(&rt->lock);
    b = box_find_locked(rt, spec->workspace_id);
    if (b) {
        memcpy(r->container_id, b->container_id, sizeof(r->container_id));
        ident = b->id;
        nproc_cap = b->nproc;
        err = unset_list(b, envp, &unset);
    }
    pthread_mutex_unlock(&rt->lock);
    if (!b) {
        ws_diag_set(d, "the workspace has no container (Resolve its ref to make one)");
        err = -WS_EFAILED;
        goto out;
    }
    if (err < 0)
        goto out;
    r->helper = ident.uid ? ident.helper : 0;
    snprintf(backstop, sizeof(backstop), "%" PRIu64,
             spec->timeout_ms ? spec->timeout_ms + WS_DOCKER_BACKSTOP_MARGIN_MS : 0);
    if (!spec->cwd || !spec->cwd[0] || !strcmp(spec->cwd, "."))
        snprintf(cwd, sizeof(cwd), "%s", WS_DOCKER_WORKDIR);
    else if ((size_t)snprintf(cwd, sizeof(cwd), "%s/%s", WS_DOCKER_WORKDIR, spec->cwd) >=
             sizeof(cwd)) {
        err = -WS_EBADPATH;
        goto out;
    }

    for (argc = 0; spec->argv[argc]; argc++)
        ;
    argv = calloc(argc + 13, sizeof(*argv));
    if (!argv) {
        err = -ENOMEM;
        goto out;
    }
    argv[at++] = WS_DOCKER_INIT_TARGET;
    argv[at++] = "run";
    if (ident.uid) {
        snprintf(uid, sizeof(uid), "%u", (unsigned)ident.uid);
        snprintf(gid, sizeof(gid), "%u", (unsigned)ident.gid);
        snprintf(helper, sizeof(helper), "%u", (unsigned)ident.helper);
        argv[at++] = "--uid";
        argv[at++] = uid;
        argv[at++] = "--gid";
        argv[at++] = gid;
        argv[at++] = "--helper";
        argv[at++] = helper;
    }
    if (nproc_cap) {
        snprintf(nproc, sizeof(nproc), "%" PRId64, nproc_cap);
        argv[at++] = "--nproc";
        argv[at++] = nproc;
    }
    argv[at++] = r->handle;
    argv[at++] = backstop;
    for (size_t i = 0; i < argc; i++)
        argv[at++] = spec->argv[i];
    struct ws_docker_exec_spec es = {
        .argv = argv,
        .envp = envp,
        .unset = unset,
        .cwd = cwd,
        /* Root for the init's split alone: the command never is. */
        .user = ident.uid ? ROOT_USER : NULL,
        .tty = spec->tty,
        .attach_stdin = spec->stdin_pipe || spec->tty,
    };
    err = ws_docker_exec_body(&es, &json);
    if (err < 0) {
        ws_diag_set(d, "the command cannot be passed to the Docker daemon");
        err = err == -ENOMEM ? err : -WS_EMALFORMED;
        goto out;
    }
    if (ws_docker_path_container(v, r->container_id, WS_DOCKER_CONTAINER_EXEC, path, sizeof(path)) <
        0) {
        err = -EINVAL;
        goto out;
    }
    err = call(rt, WS_DOCKER_HTTP_POST, path, json, 0, &body, &len, &status, d);
    if (err < 0)
        goto out;
    if (status != 201 || ws_docker_parse_created(body, len, &created) < 0) {
        daemon_message(body, len, msg, sizeof(msg));
        ws_diag_set(d, "the Docker daemon did not create the exec: %s%s", msg,
                    status == 404 || status == 409 ? " (Resolve the workspace's ref to make "
                                                     "its container again)"
                                                   : "");
        if (status == 404 || status == 409)
            ws_diag_meta(d, "resolve", "true");
        err = -WS_EFAILED;
        goto out;
    }
    memcpy(exec_id, created.id, sizeof(exec_id));

    if (pipe2(p, O_CLOEXEC) < 0) {
        err = -errno;
        goto out;
    }
    r->status_fd = p[0];
    r->child_fd[0] = p[1];
    snprintf(api, sizeof(api), "%u.%u", v.major, v.minor);
    if ((err = add(r, relay)) < 0 || (err = add(r, "--host")) < 0 ||
        (err = add(r, rt->host_arg)) < 0 || (err = add(r, "--api")) < 0 ||
        (err = add(r, api)) < 0 || (err = add(r, "--status-fd")) < 0 || (err = add(r, "3")) < 0 ||
        (err = add(r, "--nonce")) < 0 || (err = add(r, nonce)) < 0 ||
        (err = add(r, "--container")) < 0 || (err = add(r, r->container_id)) < 0)
        goto out;
    if (rt->tls && ((err = add(r, "--tls-verify")) < 0 ||
                    (rt->cert_path &&
                     ((err = add(r, "--cert-path")) < 0 || (err = add(r, rt->cert_path)) < 0))))
        goto out;
    if (spec->tty && (err = add(r, "--tty")) < 0)
        goto out;
    if ((spec->stdin_pipe || spec->tty) && (err = add(r, "--stdin")) < 0)
        goto out;
    if ((err = add(r, exec_id)) < 0)
        goto out;

    *ret = (struct ws_proc_wrapper){
        .argv = (const char *const *)r->argv,
        .keep_fds = r->child_fd,
        .n_keep_fds = 1,
        .signal = hook_signal,
        .kill = hook_kill,
        .exited = hook_exited,
        .spawned = hook_spawned,
        .free = hook_free,
        .arg = r,
    };
    r = NULL;
    err = 0;
out:
    run_free(r);
    free(argv);
    free(unset);
    free(envp);
    /* The exec's environment may hold the workspace's secrets. */
    if (json)
        explicit_bzero(json, strlen(json));
    free(json);
    free(body);
    return err;
}
