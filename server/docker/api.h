/* The Docker Engine API as data: request bodies, request paths and parsed
 * responses, with no I/O. The libcurl transport sends what is built here and
 * hands back the bodies it receives; every decision about what a hardened
 * workspace container looks like lives in this one file pair, so it can be
 * tested byte for byte without a daemon.
 *
 * Documents are built with jansson, never by formatting strings, so a value
 * (an argument, an environment variable, an image name) can only ever be a
 * JSON string in the place it was put: it cannot close a quote and open a
 * new member. Strings are NUL-terminated C strings; a string that arrived
 * with a length (a protobuf field) and carries an embedded NUL must be
 * refused before it gets here (server/rpc/validate.c does that for every
 * request field), because the C string would silently end at the NUL. Every
 * string must be valid UTF-8 (JSON cannot carry anything else) or the
 * builder returns -EINVAL.
 *
 * Identifiers that become part of a URL (container ids and names, exec ids,
 * image references) are validated against a grammar that excludes '/', '%',
 * '?', '#', spaces and dot segments (except the '/' that separates the path
 * components of an image name) before a path is built, so no value can
 * change which endpoint a request reaches.
 *
 * Responses are parsed strictly: at most WS_DOCKER_RESPONSE_MAX bytes, one
 * JSON object, no duplicate keys, members of the documented type (absent and
 * null read as the member's zero value). Anything else is -EPROTO.
 *
 * Everything here is pure and reentrant: thread-safe without locks.
 * Functions returning int return >= 0 or a negated errno; ret_* arguments
 * are written only on success.
 */
#ifndef WS_DOCKER_API_H
#define WS_DOCKER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* --- API versions --------------------------------------------------------- */

struct ws_docker_api_version {
    unsigned major, minor;
};

/* The newest API version this code speaks: 1.52 (Docker 29.0). It has to
 * be at least 1.44, the minimum Docker 29 accepts, or current daemons would
 * refuse every request. The changelog from 1.42 through 1.56 was read
 * against every member sent and read here; the one change that touches us
 * is that 1.52 leaves an unset Config.Volumes out of image inspect, which
 * reads as "no volumes" at every version anyway. Raising this means reading
 * the changelog again. */
#define WS_DOCKER_API_MAJOR 1
#define WS_DOCKER_API_MINOR 52
/* The oldest daemon API accepted: 1.41 (Docker 20.10, Debian 12's
 * docker.io). Everything used here is older than that (Init and NanoCpus
 * 1.25, exec WorkingDir 1.35, the "local" log driver Docker 18.09). */
#define WS_DOCKER_API_MIN_MAJOR 1
#define WS_DOCKER_API_MIN_MINOR 41
/* Largest value of either version component we parse (keeps arithmetic
 * and the formatted prefix bounded). */
#define WS_DOCKER_VERSION_PART_MAX 9999

/* Parses "MAJOR.MINOR" (decimal digits only, each at most
 * WS_DOCKER_VERSION_PART_MAX). Returns 0 or -EINVAL. */
int ws_docker_api_version_parse(const char *s, struct ws_docker_api_version *ret);
/* <0, 0, >0 as a is older than, equal to, newer than b (numerically:
 * 1.9 < 1.10). */
int ws_docker_api_version_cmp(struct ws_docker_api_version a, struct ws_docker_api_version b);

/* What GET /version (unversioned) says about the daemon's API. */
struct ws_docker_version {
    struct ws_docker_api_version api; /* "ApiVersion", required */
    struct ws_docker_api_version min; /* "MinAPIVersion"; 0.0 when absent */
};

/* Returns 0, -EPROTO (not a version document, "ApiVersion" missing or
 * malformed), -EMSGSIZE (longer than WS_DOCKER_RESPONSE_MAX) or -ENOMEM. */
int ws_docker_parse_version(const char *json, size_t len, struct ws_docker_version *ret);

/* The version to speak: min(ours, the daemon's ApiVersion). Returns 0, or
 * -EPROTONOSUPPORT when that is older than our minimum (the daemon is too
 * old) or older than the daemon's MinAPIVersion (the daemon is too new for
 * this code); the provider reports either as a backend that is not usable
 * (WS_EFAILED, not transient). */
int ws_docker_negotiate(const struct ws_docker_version *daemon, struct ws_docker_api_version *ret);

/* --- identifiers ------------------------------------------------------------ */

#define WS_DOCKER_ID_LEN         64  /* a full container or exec id: lowercase hex */
#define WS_DOCKER_NAME_MAX       192 /* bytes in a container name we accept */
#define WS_DOCKER_LABEL_ID_MAX   64  /* bytes in a server or workspace id */
#define WS_DOCKER_IMAGE_NAME_MAX 255 /* repository name with its domain (Docker's limit) */
#define WS_DOCKER_TAG_MAX        128 /* Docker's limit */
#define WS_DOCKER_USER_MAX       24  /* "4294967294:4294967294" and a NUL */

/* A full id: exactly WS_DOCKER_ID_LEN lowercase hex digits. Exec ids are
 * only ever full ids. */
bool ws_docker_id_valid(const char *s);

/* A container name by Docker's rule [a-zA-Z0-9][a-zA-Z0-9_.-]+, at most
 * WS_DOCKER_NAME_MAX bytes, and with at least one character that is not a
 * lowercase hex digit: the daemon resolves a string that is not a known name
 * as an id prefix, so a name made only of hex digits could reach some other
 * container once ours is gone. */
bool ws_docker_name_valid(const char *s);

/* What a container path accepts: a full id or a valid name. Short ids are
 * refused for the same reason as hex-only names. */
bool ws_docker_container_ref_valid(const char *s);

/* An image reference by the distribution grammar:
 *   [domain[:port]/]path-component[/path-component...][:tag][@digest]
 * with lowercase path components ([a-z0-9]+ joined by '.', '_', '__' or
 * runs of '-'), domain components [a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?,
 * a tag [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}, and a digest sha256:, sha384: or
 * sha512: followed by the matching number of lowercase hex digits. The name
 * is at most WS_DOCKER_IMAGE_NAME_MAX bytes. Bracketed IPv6 registries are
 * not accepted. This is the one image rule of the server (the Open config
 * check uses it too); it never admits '..', '%', '?', '#' or spaces. */
bool ws_docker_image_valid(const char *s);

/* A user for the container or an exec: "uid:gid", decimal, each at most 10
 * digits and at most 4294967294 ((uid_t)-1 is not a user). Names are not
 * accepted: the read-only image's /etc/passwd is not ours to trust. uid
 * and gid 0 are valid here: the server runs the in-container init as
 * "0:0" so that it can split into the command's and its own identities. */
bool ws_docker_user_valid(const char *s);

/* As ws_docker_user_valid, and neither the uid nor the gid is 0: what a
 * command, the container's tmpfs owner, or a user a client names may be. */
bool ws_docker_user_unprivileged(const char *s);

/* Splits a ws_docker_user_valid() string. Returns 0 or -EINVAL. */
int ws_docker_user_parse(const char *s, uid_t *ret_uid, gid_t *ret_gid);

/* Formats "uid:gid" (the default user is the server's own getuid():getgid(),
 * which the caller passes). Returns 0, -EINVAL ((uid_t)-1 or (gid_t)-1) or
 * -ENOBUFS (size < the formatted length + 1; WS_DOCKER_USER_MAX always
 * fits). */
int ws_docker_user_format(uid_t uid, gid_t gid, char *buf, size_t size);

/* --- request paths ---------------------------------------------------------- */

/* Enough for every path built here. The longest is an image inspect of a
 * reference with every part at its maximum: "/v9999.9999/images/", a
 * 255-byte name, a 128-byte tag, a 135-byte sha512 digest, "/json" and the
 * NUL make 545 bytes. */
#define WS_DOCKER_PATH_MAX 1024

/* Unversioned: the version is what we are about to learn. */
#define WS_DOCKER_PATH_VERSION "/version"
#define WS_DOCKER_PATH_PING    "/_ping"

enum ws_docker_container_op {
    WS_DOCKER_CONTAINER_INSPECT, /* GET    /containers/{ref}/json */
    WS_DOCKER_CONTAINER_START,   /* POST   /containers/{ref}/start */
    WS_DOCKER_CONTAINER_KILL,    /* POST   /containers/{ref}/kill (SIGKILL) */
    WS_DOCKER_CONTAINER_EXEC,    /* POST   /containers/{ref}/exec */
    /* DELETE /containers/{ref}?force=true&v=true: force because a running
     * container is refused otherwise, v so no anonymous volume outlives
     * it (there should be none: images with VOLUMEs are refused). */
    WS_DOCKER_CONTAINER_REMOVE,
};

enum ws_docker_exec_op {
    WS_DOCKER_EXEC_START,   /* POST /exec/{id}/start */
    WS_DOCKER_EXEC_INSPECT, /* GET  /exec/{id}/json */
};

/* The HTTP method of an operation ("GET", "POST", "DELETE"; static). */
const char *ws_docker_container_op_method(enum ws_docker_container_op op);
const char *ws_docker_exec_op_method(enum ws_docker_exec_op op);

/* Each writes "/v{major}.{minor}/..." and its NUL into buf. They return the
 * path's length, -EINVAL (an identifier fails its rule above, or an unknown
 * op) or -ENOBUFS (size too small; buf untouched). */
int ws_docker_path_container(struct ws_docker_api_version v, const char *ref,
                             enum ws_docker_container_op op, char *buf, size_t size);
int ws_docker_path_exec(struct ws_docker_api_version v, const char *exec_id,
                        enum ws_docker_exec_op op, char *buf, size_t size);
/* POST /exec/{id}/resize?h={rows}&w={cols}; rows and cols 1..65535. */
int ws_docker_path_exec_resize(struct ws_docker_api_version v, const char *exec_id, unsigned rows,
                               unsigned cols, char *buf, size_t size);
/* POST /containers/create?name={name}. */
int ws_docker_path_create(struct ws_docker_api_version v, const char *name, char *buf, size_t size);
/* GET /images/{image}/json. */
int ws_docker_path_image_inspect(struct ws_docker_api_version v, const char *image, char *buf,
                                 size_t size);
/* POST /images/create?fromImage={name}&tag={tag}. The tag is the digest if
 * there is one, else the tag, else "latest": an empty tag would pull every
 * tag of the repository. */
int ws_docker_path_image_pull(struct ws_docker_api_version v, const char *image, char *buf,
                              size_t size);

/* GET /containers/json?all=true&filters={"label":["<label>=<value>"]}:
 * every container, running or not, carrying that label. value follows the
 * server id rule. */
int ws_docker_path_list_by_label(struct ws_docker_api_version v, const char *label,
                                 const char *value, char *buf, size_t size);

/* --- the workspace container ------------------------------------------------ */

/* Where the workspace's host directory appears in the container; also the
 * container's and every exec's default working directory. */
#define WS_DOCKER_WORKDIR "/workspace"
/* The only writable path besides the workspace: a tmpfs owned by the
 * container's user. */
#define WS_DOCKER_TMP "/tmp"

#define WS_DOCKER_LABEL_SERVER    "dev.workspaced.server"
#define WS_DOCKER_LABEL_WORKSPACE "dev.workspaced.workspace"
/* Where the spec's init_path appears in the container (read-only). */
#define WS_DOCKER_INIT_TARGET "/.workspaced-init"
/* Where the spec's agent_path and channel_dir appear (read-only), and the
 * socket in the channel directory the agent connects to. */
#define WS_DOCKER_AGENT_TARGET   "/.workspaced-agent"
#define WS_DOCKER_CHANNEL_TARGET "/.workspaced-channel"
#define WS_DOCKER_CHANNEL_SOCKET "agent.sock"
/* Variables of the container's own environment (Config.Env), and bytes in
 * each. */
#define WS_DOCKER_CONTAINER_ENV_MAX     4
#define WS_DOCKER_CONTAINER_ENV_VAR_MAX 256
/* Container names are this prefix, the server id, '-', the workspace id. */
#define WS_DOCKER_NAME_PREFIX "workspaced-"

/* The log driver: "local" keeps at most WS_DOCKER_LOG_MAX_FILE file of
 * WS_DOCKER_LOG_MAX_SIZE, so the container cannot fill the daemon's disk,
 * yet the keepalive's own complaint (say "sleep: not found") can still be
 * read back. Exec output never reaches the log driver in any case. The
 * driver refuses compression with a single file (at start, not at
 * create), so the body also sends "compress": "false". */
#define WS_DOCKER_LOG_DRIVER   "local"
#define WS_DOCKER_LOG_MAX_SIZE "1m"
#define WS_DOCKER_LOG_MAX_FILE "1"

#define WS_DOCKER_PIDS_DEFAULT 512
#define WS_DOCKER_PIDS_MAX     4194304 /* the kernel's PID_MAX_LIMIT */
/* gVisor's runtime. Its guest processes live in its own kernel, and the
 * host's pids cgroup counts the sandbox's host tasks instead: several for
 * each guest task (about eight, seen on the ptrace platform), plus the
 * sandbox's own. So under it pids_limit is enforced in the guest (the
 * in-container init gives the command RLIMIT_NPROC, which gVisor counts
 * per uid, threads included), and HostConfig.PidsLimit gets a budget in
 * proportion, PER_PID * pids_limit + BASE (at most WS_DOCKER_PIDS_MAX),
 * which a guest held to its cap stays under: the host cgroup is never
 * what stops a command, since the host kills the whole sandbox there. */
#define WS_DOCKER_RUNTIME_GVISOR            "runsc"
#define WS_DOCKER_GVISOR_HOST_TASKS_PER_PID 16
#define WS_DOCKER_GVISOR_HOST_TASKS_BASE    256
/* The daemon refuses less memory than this (its linuxMinMemory). */
#define WS_DOCKER_MEMORY_MIN (6LL * 1024 * 1024)
/* Docker refuses less than 0.01 CPU. */
#define WS_DOCKER_NANO_CPUS_MIN     10000000LL
#define WS_DOCKER_TMP_BYTES_DEFAULT (64LL * 1024 * 1024)
#define WS_DOCKER_TMP_BYTES_MIN     (1LL * 1024 * 1024)
#define WS_DOCKER_TMP_BYTES_MAX     (16LL * 1024 * 1024 * 1024)
/* Bytes in the workspace's host path. */
#define WS_DOCKER_HOST_PATH_MAX 4096
/* Arguments of the keepalive command, and bytes in each. */
#define WS_DOCKER_KEEPALIVE_ARGS_MAX 8
#define WS_DOCKER_KEEPALIVE_ARG_MAX  256
/* Capabilities a container may be given back after CapDrop ["ALL"], and
 * bytes (with the NUL) in each name, written or read back. */
#define WS_DOCKER_CAP_ADD_MAX  8
#define WS_DOCKER_CAP_NAME_MAX 32
/* Bytes (with the NUL) in a runtime name. */
#define WS_DOCKER_RUNTIME_MAX 64

/* The process that keeps the container alive between execs when the spec
 * names none: "sleep infinity", run under Docker's init (which reaps the
 * orphans execs leave behind and forwards the stop signal, so a stop takes
 * milliseconds). It needs a sleep that takes "infinity" (GNU coreutils and
 * busybox do) but no shell. Alternatives, for images without one: a static
 * keepalive bound in from the host (as the local-sandbox provider ships its
 * init), or "tail -f /dev/null". */
#define WS_DOCKER_KEEPALIVE_ARGV0 "sleep"
#define WS_DOCKER_KEEPALIVE_ARGV1 "infinity"

/* What the container must be. Every pointer is borrowed for the call. */
struct ws_docker_container_spec {
    const char *image;         /* ws_docker_image_valid() */
    const char *workspace_dir; /* absolute host path, bound read-write at /workspace */
    const char *user;          /* ws_docker_user_valid(); the caller resolves the default */
    const char *server_id;     /* [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most WS_DOCKER_LABEL_ID_MAX */
    const char *workspace_id;  /* the same rule */
    bool network_allow;        /* NetworkMode "bridge" instead of "none" */
    int64_t memory_bytes;      /* 0: no limit; else >= WS_DOCKER_MEMORY_MIN, swap equal */
    int64_t nano_cpus;         /* 0: no limit; else >= WS_DOCKER_NANO_CPUS_MIN */
    /* HostConfig.PidsLimit. 0: WS_DOCKER_PIDS_DEFAULT; else
     * 1..WS_DOCKER_PIDS_MAX. Under WS_DOCKER_RUNTIME_GVISOR the caller
     * sends the host budget said there. */
    int64_t pids_limit;
    int64_t tmp_bytes; /* 0: WS_DOCKER_TMP_BYTES_DEFAULT; else MIN..MAX */
    /* NULL-terminated; NULL: WS_DOCKER_KEEPALIVE_ARGV0, _ARGV1. */
    const char *const *keepalive;
    /* NULL, or the absolute host path of a static program bound read-only
     * at WS_DOCKER_INIT_TARGET: the wrapper every exec runs under. */
    const char *init_path;
    /* NULL-terminated capability names given back after CapDrop ["ALL"],
     * as HostConfig.CapAdd: Docker's names without "CAP_" ([A-Z][A-Z0-9_]*,
     * shorter than WS_DOCKER_CAP_NAME_MAX), at most WS_DOCKER_CAP_ADD_MAX,
     * no repeats, never "ALL". NULL or empty: no CapAdd member. The
     * in-container init needs KILL, SETGID and SETUID to run the command
     * as another uid than its own. Docker (seen with 20.10) gives them to
     * an exec as "0:0" only when the container's User is root as well:
     * for any other User it sets the bounding set alone, and with
     * no-new-privileges the exec cannot gain what it was not given. */
    const char *const *cap_add;
    /* The OCI runtime, HostConfig.Runtime: a name the daemon has
     * registered ("runc", "runsc"), [a-zA-Z0-9][a-zA-Z0-9_.-]*, shorter
     * than WS_DOCKER_RUNTIME_MAX. NULL or "": no member, the daemon's
     * default runtime. */
    const char *runtime;
    /* ws_docker_user_valid(): who owns the /tmp tmpfs. NULL or "": user.
     * For a container whose user is root only so that the init can split
     * identities (see cap_add), /tmp belongs to the command's uid. */
    const char *tmp_user;
    /* The keepalive is the container's pid 1 (HostConfig.Init false) and
     * reaps the orphans the kernel hands it; it must then be a program
     * that does (our init's keepalive). false: Docker's own init is pid 1
     * above it (Init true), running as User. */
    bool keepalive_is_pid1;
    /* NULL, or absolute host paths of files bound read-only over the
     * image's /etc/passwd and /etc/group (both or neither). */
    const char *passwd_path;
    const char *group_path;
    /* Agent mode (both or neither): the absolute host path of the in-box
     * agent, bound read-only at WS_DOCKER_AGENT_TARGET, and of the host
     * directory its channel socket appears in, bound read-only at
     * WS_DOCKER_CHANNEL_TARGET. */
    const char *agent_path;
    const char *channel_dir;
    /* NULL-terminated "NAME=value" entries of Config.Env (the agent's
     * one-time secret), at most WS_DOCKER_CONTAINER_ENV_MAX of at most
     * WS_DOCKER_CONTAINER_ENV_VAR_MAX bytes; NULL: no Env member, the
     * image's own. */
    const char *const *env;
};

/* The container's name, WS_DOCKER_NAME_PREFIX "<server_id>-<workspace_id>":
 * one name per workspace, so a retried create is refused with 409 instead
 * of leaving two containers, and a resumed workspace can find (and remove)
 * what an earlier run left behind. Returns the length, -EINVAL or
 * -ENOBUFS. */
int ws_docker_container_name(const char *server_id, const char *workspace_id, char *buf,
                             size_t size);

/* The body of POST /containers/create for the spec: Image; the keepalive
 * as Entrypoint, replacing the image's (and with an Entrypoint given the
 * daemon no longer falls back to the image's Cmd; Cmd is sent empty);
 * User; WorkingDir /workspace; the two labels; and HostConfig with the
 * workspace bind (a Mounts entry), CapDrop ["ALL"], CapAdd (only when the
 * spec lists some), SecurityOpt ["no-new-privileges"], ReadonlyRootfs, the
 * /tmp tmpfs (exec, nosuid, nodev, sized, owned by tmp_user or User),
 * NetworkMode, PidsLimit, Memory equal to MemorySwap, NanoCpus, Init
 * (false when keepalive_is_pid1), IpcMode "private", RestartPolicy "no",
 * Runtime (only when the spec names one), the bounded LogConfig, and in
 * agent mode the agent's and its channel's read-only binds and Env.
 * Nothing else: every other setting keeps the daemon's default (in
 * particular MaskedPaths and ReadonlyPaths, which an explicit empty list
 * would switch off, and the default seccomp profile).
 *
 * On success *ret_json is a NUL-terminated compact document the caller
 * frees with free(). Returns 0, -EINVAL (a spec field fails its rule) or
 * -ENOMEM. */
int ws_docker_create_body(const struct ws_docker_container_spec *spec, char **ret_json);

/* --- exec ------------------------------------------------------------------- */

/* Backstops behind the shell guard's own limits (server/guard/guard.h),
 * which are lower: these bound what this layer will serialize no matter
 * who calls it. */
#define WS_DOCKER_ARGS_MAX       4096
#define WS_DOCKER_ARGV_BYTES_MAX (1024 * 1024)
#define WS_DOCKER_ENV_MAX        1024
#define WS_DOCKER_ENV_BYTES_MAX  (256 * 1024)
#define WS_DOCKER_CWD_MAX        4096

struct ws_docker_exec_spec {
    /* NULL-terminated; at least argv[0], which is not empty. Executed
     * directly by the runtime, never through a shell. */
    const char *const *argv;
    /* NULL-terminated "NAME=value" entries with a non-empty NAME, or NULL.
     * Docker adds them to the container's environment, which includes the
     * image's Config.Env: a caller that wants an empty base must override
     * those variables. */
    const char *const *envp;
    /* NULL-terminated variable names (no '='), or NULL: sent as bare
     * "NAME" entries before envp, which the daemon reads as "remove NAME
     * from the environment the exec inherits" (the image's Config.Env,
     * HOSTNAME, TERM), so the process sees envp and nothing else. */
    const char *const *unset;
    /* WS_DOCKER_WORKDIR or a canonical path below it (no empty, "." or ".."
     * components, no trailing '/'); NULL: WS_DOCKER_WORKDIR. */
    const char *cwd;
    /* ws_docker_user_valid(); NULL or "": the container's user. The server
     * sends "0:0" for the in-container init that takes the command's and
     * its own identities. */
    const char *user;
    bool tty;
    bool attach_stdin;
};

/* The body of POST /containers/{ref}/exec: Cmd, Env, WorkingDir, User, Tty,
 * AttachStdin as given and AttachStdout, AttachStderr true. DetachKeys is
 * left out on purpose: for an exec an empty value means no detach
 * sequence, so stdin reaches the process byte for byte (the default
 * ctrl-p,ctrl-q would swallow those bytes from binary input). Privileged
 * is never sent.
 *
 * *ret_json as for ws_docker_create_body. Returns 0, -EINVAL (an argument
 * fails its rule, or a WS_DOCKER_ARGS/ENV limit is exceeded) or -ENOMEM. */
int ws_docker_exec_body(const struct ws_docker_exec_spec *spec, char **ret_json);

/* The body of POST /exec/{id}/start: {"Detach":false,"Tty":tty}. */
int ws_docker_exec_start_body(bool tty, char **ret_json);

/* --- responses -------------------------------------------------------------- */

/* Largest response body parsed here. An inspect document is a few KiB. */
#define WS_DOCKER_RESPONSE_MAX (4 * 1024 * 1024)
/* Bytes (with the NUL) of a daemon message copied out for reporting. */
#define WS_DOCKER_MESSAGE_MAX 256
/* Bytes (with the NUL) of short string fields read back from inspect. */
#define WS_DOCKER_FIELD_MAX 64
/* Bytes (with the NUL) of the /tmp tmpfs options, written or read back. */
#define WS_DOCKER_TMPFS_OPTIONS_MAX 128

/* The response to a create (container or exec): {"Id": ..., "Warnings": [...]}. */
struct ws_docker_created {
    char id[WS_DOCKER_ID_LEN + 1]; /* ws_docker_id_valid() */
    unsigned n_warnings;
    /* The first warning, sanitized as by ws_docker_parse_error; "" if none.
     * A warning from a container create means the daemon dropped or
     * changed a setting (a limit its kernel cannot enforce): the read-back
     * of the hardening then shows which. */
    char warning[WS_DOCKER_MESSAGE_MAX];
};

/* Returns 0, -EPROTO (no valid "Id", ...), -EMSGSIZE or -ENOMEM. */
int ws_docker_parse_created(const char *json, size_t len, struct ws_docker_created *ret);

/* The hardening of a container as GET /containers/{ref}/json reports it:
 * what Describe shows and what ws_docker_hardening_mismatch() checks, read
 * back rather than assumed. Absent or null members read as zero/false/"". */
struct ws_docker_hardening {
    bool cap_drop_all;      /* HostConfig.CapDrop holds "ALL" (any case) */
    unsigned n_cap_add;     /* entries in HostConfig.CapAdd */
    bool privileged;        /* HostConfig.Privileged */
    bool no_new_privileges; /* HostConfig.SecurityOpt holds no-new-privileges[:true|=true] */
    bool readonly_rootfs;   /* HostConfig.ReadonlyRootfs */
    bool init;              /* HostConfig.Init */
    char network_mode[WS_DOCKER_FIELD_MAX]; /* HostConfig.NetworkMode */
    char ipc_mode[WS_DOCKER_FIELD_MAX];     /* HostConfig.IpcMode */
    char log_type[WS_DOCKER_FIELD_MAX];     /* HostConfig.LogConfig.Type */
    char user[WS_DOCKER_FIELD_MAX];         /* Config.User */
    int64_t pids_limit;                     /* HostConfig.PidsLimit; 0 or -1: unlimited */
    int64_t memory;                         /* HostConfig.Memory; 0: unlimited */
    int64_t memory_swap;                    /* HostConfig.MemorySwap; -1: unlimited swap */
    int64_t nano_cpus;                      /* HostConfig.NanoCpus */
    /* HostConfig.Tmpfs["/tmp"] ("" when there is none), and its "size="
     * in bytes (a plain number, as we write it); 0: no such tmpfs; -1:
     * present without a plain size. */
    char tmp_options[WS_DOCKER_TMPFS_OPTIONS_MAX];
    int64_t tmp_bytes;
    /* From the top-level Mounts: a read-write bind at /workspace exists,
     * and how many mounts there are at any other destination. */
    bool workspace_rw;
    /* A read-only bind at WS_DOCKER_INIT_TARGET exists. */
    bool init_ro;
    /* Read-only binds at WS_DOCKER_AGENT_TARGET and at
     * WS_DOCKER_CHANNEL_TARGET exist. */
    bool agent_ro;
    bool channel_ro;
    /* Read-only binds at /etc/passwd and /etc/group. */
    unsigned accounts_ro;
    unsigned n_other_mounts;
    char server_id[WS_DOCKER_FIELD_MAX];    /* Config.Labels[WS_DOCKER_LABEL_SERVER] */
    char workspace_id[WS_DOCKER_FIELD_MAX]; /* Config.Labels[WS_DOCKER_LABEL_WORKSPACE] */
    /* The first WS_DOCKER_CAP_ADD_MAX entries of HostConfig.CapAdd as the
     * daemon wrote them ("KILL", or "CAP_KILL" from daemons that
     * normalize). */
    char cap_add[WS_DOCKER_CAP_ADD_MAX][WS_DOCKER_CAP_NAME_MAX];
    char runtime[WS_DOCKER_RUNTIME_MAX]; /* HostConfig.Runtime */
};

/* Returns 0, -EPROTO (no HostConfig, a member of the wrong type, a string
 * longer than its field), -EMSGSIZE or -ENOMEM. */
int ws_docker_parse_hardening(const char *json, size_t len, struct ws_docker_hardening *ret);

/* The first way the read-back differs from what the spec asked for, as
 * the name of the API member ("HostConfig.CapDrop", ...; static), or NULL
 * when it all matches. The caller fails closed on non-NULL: the daemon may
 * drop a limit its kernel cannot enforce (PidsLimit without the pids
 * controller, MemorySwap without swap accounting) with only a warning.
 * CapAdd must hold exactly the spec's capabilities, in any order, any case
 * and with or without "CAP_"; Runtime must be the spec's when it names
 * one (when it does not, whatever default the daemon chose is taken); Init
 * must be off exactly when the keepalive is pid 1. */
const char *ws_docker_hardening_mismatch(const struct ws_docker_hardening *h,
                                         const struct ws_docker_container_spec *spec);

/* The container's State from the same inspect document. */
struct ws_docker_state {
    bool running;
    bool oom_killed;
    int exit_code;
    char status[WS_DOCKER_FIELD_MAX]; /* "created", "running", "exited", ... */
};

/* Returns 0, -EPROTO (no State object, ...), -EMSGSIZE or -ENOMEM. */
int ws_docker_parse_state(const char *json, size_t len, struct ws_docker_state *ret);

/* Whether the image (GET /images/{image}/json) declares VOLUMEs: a
 * non-empty Config.Volumes object. Such images are refused: each VOLUME
 * would become an anonymous writable volume outside the workspace, the
 * read-only root and every limit on it. Returns 0, -EPROTO, -EMSGSIZE or
 * -ENOMEM. */
int ws_docker_parse_image_volumes(const char *json, size_t len, bool *ret_has_volumes);

/* The names of the image's Config.Env ("NAME=value" entries; at most
 * WS_DOCKER_ENV_MAX): what every exec inherits unless it unsets them.
 * *ret_names is NULL-terminated, freed with ws_docker_names_free. Returns
 * 0, -EPROTO, -EMSGSIZE or -ENOMEM. */
int ws_docker_parse_image_env_names(const char *json, size_t len, char ***ret_names);
/* Frees a NULL-terminated array of strings; accepts NULL. */
void ws_docker_names_free(char **names);

/* The full ids of a container list (GET /containers/json), NULL-terminated,
 * freed with ws_docker_names_free. Returns 0, -EPROTO, -EMSGSIZE or
 * -ENOMEM. */
int ws_docker_parse_container_ids(const char *json, size_t len, char ***ret_ids);

/* GET /exec/{id}/json. */
struct ws_docker_exec_state {
    bool running;
    bool exited;   /* ExitCode is set: the process has finished */
    int exit_code; /* when exited; else -1 */
    int pid;       /* host pid; 0 before start */
};

/* Returns 0, -EPROTO, -EMSGSIZE or -ENOMEM. */
int ws_docker_parse_exec_inspect(const char *json, size_t len, struct ws_docker_exec_state *ret);

/* The daemon's error body {"message": "..."} as a message for reporting:
 * copied into buf (size > 0) at most size - 1 bytes, cut at a character
 * boundary, control characters replaced by spaces. The text is the
 * daemon's and may name host paths; the caller decides whether it reaches
 * a client. Returns the copied length, -EPROTO (not an error body),
 * -EINVAL (size 0), -EMSGSIZE or -ENOMEM; buf is written only on
 * success. */
int ws_docker_parse_error(const char *json, size_t len, char *buf, size_t size);

#endif
