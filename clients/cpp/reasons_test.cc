// The C++ client's typed errors against the one list of reasons, the
// generated enum workspace.v1.ErrorReason: every value but
// ERROR_REASON_UNSPECIFIED decodes to its own subclass of workspaced::Error,
// and every typed error names a value of the enum. Also the version
// constant against the repository's VERSION file.

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <typeindex>

#include <gtest/gtest.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "workspaced.h"

namespace
{

namespace pb = ::workspace::v1;

grpc::Status MakeStatus(const std::string &reason)
{
    google::rpc::ErrorInfo info;
    info.set_domain(workspaced::kErrorDomain);
    info.set_reason(reason);
    (*info.mutable_metadata())["field"] = "x";
    google::rpc::Status st;
    st.set_code(grpc::StatusCode::FAILED_PRECONDITION);
    st.set_message("msg");
    st.add_details()->PackFrom(info);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "msg", st.SerializeAsString());
}

// The dynamic type ThrowStatus picks for `reason`.
std::type_index ThrownType(const std::string &reason)
{
    try {
        workspaced::ThrowStatus(MakeStatus(reason));
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(e.reason(), reason);
        EXPECT_EQ(e.metadata().at("field"), "x");
        return typeid(e);
    }
    ADD_FAILURE() << reason << ": nothing thrown";
    return typeid(void);
}

TEST(Reasons, EveryEnumValueHasItsOwnTypedError)
{
    const google::protobuf::EnumDescriptor *d = pb::ErrorReason_descriptor();
    ASSERT_GT(d->value_count(), 1);
    std::map<std::type_index, std::string> seen;
    for (int i = 0; i < d->value_count(); i++) {
        const google::protobuf::EnumValueDescriptor *v = d->value(i);
        if (v->number() == pb::ERROR_REASON_UNSPECIFIED)
            continue;
        std::type_index t = ThrownType(v->name());
        EXPECT_NE(t, std::type_index(typeid(workspaced::Error)))
            << v->name() << " has no typed error in WORKSPACED_ERROR_REASONS";
        EXPECT_NE(t, std::type_index(typeid(workspaced::Unauthenticated))) << v->name();
        if (t != std::type_index(typeid(workspaced::Error))) {
            auto [it, fresh] = seen.emplace(t, v->name());
            EXPECT_TRUE(fresh) << v->name() << " and " << it->second << " share a type";
        }
        try {
            workspaced::ThrowStatus(MakeStatus(v->name()));
        } catch (const workspaced::Error &e) {
            EXPECT_EQ(e.reason_code(), v->number()) << v->name();
        }
    }
}

TEST(Reasons, EveryTypedErrorNamesAnEnumValue)
{
    const google::protobuf::EnumDescriptor *d = pb::ErrorReason_descriptor();
    int listed = 0;
    std::set<std::string> names;
#define CHECK_REASON(Name, Reason)                                                                 \
    listed++;                                                                                      \
    names.insert(#Reason);                                                                         \
    EXPECT_NE(d->FindValueByName(#Reason), nullptr) << #Name " names " #Reason;                    \
    EXPECT_NE(std::string(#Reason), "ERROR_REASON_UNSPECIFIED");                                   \
    EXPECT_EQ(ThrownType(#Reason), std::type_index(typeid(workspaced::Name))) << #Reason;
    WORKSPACED_ERROR_REASONS(CHECK_REASON)
#undef CHECK_REASON
    EXPECT_EQ(names.size(), static_cast<size_t>(listed)) << "a reason is listed twice";
    EXPECT_EQ(listed, d->value_count() - 1);
}

// A newer server's reason: the base type, the reason string kept.
TEST(Reasons, UnknownReasonKeepsTheString)
{
    try {
        workspaced::ThrowStatus(MakeStatus("SOME_FUTURE_REASON"));
        FAIL() << "nothing thrown";
    } catch (const workspaced::Error &e) {
        EXPECT_EQ(std::type_index(typeid(e)), std::type_index(typeid(workspaced::Error)));
        EXPECT_EQ(e.reason(), "SOME_FUTURE_REASON");
        EXPECT_EQ(e.reason_code(), pb::ERROR_REASON_UNSPECIFIED);
        EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION);
    }
    // The bare UNAUTHENTICATED the server refuses credentials with.
    EXPECT_THROW(
        workspaced::ThrowStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "unauthenticated")),
        workspaced::Unauthenticated);
}

TEST(Version, IsTheRepositoryVersion)
{
    std::ifstream in("VERSION");
    ASSERT_TRUE(in) << "VERSION not in the runfiles";
    std::string v;
    std::getline(in, v);
    EXPECT_EQ(std::string(workspaced::kVersion), v);
    std::ostringstream parts;
    parts << WORKSPACED_VERSION_MAJOR << "." << WORKSPACED_VERSION_MINOR << "."
          << WORKSPACED_VERSION_PATCH;
    EXPECT_EQ(v.rfind(parts.str(), 0), 0u) << parts.str() << " vs " << v;
}

} // namespace
