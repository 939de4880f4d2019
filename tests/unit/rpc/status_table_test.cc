// The one error table: every row, and the fallback.
#include <errno.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

extern "C" {
#include "server/base/errors.h"
#include "server/rpc/call.h"
#include "workspace/v1/common.pb-c.h"
}

namespace
{

struct Row {
    int err;
    grpc_status_code code;
    const char *reason;
};

const Row kRows[] = {
    {-EXDEV, GRPC_STATUS_INVALID_ARGUMENT, "PATH_ESCAPE"},
    {-ELOOP, GRPC_STATUS_INVALID_ARGUMENT, "SYMLINK_LOOP"},
    {-WS_ESYMLINK_LEAF, GRPC_STATUS_INVALID_ARGUMENT, "SYMLINK_LEAF"},
    {-WS_EBADPATTERN, GRPC_STATUS_INVALID_ARGUMENT, "BAD_PATTERN"},
    {-WS_EBADPATH, GRPC_STATUS_INVALID_ARGUMENT, "BAD_PATH"},
    {-ENAMETOOLONG, GRPC_STATUS_INVALID_ARGUMENT, "BAD_PATH"},
    {-WS_EMALFORMED, GRPC_STATUS_INVALID_ARGUMENT, "MALFORMED"},
    {-EINVAL, GRPC_STATUS_INVALID_ARGUMENT, "MALFORMED"},
    {-WS_ELIMIT, GRPC_STATUS_INVALID_ARGUMENT, "LIMIT"},
    {-WS_EBADREF, GRPC_STATUS_INVALID_ARGUMENT, "BAD_REF"},
    {-EFBIG, GRPC_STATUS_RESOURCE_EXHAUSTED, "SIZE_CAP"},
    {-WS_EQUOTA, GRPC_STATUS_RESOURCE_EXHAUSTED, "QUOTA"},
    {-ENOSPC, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_SPACE"},
    {-EDQUOT, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_SPACE"},
    {-ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_MEMORY"},
    {-EMFILE, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_DESCRIPTORS"},
    {-ENFILE, GRPC_STATUS_RESOURCE_EXHAUSTED, "NO_DESCRIPTORS"},
    {-ENOENT, GRPC_STATUS_NOT_FOUND, "NO_SUCH_FILE"},
    {-WS_ENOWORKSPACE, GRPC_STATUS_NOT_FOUND, "NO_SUCH_WORKSPACE"},
    {-ESRCH, GRPC_STATUS_NOT_FOUND, "NO_SUCH_PROCESS"},
    {-WS_EEVICTED, GRPC_STATUS_NOT_FOUND, "WORKSPACE_EVICTED"},
    {-WS_ECAPABILITY, GRPC_STATUS_FAILED_PRECONDITION, "CAPABILITY_MISSING"},
    {-WS_EDISABLED, GRPC_STATUS_FAILED_PRECONDITION, "PROVIDER_DISABLED"},
    {-WS_EFAILED, GRPC_STATUS_FAILED_PRECONDITION, "WORKSPACE_FAILED"},
    {-WS_ECONFLICT, GRPC_STATUS_FAILED_PRECONDITION, "CONFLICT"},
    {-WS_ENOMATCH, GRPC_STATUS_FAILED_PRECONDITION, "NO_MATCH"},
    {-WS_EMULTIMATCH, GRPC_STATUS_FAILED_PRECONDITION, "MULTIPLE_MATCHES"},
    {-WS_ESPECIAL, GRPC_STATUS_FAILED_PRECONDITION, "SPECIAL_FILE"},
    {-WS_EHARDLINK, GRPC_STATUS_FAILED_PRECONDITION, "HARDLINK"},
    {-EISDIR, GRPC_STATUS_FAILED_PRECONDITION, "IS_DIRECTORY"},
    {-ENOTDIR, GRPC_STATUS_FAILED_PRECONDITION, "NOT_DIRECTORY"},
    {-ENOTEMPTY, GRPC_STATUS_FAILED_PRECONDITION, "NOT_EMPTY"},
    {-EROFS, GRPC_STATUS_FAILED_PRECONDITION, "READ_ONLY"},
    {-EBUSY, GRPC_STATUS_FAILED_PRECONDITION, "BUSY"},
    {-EAGAIN, GRPC_STATUS_UNAVAILABLE, "RETRY"},
    {-ESTALE, GRPC_STATUS_UNAVAILABLE, "RETRY"},
    {-EEXIST, GRPC_STATUS_ALREADY_EXISTS, "EXISTS"},
    {-EACCES, GRPC_STATUS_PERMISSION_DENIED, "ACCESS_DENIED"},
    {-EPERM, GRPC_STATUS_PERMISSION_DENIED, "ACCESS_DENIED"},
    {-WS_ENOTALLOWED, GRPC_STATUS_PERMISSION_DENIED, "COMMAND_NOT_ALLOWED"},
    {-WS_EMETACHAR, GRPC_STATUS_PERMISSION_DENIED, "METACHAR"},
    {-WS_EGLOB, GRPC_STATUS_PERMISSION_DENIED, "GLOB"},
    {-WS_EENVDENIED, GRPC_STATUS_PERMISSION_DENIED, "ENV_DENIED"},
    {-WS_ECWDESCAPE, GRPC_STATUS_PERMISSION_DENIED, "CWD_ESCAPE"},
    {-WS_EARGLIMIT, GRPC_STATUS_PERMISSION_DENIED, "ARG_LIMIT"},
    {-WS_EPOLICY, GRPC_STATUS_PERMISSION_DENIED, "POLICY"},
    {-ECANCELED, GRPC_STATUS_CANCELLED, "CANCELLED"},
    {-ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED, "DEADLINE"},
    {-ESHUTDOWN, GRPC_STATUS_UNAVAILABLE, "SHUTTING_DOWN"},
    {-ENOSYS, GRPC_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED"},
    {-EIO, GRPC_STATUS_INTERNAL, "INTERNAL"},
    {-WS_EINTERNAL, GRPC_STATUS_INTERNAL, "INTERNAL"},
    {0, GRPC_STATUS_INTERNAL, "INTERNAL"},
    {-99999, GRPC_STATUS_INTERNAL, "INTERNAL"},
};

TEST(StatusTable, EveryRow)
{
    for (const Row &row : kRows) {
        grpc_status_code code = GRPC_STATUS_OK;
        const char *reason = nullptr;
        ws_rpc_error_status(row.err, &code, &reason);
        EXPECT_EQ(code, row.code) << "err " << row.err;
        ASSERT_NE(reason, nullptr) << "err " << row.err;
        EXPECT_STREQ(reason, row.reason) << "err " << row.err;
    }
}

TEST(StatusTable, AcceptsNullOutputs)
{
    grpc_status_code code = GRPC_STATUS_OK;
    const char *reason = nullptr;
    ws_rpc_error_status(-ENOENT, nullptr, &reason);
    EXPECT_STREQ(reason, "NO_SUCH_FILE");
    ws_rpc_error_status(-ENOENT, &code, nullptr);
    EXPECT_EQ(code, GRPC_STATUS_NOT_FOUND);
}

// Every reason of workspace.v1.ErrorReason has a row in the server's table,
// under the same name: a reason added to the proto without a row fails here.
TEST(StatusTable, EveryReasonOfTheProto)
{
    const ProtobufCEnumDescriptor *d = &workspace__v1__error_reason__descriptor;
    ASSERT_GE(d->n_values, 48u) << "the proto lost reasons";
    for (unsigned i = 0; i < d->n_values; i++) {
        auto reason = static_cast<Workspace__V1__ErrorReason>(d->values[i].value);
        if (reason == WORKSPACE__V1__ERROR_REASON__ERROR_REASON_UNSPECIFIED) {
            EXPECT_EQ(ws_rpc_reason_name(reason), nullptr);
            EXPECT_FALSE(ws_rpc_reason_info(reason, nullptr, nullptr));
            continue;
        }
        grpc_status_code code = GRPC_STATUS_OK;
        const char *message = nullptr;
        EXPECT_TRUE(ws_rpc_reason_info(reason, &code, &message))
            << d->values[i].name << " has no row in the server's table";
        EXPECT_STREQ(ws_rpc_reason_name(reason), d->values[i].name);
        EXPECT_NE(code, GRPC_STATUS_OK) << d->values[i].name;
        ASSERT_NE(message, nullptr) << d->values[i].name;
        EXPECT_GT(strlen(message), 0u) << d->values[i].name;
    }
    EXPECT_FALSE(
        ws_rpc_reason_info(static_cast<Workspace__V1__ErrorReason>(9999), nullptr, nullptr));
}

const std::map<std::string, grpc_status_code> kCodes = {
    {"CANCELLED", GRPC_STATUS_CANCELLED},
    {"INVALID_ARGUMENT", GRPC_STATUS_INVALID_ARGUMENT},
    {"DEADLINE_EXCEEDED", GRPC_STATUS_DEADLINE_EXCEEDED},
    {"NOT_FOUND", GRPC_STATUS_NOT_FOUND},
    {"ALREADY_EXISTS", GRPC_STATUS_ALREADY_EXISTS},
    {"PERMISSION_DENIED", GRPC_STATUS_PERMISSION_DENIED},
    {"RESOURCE_EXHAUSTED", GRPC_STATUS_RESOURCE_EXHAUSTED},
    {"FAILED_PRECONDITION", GRPC_STATUS_FAILED_PRECONDITION},
    {"UNIMPLEMENTED", GRPC_STATUS_UNIMPLEMENTED},
    {"INTERNAL", GRPC_STATUS_INTERNAL},
    {"UNAVAILABLE", GRPC_STATUS_UNAVAILABLE},
    {"OUT_OF_RANGE", GRPC_STATUS_OUT_OF_RANGE},
};

// The code each value's comment in the proto documents (its first word) is
// the code the server sends with it.
TEST(StatusTable, CodesAsTheProtoDocumentsThem)
{
    const char *srcdir = getenv("TEST_SRCDIR");
    ASSERT_NE(srcdir, nullptr);
    std::ifstream in(std::string(srcdir) + "/workspaced/proto/workspace/v1/common.proto");
    ASSERT_TRUE(in) << "common.proto not in the runfiles";
    std::stringstream text;
    text << in.rdbuf();
    std::string proto = text.str();
    size_t start = proto.find("enum ErrorReason {");
    ASSERT_NE(start, std::string::npos);
    std::string body = proto.substr(start, proto.find("\n}", start) - start);

    // A comment block, then "NAME = N;". (Read line by line: GCC 12's
    // std::regex does not build warning-free under the sanitizers.)
    const ProtobufCEnumDescriptor *d = &workspace__v1__error_reason__descriptor;
    std::istringstream lines(body);
    std::string line, first; // the first word of the comment block above
    bool in_comment = false;
    unsigned seen = 0;
    while (std::getline(lines, line)) {
        size_t b = line.find_first_not_of(' ');
        std::string t = b == std::string::npos ? "" : line.substr(b);
        if (t.rfind("//", 0) == 0) {
            if (!in_comment) {
                size_t w = t.find_first_not_of("/ ");
                size_t e = t.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", w);
                first = w == std::string::npos ? "" : t.substr(w, e - w);
                in_comment = true;
            }
            continue;
        }
        in_comment = false;
        size_t eq = t.find(" = ");
        if (eq == std::string::npos || t.empty() || t.back() != ';' || first.empty()) {
            first.clear();
            continue;
        }
        std::string name = t.substr(0, eq);
        auto code = kCodes.find(first);
        ASSERT_NE(code, kCodes.end())
            << name << ": comment starts with '" << first << "', not a gRPC code";
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value_by_name(d, name.c_str());
        ASSERT_NE(v, nullptr) << name;
        grpc_status_code got = GRPC_STATUS_OK;
        ASSERT_TRUE(
            ws_rpc_reason_info(static_cast<Workspace__V1__ErrorReason>(v->value), &got, nullptr))
            << name;
        EXPECT_EQ(got, code->second) << name << " is documented as " << first;
        first.clear();
        seen++;
    }
    EXPECT_EQ(seen + 1, d->n_values) << "every value but UNSPECIFIED has a documented code";
}

// The table's error numbers map only to reasons of the proto.
TEST(StatusTable, EveryErrorNumberMapsToAReasonOfTheProto)
{
    for (const Row &row : kRows) {
        Workspace__V1__ErrorReason r = ws_rpc_error_reason(row.err);
        EXPECT_NE(protobuf_c_enum_descriptor_get_value(&workspace__v1__error_reason__descriptor,
                                                       static_cast<int>(r)),
                  nullptr)
            << row.err;
    }
}

} // namespace
