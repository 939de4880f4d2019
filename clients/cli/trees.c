/* Whole trees: cp -r both ways through ReadArchive / WriteArchive, watch,
 * and snapshots (snapshot, snapshots, delete-snapshot, restore).
 *
 * cp packs and unpacks on this side with libarchive: an upload walks the
 * local directory without following symlinks (they go as links); a
 * download extracts with libarchive's secure flags (no absolute names, no
 * "..", nothing through a symlink), owners not restored.
 */
#include "clients/cli/cli.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clients/cli/args.h"
#include "clients/cli/output.h"
#include "workspace/v1/filesystem.pb-c.h"
#include "workspace/v1/workspaces.pb-c.h"

/* Bytes per WriteArchive message. */
#define SEND_CHUNK     (1024 * 1024)
#define GLOBS_MAX      64
#define LIST_PAGES_MAX 100000

static int unary(struct wsc_ctx *ctx, const char *method, const void *req,
                 const ProtobufCMessageDescriptor *desc, void *ret_resp)
{
    struct wsc_error err;
    int r = wsc_unary(ctx->cl, method, req, desc, ret_resp, &err);

    if (r == -EREMOTEIO)
        return wsc_report(&err);
    if (r < 0)
        return wsc_report_errno(method, r);
    return 0;
}

/* "WS:PATH" -> the id and the path ("." when empty); 0 when `arg` has no
 * colon (a local path). */
static int split_remote(char *arg, char **ret_id, char **ret_path)
{
    char *colon = strchr(arg, ':');
    char *slash = strchr(arg, '/');
    if (!colon || colon == arg || (slash && slash < colon))
        return 0;
    *colon = '\0';
    *ret_id = arg;
    *ret_path = colon[1] ? colon + 1 : ".";
    return 1;
}

static void print_trailer(const char *verb, const Workspace__V1__ArchiveTrailer *t)
{
    if (!t)
        return;
    fprintf(stderr,
            "%s %" PRIu64 " entries (%" PRIu64 " files, %" PRIu64 " directories, %" PRIu64
            " symlinks, %" PRIu64 " hard links), %" PRIu64 " bytes\n",
            verb, t->entries, t->files, t->directories, t->symlinks, t->hardlinks, t->bytes);
    for (size_t i = 0; i < t->n_skipped; i++)
        fprintf(stderr, "  %s: %s\n", t->skipped[i]->reason, t->skipped[i]->path);
    if (t->truncated)
        fprintf(stderr, "  (truncated: the walk hit a limit)\n");
}

/* ---- upload ---- */

struct upload {
    struct wsc_call *call;
    uint8_t *buf;
    size_t len;
    int err;
};

static int flush_upload(struct upload *u, bool finish)
{
    Workspace__V1__WriteArchiveRequest m = WORKSPACE__V1__WRITE_ARCHIVE_REQUEST__INIT;

    m.msg_case = WORKSPACE__V1__WRITE_ARCHIVE_REQUEST__MSG_DATA;
    m.data.data = u->buf;
    m.data.len = u->len;
    m.finish = finish;
    u->len = 0;
    return wsc_call_send(u->call, &m.base, finish);
}

static ssize_t upload_write(struct archive *a, void *userdata, const void *buf, size_t len)
{
    struct upload *u = userdata;
    const uint8_t *p = buf;
    size_t left = len;

    (void)a;
    while (left) {
        size_t n = SEND_CHUNK - u->len < left ? SEND_CHUNK - u->len : left;
        memcpy(u->buf + u->len, p, n);
        u->len += n;
        p += n;
        left -= n;
        if (u->len == SEND_CHUNK && (u->err = flush_upload(u, false)) < 0)
            return -1;
    }
    return (ssize_t)len;
}

/* Packs the directory we are in into `w`. */
static int pack_cwd(struct archive *w)
{
    struct archive *disk = archive_read_disk_new();
    struct archive_entry *e;
    char buf[64 * 1024];
    int r = 0;

    if (!disk)
        return -ENOMEM;
    archive_read_disk_set_symlink_physical(disk);
    archive_read_disk_set_standard_lookup(disk);
    if (archive_read_disk_open(disk, ".") != ARCHIVE_OK) {
        fprintf(stderr, "wsctl: %s\n", archive_error_string(disk));
        archive_read_free(disk);
        return -EIO;
    }
    for (;;) {
        e = archive_entry_new();
        int s = archive_read_next_header2(disk, e);
        if (s == ARCHIVE_EOF) {
            archive_entry_free(e);
            break;
        }
        if (s < ARCHIVE_WARN) {
            fprintf(stderr, "wsctl: %s\n", archive_error_string(disk));
            archive_entry_free(e);
            r = -EIO;
            break;
        }
        archive_read_disk_descend(disk);
        const char *name = archive_entry_pathname(e);
        if (strcmp(name, ".") == 0) {
            archive_entry_free(e);
            continue;
        }
        if (strncmp(name, "./", 2) == 0)
            archive_entry_copy_pathname(e, name + 2);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        archive_entry_set_uname(e, NULL);
        archive_entry_set_gname(e, NULL);
        if (archive_write_header(w, e) < ARCHIVE_WARN) {
            fprintf(stderr, "wsctl: %s\n", archive_error_string(w));
            archive_entry_free(e);
            r = -EIO;
            break;
        }
        if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0) {
            int fd = open(archive_entry_sourcepath(e), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) {
                r = -errno;
                archive_entry_free(e);
                break;
            }
            ssize_t n;
            while ((n = read(fd, buf, sizeof(buf))) > 0)
                if (archive_write_data(w, buf, (size_t)n) < 0)
                    break;
            close(fd);
        }
        archive_entry_free(e);
    }
    archive_read_close(disk);
    archive_read_free(disk);
    return r;
}

static int upload(struct wsc_ctx *ctx, const char *local, const char *id, const char *path,
                  bool gzip, Workspace__V1__ArchiveOverwrite ow)
{
    Workspace__V1__WriteArchiveRequest hm = WORKSPACE__V1__WRITE_ARCHIVE_REQUEST__INIT;
    Workspace__V1__WriteArchiveHeader h = WORKSPACE__V1__WRITE_ARCHIVE_HEADER__INIT;
    struct upload u = {0};
    struct archive *w = NULL;
    int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r, ret = 0;

    if (cwd < 0)
        return wsc_report_errno(".", -errno);
    if (chdir(local) < 0) {
        r = -errno;
        close(cwd);
        return wsc_report_errno(local, r);
    }
    u.buf = malloc(SEND_CHUNK);
    if (!u.buf) {
        ret = wsc_report_errno("cp", -ENOMEM);
        goto out;
    }
    r = wsc_call_new(ctx->cl, "/workspace.v1.FileSystem/WriteArchive", &u.call);
    if (r < 0) {
        ret = wsc_report_errno("cp", r);
        goto out;
    }
    h.workspace_id = (char *)id;
    h.path = (char *)path;
    h.format = gzip ? WORKSPACE__V1__ARCHIVE_FORMAT__ARCHIVE_FORMAT_TAR_GZIP
                    : WORKSPACE__V1__ARCHIVE_FORMAT__ARCHIVE_FORMAT_TAR;
    h.overwrite = ow;
    h.require_finish = true;
    hm.msg_case = WORKSPACE__V1__WRITE_ARCHIVE_REQUEST__MSG_HEADER;
    hm.header = &h;
    r = wsc_call_send(u.call, &hm.base, false);
    w = archive_write_new();
    if (r == 0 && w && archive_write_set_format_pax_restricted(w) == ARCHIVE_OK &&
        (!gzip || archive_write_add_filter_gzip(w) == ARCHIVE_OK) &&
        archive_write_open2(w, &u, NULL, upload_write, NULL, NULL) == ARCHIVE_OK) {
        r = pack_cwd(w);
        if (archive_write_close(w) != ARCHIVE_OK && r == 0)
            r = u.err ? u.err : -EIO;
        if (r == 0 && !u.err)
            r = flush_upload(&u, true);
    } else if (r == 0) {
        r = -EIO;
    }
    if (r < 0 || u.err) {
        /* The server keeps nothing of an upload that does not finish. */
        wsc_call_cancel(u.call);
    }
    /* The response before the status: the status waits for it. */
    Workspace__V1__WriteArchiveResponse *resp = NULL;
    if (wsc_call_recv(u.call, &workspace__v1__write_archive_response__descriptor,
                      (ProtobufCMessage **)&resp) != 1)
        resp = NULL;
    if (wsc_call_status(u.call) < 0) {
        ret = wsc_report(wsc_call_error(u.call));
    } else if (r < 0) {
        ret = wsc_report_errno(local, r);
    } else if (resp) {
        if (ctx->json)
            wsc_json_emit(wsc_json_message(&resp->base));
        else
            print_trailer("copied", resp->trailer);
    }
    if (resp)
        workspace__v1__write_archive_response__free_unpacked(resp, NULL);
out:
    if (w)
        archive_write_free(w);
    wsc_call_free(u.call);
    free(u.buf);
    if (fchdir(cwd) < 0 && ret == 0)
        ret = wsc_report_errno(".", -errno);
    close(cwd);
    return ret;
}

/* ---- download ---- */

struct download {
    struct wsc_call *call;
    Workspace__V1__ReadArchiveResponse *m;
    Workspace__V1__ArchiveTrailer *trailer; /* in the last message */
    Workspace__V1__ReadArchiveResponse *last;
};

static ssize_t download_read(struct archive *a, void *userdata, const void **ret)
{
    struct download *d = userdata;

    (void)a;
    for (;;) {
        if (d->m && d->m != d->last)
            workspace__v1__read_archive_response__free_unpacked(d->m, NULL);
        d->m = NULL;
        int r = wsc_call_recv(d->call, &workspace__v1__read_archive_response__descriptor,
                              (ProtobufCMessage **)&d->m);
        if (r <= 0)
            return r < 0 ? -1 : 0;
        if (d->m->trailer) {
            d->last = d->m;
            d->trailer = d->m->trailer;
        }
        if (d->m->data.len) {
            *ret = d->m->data.data;
            return (ssize_t)d->m->data.len;
        }
    }
}

static int download(struct wsc_ctx *ctx, const char *id, const char *path, const char *local,
                    bool gzip)
{
    Workspace__V1__ReadArchiveRequest req = WORKSPACE__V1__READ_ARCHIVE_REQUEST__INIT;
    struct download d = {0};
    struct archive *a = NULL, *disk = NULL;
    int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r, ret = 0;

    if (cwd < 0)
        return wsc_report_errno(".", -errno);
    if (mkdir(local, 0755) < 0 && errno != EEXIST) {
        r = -errno;
        close(cwd);
        return wsc_report_errno(local, r);
    }
    if (chdir(local) < 0) {
        r = -errno;
        close(cwd);
        return wsc_report_errno(local, r);
    }
    r = wsc_call_new(ctx->cl, "/workspace.v1.FileSystem/ReadArchive", &d.call);
    if (r < 0) {
        ret = wsc_report_errno("cp", r);
        goto out;
    }
    req.workspace_id = (char *)id;
    req.path = (char *)path;
    req.format = gzip ? WORKSPACE__V1__ARCHIVE_FORMAT__ARCHIVE_FORMAT_TAR_GZIP
                      : WORKSPACE__V1__ARCHIVE_FORMAT__ARCHIVE_FORMAT_TAR;
    (void)wsc_call_send(d.call, &req.base, true);

    a = archive_read_new();
    disk = archive_write_disk_new();
    if (!a || !disk) {
        ret = wsc_report_errno("cp", -ENOMEM);
        goto out;
    }
    archive_read_support_format_tar(a);
    archive_read_support_filter_gzip(a);
    archive_write_disk_set_options(
        disk, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                  ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
                  ARCHIVE_EXTRACT_UNLINK);
    r = archive_read_open(a, &d, NULL, download_read, NULL);
    if (r == ARCHIVE_FATAL) {
        wsc_call_cancel(d.call);
    } else {
        struct archive_entry *e;
        while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
            if (archive_write_header(disk, e) < ARCHIVE_WARN) {
                fprintf(stderr, "wsctl: %s: %s\n", archive_entry_pathname(e),
                        archive_error_string(disk));
                ret = WSC_EXIT_FAIL;
                continue;
            }
            const void *buf;
            size_t len;
            la_int64_t off;
            while (archive_read_data_block(a, &buf, &len, &off) == ARCHIVE_OK)
                if (archive_write_data_block(disk, buf, len, off) < ARCHIVE_WARN)
                    break;
            archive_write_finish_entry(disk);
        }
        if (r != ARCHIVE_EOF)
            wsc_call_cancel(d.call);
        /* Read to the trailer and the status. */
        const void *rest;
        while (r == ARCHIVE_EOF && download_read(a, &d, &rest) > 0) {
        }
    }
    if (wsc_call_status(d.call) < 0) {
        ret = wsc_report(wsc_call_error(d.call));
    } else if (r != ARCHIVE_EOF) {
        fprintf(stderr, "wsctl: %s\n", archive_error_string(a));
        ret = WSC_EXIT_FAIL;
    } else if (ctx->json && d.trailer) {
        wsc_json_emit(wsc_json_message(&d.trailer->base));
    } else {
        print_trailer("copied", d.trailer);
    }
out:
    if (a)
        archive_read_free(a);
    if (disk) {
        archive_write_close(disk);
        archive_write_free(disk);
    }
    if (d.m && d.m != d.last)
        workspace__v1__read_archive_response__free_unpacked(d.m, NULL);
    if (d.last)
        workspace__v1__read_archive_response__free_unpacked(d.last, NULL);
    wsc_call_free(d.call);
    if (fchdir(cwd) < 0 && ret == 0)
        ret = wsc_report_errno(".", -errno);
    close(cwd);
    return ret;
}

int wsc_cmd_cp(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"recursive", no_argument, NULL, 'r'},
        {"gzip", no_argument, NULL, 'z'},
        {"merge", no_argument, NULL, 'm'},
        {"replace", no_argument, NULL, 'R'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__ArchiveOverwrite ow = WORKSPACE__V1__ARCHIVE_OVERWRITE__ARCHIVE_OVERWRITE_NONE;
    bool recursive = false, gzip = false;
    char *id, *path;
    int opt;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "rz", longopts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            recursive = true;
            break;
        case 'z':
            gzip = true;
            break;
        case 'm':
            ow = WORKSPACE__V1__ARCHIVE_OVERWRITE__ARCHIVE_OVERWRITE_MERGE;
            break;
        case 'R':
            ow = WORKSPACE__V1__ARCHIVE_OVERWRITE__ARCHIVE_OVERWRITE_REPLACE;
            break;
        default:
            return wsc_usage_error("cp: unknown option or missing value");
        }
    }
    if (argc - optind != 2)
        return wsc_usage_error("usage: wsctl cp -r [-z] [--merge|--replace] SRC DST "
                               "(one of them WS:PATH)");
    if (!recursive)
        return wsc_usage_error("cp: copies directories with -r (cat and put copy one file)");
    if (split_remote(argv[optind], &id, &path)) {
        char *other_id, *other_path;
        if (split_remote(argv[optind + 1], &other_id, &other_path))
            return wsc_usage_error("cp: one side must be local");
        return download(ctx, id, path, argv[optind + 1], gzip);
    }
    if (!split_remote(argv[optind + 1], &id, &path))
        return wsc_usage_error("cp: one side must be WS:PATH");
    return upload(ctx, argv[optind], id, path, gzip, ow);
}

/* ---- watch ---- */

static const char *event_name(Workspace__V1__WatchEventType t)
{
    switch (t) {
    case WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_READY:
        return "ready";
    case WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_CREATED:
        return "created";
    case WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_MODIFIED:
        return "modified";
    case WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_REMOVED:
        return "removed";
    case WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_MOVED:
        return "moved";
    case WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_OVERFLOW:
        return "overflow";
    case WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_GONE:
        return "gone";
    default:
        return "?";
    }
}

int wsc_cmd_watch(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"recursive", no_argument, NULL, 'r'},
        {"include", required_argument, NULL, 'I'},
        {"exclude", required_argument, NULL, 'X'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__WatchRequest req = WORKSPACE__V1__WATCH_REQUEST__INIT;
    char *include[GLOBS_MAX], *exclude[GLOBS_MAX];
    struct wsc_call *call = NULL;
    int opt, r, ret = 0;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "r", longopts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            req.recursive = true;
            break;
        case 'I':
        case 'X':
            if ((opt == 'I' ? req.n_include : req.n_exclude) == GLOBS_MAX)
                return wsc_usage_error("watch: more than %d globs", GLOBS_MAX);
            if (opt == 'I')
                include[req.n_include++] = optarg;
            else
                exclude[req.n_exclude++] = optarg;
            break;
        default:
            return wsc_usage_error("watch: unknown option or missing value");
        }
    }
    if (argc - optind < 1 || argc - optind > 2)
        return wsc_usage_error("usage: wsctl watch WS [PATH] [-r] [--include G] [--exclude G]");
    req.workspace_id = argv[optind];
    req.path = argc - optind == 2 ? argv[optind + 1] : ".";
    req.include = include;
    req.exclude = exclude;

    r = wsc_call_new(ctx->cl, "/workspace.v1.FileSystem/Watch", &call);
    if (r < 0)
        return wsc_report_errno("watch", r);
    (void)wsc_call_send(call, &req.base, true);
    for (;;) {
        Workspace__V1__WatchEvent *ev = NULL;
        r = wsc_call_recv(call, &workspace__v1__watch_event__descriptor, (ProtobufCMessage **)&ev);
        if (r <= 0)
            break;
        if (ctx->json) {
            r = wsc_json_emit(wsc_json_message(&ev->base));
        } else {
            if (ev->type == WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_MOVED)
                r = printf("moved %s -> %s\n", ev->from_path, ev->path);
            else if (ev->type == WORKSPACE__V1__WATCH_EVENT_TYPE__WATCH_EVENT_OVERFLOW)
                r = printf("overflow %" PRIu64 "\n", ev->dropped);
            else
                r = printf("%s %s\n", event_name(ev->type), ev->path);
            r = r < 0 || fflush(stdout) != 0 ? -EIO : 0;
        }
        workspace__v1__watch_event__free_unpacked(ev, NULL);
        if (r < 0) {
            wsc_call_cancel(call);
            ret = wsc_report_errno("stdout", r);
            break;
        }
    }
    if (wsc_call_status(call) < 0 && ret == 0)
        ret = wsc_report(wsc_call_error(call));
    wsc_call_free(call);
    return ret;
}

/* ---- snapshots ---- */

static void print_snapshot(const Workspace__V1__Snapshot *s)
{
    char when[64];

    wsc_format_time(s->created_at_unix_ms, when, sizeof(when));
    printf("%-31s %-16s %-35s %-13s %-20s %8" PRIu64 " files %12" PRIu64 " bytes ", s->id,
           s->name[0] ? s->name : "-", s->workspace_id, s->provider, when, s->files, s->bytes);
    wsc_print_map(stdout, s->labels, s->n_labels, ",");
    printf("\n");
}

int wsc_cmd_snapshot(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"name", required_argument, NULL, 'N'},
        {"label", required_argument, NULL, 'l'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__SnapshotRequest req = WORKSPACE__V1__SNAPSHOT_REQUEST__INIT;
    Workspace__V1__SnapshotResponse *resp = NULL;
    Workspace__V1__SnapshotRequest__LabelsEntry entries[WSC_KV_MAX];
    Workspace__V1__SnapshotRequest__LabelsEntry *ptrs[WSC_KV_MAX];
    struct wsc_kvs labels = {0};
    int opt, r;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "l:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'N':
            req.name = optarg;
            break;
        case 'l':
            r = wsc_kvs_add(&labels, optarg);
            if (r < 0)
                return wsc_usage_error("snapshot: --label wants KEY=VALUE (at most %d)",
                                       WSC_KV_MAX);
            break;
        default:
            return wsc_usage_error("snapshot: unknown option or missing value");
        }
    }
    if (argc - optind != 1)
        return wsc_usage_error("usage: wsctl snapshot WS [--name NAME] [--label K=V]...");
    req.workspace_id = argv[optind];
    for (size_t i = 0; i < labels.n; i++) {
        workspace__v1__snapshot_request__labels_entry__init(&entries[i]);
        entries[i].key = (char *)labels.key[i];
        entries[i].value = (char *)labels.value[i];
        ptrs[i] = &entries[i];
    }
    req.n_labels = labels.n;
    req.labels = ptrs;
    r = unary(ctx, "/workspace.v1.Workspaces/Snapshot", &req,
              &workspace__v1__snapshot_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json) {
        wsc_json_emit(wsc_json_message(&resp->base));
    } else if (resp->snapshot) {
        printf("%s\n", resp->snapshot->id);
        fprintf(stderr,
                "%" PRIu64 " files, %" PRIu64 " bytes (%" PRIu64 " new, %" PRIu64
                " read) in %" PRIu64 " ms\n",
                resp->snapshot->files, resp->snapshot->bytes, resp->snapshot->new_bytes,
                resp->snapshot->read_bytes, resp->snapshot->duration_ms);
    }
    workspace__v1__snapshot_response__free_unpacked(resp, NULL);
    return 0;
}

int wsc_cmd_snapshots(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"workspace", required_argument, NULL, 'w'},
        {"selector", required_argument, NULL, 'l'},
        {"name", required_argument, NULL, 'N'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__ListSnapshotsRequest req = WORKSPACE__V1__LIST_SNAPSHOTS_REQUEST__INIT;
    json_t *all = NULL;
    char *token = NULL;
    int opt, r = 0;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "l:w:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'w':
            req.workspace_id = optarg;
            break;
        case 'l':
            req.label_selector = optarg;
            break;
        case 'N':
            req.name = optarg;
            break;
        default:
            return wsc_usage_error("snapshots: unknown option or missing value");
        }
    }
    if (optind != argc)
        return wsc_usage_error("usage: wsctl snapshots [--workspace WS] [-l SELECTOR] "
                               "[--name NAME]");
    if (ctx->json && !(all = json_array()))
        return wsc_report_errno("snapshots", -ENOMEM);
    for (int page = 0; page < LIST_PAGES_MAX; page++) {
        Workspace__V1__ListSnapshotsResponse *resp = NULL;
        req.page_token = token ? token : "";
        r = unary(ctx, "/workspace.v1.Workspaces/ListSnapshots", &req,
                  &workspace__v1__list_snapshots_response__descriptor, &resp);
        if (r)
            break;
        for (size_t i = 0; i < resp->n_snapshots; i++) {
            if (all)
                json_array_append_new(all, wsc_json_message(&resp->snapshots[i]->base));
            else
                print_snapshot(resp->snapshots[i]);
        }
        free(token);
        token = resp->next_page_token[0] ? strdup(resp->next_page_token) : NULL;
        workspace__v1__list_snapshots_response__free_unpacked(resp, NULL);
        if (!token)
            break;
    }
    free(token);
    if (all) {
        if (r == 0)
            wsc_json_emit(all);
        else
            json_decref(all);
    }
    return r;
}

int wsc_cmd_delete_snapshot(struct wsc_ctx *ctx, int argc, char **argv)
{
    Workspace__V1__DeleteSnapshotRequest req = WORKSPACE__V1__DELETE_SNAPSHOT_REQUEST__INIT;
    Workspace__V1__DeleteSnapshotResponse *resp = NULL;

    if (argc != 2 || argv[1][0] == '-')
        return wsc_usage_error("usage: wsctl delete-snapshot SNAPSHOT");
    req.snapshot_id = argv[1];
    int r = unary(ctx, "/workspace.v1.Workspaces/DeleteSnapshot", &req,
                  &workspace__v1__delete_snapshot_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json)
        wsc_json_emit(wsc_json_message(&resp->base));
    else
        fprintf(stderr, "deleted; %" PRIu64 " bytes reclaimed\n", resp->reclaimed_bytes);
    workspace__v1__delete_snapshot_response__free_unpacked(resp, NULL);
    return 0;
}

int wsc_cmd_restore(struct wsc_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"force", no_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    Workspace__V1__RestoreRequest req = WORKSPACE__V1__RESTORE_REQUEST__INIT;
    Workspace__V1__RestoreResponse *resp = NULL;
    int opt;

    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "f", longopts, NULL)) != -1) {
        if (opt != 'f')
            return wsc_usage_error("restore: unknown option");
        req.force = true;
    }
    if (argc - optind != 2)
        return wsc_usage_error("usage: wsctl restore WS SNAPSHOT [-f]");
    req.workspace_id = argv[optind];
    req.snapshot_id = argv[optind + 1];
    int r = unary(ctx, "/workspace.v1.Workspaces/Restore", &req,
                  &workspace__v1__restore_response__descriptor, &resp);
    if (r)
        return r;
    if (ctx->json)
        wsc_json_emit(wsc_json_message(&resp->base));
    else
        fprintf(stderr, "restored %s; %u commands ended\n",
                resp->snapshot ? resp->snapshot->id : "?", resp->processes_ended);
    workspace__v1__restore_response__free_unpacked(resp, NULL);
    return 0;
}
