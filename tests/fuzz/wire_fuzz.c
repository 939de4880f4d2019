/* The server's wire-level request validator (server/rpc/validate.c):
 * every string field at any depth valid UTF-8 without NUL, tags and
 * lengths well formed, before protobuf-c unpacks a request.
 *
 * The first input byte picks one of the API's request types (every
 * method's request, health and reflection included); the rest is the
 * serialized request. It is validated, then unpacked with protobuf-c as
 * the server would, and what unpacks is walked.
 *
 * Checked besides memory safety: a request the validator accepts
 * unpacks to strings that are all valid UTF-8, and packing it again gives
 * bytes the validator accepts too.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "server/base/errors.h"
#include "server/base/utf8.h"
#include "tests/fuzz/fuzz.h"
#include "workspace/v1/exec.pb-c.h"
#include "workspace/v1/filesystem.pb-c.h"
#include "workspace/v1/providers.pb-c.h"
#include "workspace/v1/workspaces.pb-c.h"

/* server/rpc/internal.h, private to //server/rpc:core. */
int ws_rpc_validate_message(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                            char *field, size_t field_size);

static const ProtobufCMessageDescriptor *const requests[] = {
    &workspace__v1__attach_request__descriptor,
    &workspace__v1__close_input_request__descriptor,
    &workspace__v1__close_request__descriptor,
    &workspace__v1__delete_snapshot_request__descriptor,
    &workspace__v1__describe_request__descriptor,
    &workspace__v1__edit_file_request__descriptor,
    &workspace__v1__extend_request__descriptor,
    &workspace__v1__glob_request__descriptor,
    &workspace__v1__grep_request__descriptor,
    &workspace__v1__list_dir_request__descriptor,
    &workspace__v1__list_processes_request__descriptor,
    &workspace__v1__list_providers_request__descriptor,
    &workspace__v1__list_request__descriptor,
    &workspace__v1__list_snapshots_request__descriptor,
    &workspace__v1__make_dir_request__descriptor,
    &workspace__v1__move_request__descriptor,
    &workspace__v1__open_request__descriptor,
    &workspace__v1__read_archive_request__descriptor,
    &workspace__v1__read_audit_request__descriptor,
    &workspace__v1__read_file_request__descriptor,
    &workspace__v1__remove_request__descriptor,
    &workspace__v1__resize_request__descriptor,
    &workspace__v1__resolve_request__descriptor,
    &workspace__v1__restore_request__descriptor,
    &workspace__v1__run_request__descriptor,
    &workspace__v1__send_input_request__descriptor,
    &workspace__v1__send_signal_request__descriptor,
    &workspace__v1__set_secrets_request__descriptor,
    &workspace__v1__snapshot_request__descriptor,
    &workspace__v1__start_request__descriptor,
    &workspace__v1__stat_request__descriptor,
    &workspace__v1__watch_request__descriptor,
    &workspace__v1__write_archive_request__descriptor,
    &workspace__v1__write_file_request__descriptor,
    &grpc__health__v1__health_check_request__descriptor,
    &grpc__reflection__v1alpha__server_reflection_request__descriptor,
};
#define N_REQUESTS (sizeof(requests) / sizeof(requests[0]))

static void check_string(const char *s)
{
    if (s)
        FUZZ_CHECK(ws_utf8_valid(s, strlen(s)), "an accepted request unpacked a bad string");
}

/* Every string of an unpacked message, nested messages included. */
static void walk(const ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *desc = m->descriptor;

    FUZZ_CHECK(depth < 200, "nesting deeper than the input allows");
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &desc->fields[i];
        const char *base = (const char *)m;
        const void *member = base + fd->offset;

        if (fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(const void *)(base + fd->quantifier_offset) != fd->id)
            continue;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(const void *)(base + fd->quantifier_offset);
            void *const *arr = *(void *const *const *)member;
            for (size_t j = 0; j < n; j++) {
                if (fd->type == PROTOBUF_C_TYPE_STRING)
                    check_string(arr[j]);
                else if (arr[j])
                    walk(arr[j], depth + 1);
            }
        } else if (fd->type == PROTOBUF_C_TYPE_STRING) {
            check_string(*(const char *const *)member);
        } else {
            const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)member;
            if (sub)
                walk(sub, depth + 1);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCMessageDescriptor *desc;
    ProtobufCMessage *m;
    char field[256];
    int r;

    if (size < 1)
        return 0;
    desc = requests[data[0] % N_REQUESTS];
    data++;
    size--;

    field[0] = '\0';
    r = ws_rpc_validate_message(desc, data, size, field, sizeof(field));
    FUZZ_CHECK(r == 0 || r == -WS_EMALFORMED, "validator: unexpected error");
    FUZZ_CHECK(memchr(field, '\0', sizeof(field)) != NULL, "field path unterminated");

    m = protobuf_c_message_unpack(desc, NULL, size, data);
    if (!m)
        return 0;
    if (r == 0) {
        size_t len = protobuf_c_message_get_packed_size(m);
        uint8_t *buf = malloc(len ? len : 1);

        walk(m, 0);
        FUZZ_CHECK(buf != NULL, "malloc");
        FUZZ_CHECK(protobuf_c_message_pack(m, buf) == len, "packed size");
        FUZZ_CHECK(ws_rpc_validate_message(desc, buf, len, field, sizeof(field)) == 0,
                   "an accepted request packs again to one the validator refuses");
        free(buf);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
