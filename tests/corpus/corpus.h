// The hostile-path corpus (tests/corpus/paths/*.case, format in its
// README.md), shared by the tests that run it: tests/unit/posix:fs_test
// (against server/posix/fs.c) and tests/e2e:corpus_test (over gRPC).
//
// Here: the case format and its parser, the README's fixture tree, and the
// host-side checks both tests make after every operation. How an operation
// runs and how its result is compared stay in each test.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace wscorpus
{

// The result names a case may give: "OK" and the error names of the README.
const std::set<std::string> &ResultNames();

// The operations a case may list, in the README's order.
const std::vector<std::string> &Ops();

struct CorpusCase {
    std::string file; // base name
    std::string path;
    std::map<std::string, std::string> expect; // op -> result name
    std::set<std::string> requires_;
};

// tests/corpus/<name> in the test's runfiles ("" outside `bazel test`);
// "paths" is the hostile-path corpus, "commands" the hostile-command one.
std::string CorpusDir(const std::string &name = "paths");

// The base names of all *.case files in CorpusDir(name), sorted.
std::vector<std::string> CorpusFiles(const std::string &name = "paths");

// Parses CorpusDir()/`file`; on failure says why in `*err`.
bool ParseCase(const std::string &file, CorpusCase *c, std::string *err);

// Decodes the corpus escapes: \\, \n, \t, \xHH and \r{N:text} (text repeated
// N times). Shared by every corpus format of the project.
bool Unescape(const std::string &in, std::string *out, std::string *err);

// A test name for a parameter that is a .case file name.
std::string CaseName(const ::testing::TestParamInfo<std::string> &info);

// ---- the fixture ----

// Builds the README's tree: the workspace `ws` (made if missing) and
// `outside` (made here; the fixture's relative links expect it to be ws's
// sibling). Returns whether `chardev` could be made; aborts on any other
// failure.
bool BuildFixture(const std::string &ws, const std::string &outside);

// ---- host-side checks ----

std::string ReadAll(const std::string &path);

// Everything observable about a tree, without following symlinks (names,
// types, modes, sizes, mtimes, contents, link targets).
std::string TreeSignature(const std::string &root);

// The names in `dir`.
std::set<std::string> ListNames(const std::string &dir);

// Paths of leftover temp files anywhere under `root`.
std::vector<std::string> TempFiles(const std::string &root);

} // namespace wscorpus
