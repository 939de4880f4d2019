// Tests for server/guard/guard.c, the shell guard.
//
// Hostile commands are data: tests/corpus/commands/*.case (format in its
// README.md), each run through ws_guard_check with the README's policy and
// compared exactly (error number, "token", "rule", "char", "limit"; for
// accepted cases the resolved executable, the words, env entries and cwd).
// The tests below cover what a case file cannot express: symlinks made at
// run time, host variables, the result's exact layout, custom limits and
// the API contract.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/corpus/corpus.h"

extern "C" {
#include "server/base/errors.h"
#include "server/guard/guard.h"
}

namespace fs = std::filesystem;

namespace
{

const char kPath[] = "/usr/local/bin:/usr/bin:/bin";
const char kHome[] = "/srv/ws/home";
const char kRun[] = "/srv/ws/run";

// What ws_guard_check gives back, flattened for comparison.
struct Outcome {
    int err = 0;
    std::map<std::string, std::string> meta;
    std::string message;
    std::vector<std::string> argv;
    std::vector<std::string> envp;
    std::string cwd;
};

struct Input {
    std::vector<std::string> allowed{"ls", "cat", "echo", "git"};
    std::vector<std::string> pass_env;
    std::string path = kPath;
    struct ws_guard_limits limits = {};
    bool has_command = false;
    std::string command;
    std::vector<std::string> argv;
    std::vector<std::pair<std::string, std::string>> env;
    bool has_cwd = false;
    std::string cwd;
    // A command on the host (local-bash), with kRun as XDG_RUNTIME_DIR;
    // else the isolated providers' policy.
    bool host = false;
    bool pty = false;
};

Outcome Check(const Input &in)
{
    std::vector<const char *> allowed, pass, argv;
    std::vector<struct ws_guard_env> env;
    for (const auto &a : in.allowed)
        allowed.push_back(a.c_str());
    for (const auto &p : in.pass_env)
        pass.push_back(p.c_str());
    for (const auto &a : in.argv)
        argv.push_back(a.c_str());
    for (const auto &e : in.env)
        env.push_back({e.first.c_str(), e.second.c_str()});

    struct ws_guard_policy policy = {};
    policy.allowed = allowed.data();
    policy.n_allowed = allowed.size();
    policy.pass_env = pass.data();
    policy.n_pass_env = pass.size();
    policy.path = in.path.c_str();
    policy.home = kHome;
    policy.host = in.host;
    policy.runtime_dir = in.host ? kRun : nullptr;
    policy.limits = in.limits;

    struct ws_guard_request req = {};
    req.argv = argv.data();
    req.argc = argv.size();
    if (in.has_command) {
        req.command = in.command.data();
        req.command_len = in.command.size();
    }
    req.env = env.data();
    req.n_env = env.size();
    req.cwd = in.has_cwd ? in.cwd.c_str() : nullptr;
    req.pty = in.pty;

    struct ws_diag d = {};
    auto *const sentinel = reinterpret_cast<struct ws_guard_result *>(0x1);
    struct ws_guard_result *res = sentinel;
    Outcome out;
    out.err = ws_guard_check(&policy, &req, &d, &res);
    out.message = d.message;
    for (int i = 0; i < d.n_meta; i++)
        out.meta[d.key[i]] = d.value[i];
    if (out.err < 0) {
        EXPECT_EQ(res, sentinel) << "ret_res written on failure";
        EXPECT_FALSE(out.message.empty()) << "refusal without a message";
        return out;
    }
    EXPECT_EQ(out.err, 0);
    EXPECT_EQ(d.n_meta, 0);
    EXPECT_NE(res, sentinel);
    if (res == sentinel || !res)
        return out;
    for (size_t i = 0; i < res->argc; i++)
        out.argv.push_back(res->argv[i]);
    EXPECT_EQ(res->argv[res->argc], nullptr);
    for (size_t i = 0; i < res->n_env; i++)
        out.envp.push_back(res->envp[i]);
    EXPECT_EQ(res->envp[res->n_env], nullptr);
    out.cwd = res->cwd;
    EXPECT_EQ(ws_guard_result_free(res), nullptr);
    return out;
}

Input Cmd(const std::string &command)
{
    Input in;
    in.has_command = true;
    in.command = command;
    return in;
}

Input Argv(std::vector<std::string> argv)
{
    Input in;
    in.argv = std::move(argv);
    return in;
}

// The canonical path the policy's PATH gives `name`, as the guard should
// find it.
std::string Resolved(const std::string &name)
{
    for (const char *dir : {"/usr/local/bin/", "/usr/bin/", "/bin/"}) {
        std::string cand = dir + name;
        struct stat st;
        if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            access(cand.c_str(), X_OK) == 0) {
            char *r = realpath(cand.c_str(), nullptr);
            std::string s = r ? r : "";
            free(r);
            return s;
        }
    }
    return "";
}

const std::map<std::string, int> &ErrorNames()
{
    static const std::map<std::string, int> names = {
        {"OK", 0},
        {"WS_ENOTALLOWED", -WS_ENOTALLOWED},
        {"WS_EMETACHAR", -WS_EMETACHAR},
        {"WS_EGLOB", -WS_EGLOB},
        {"WS_EENVDENIED", -WS_EENVDENIED},
        {"WS_ECWDESCAPE", -WS_ECWDESCAPE},
        {"WS_EARGLIMIT", -WS_EARGLIMIT},
        {"WS_EMALFORMED", -WS_EMALFORMED},
        {"WS_EBADPATH", -WS_EBADPATH},
    };
    return names;
}

// ---- the corpus ----

std::string CorpusDir()
{
    return wscorpus::CorpusDir("commands");
}

std::vector<std::string> CorpusFiles()
{
    return wscorpus::CorpusFiles("commands");
}

struct Case {
    Input in;
    std::string expect;
    std::map<std::string, std::string> meta; // token, rule, char, limit
    std::string exe;
    bool has_words = false;
    std::vector<std::string> words;
    std::vector<std::string> envp;
    bool has_result_cwd = false;
    std::string result_cwd;
};

bool ParseCase(const std::string &file, Case *c, std::string *err)
{
    std::ifstream in(CorpusDir() + "/" + file);
    if (!in) {
        *err = "cannot open";
        return false;
    }
    bool allowed_given = false;
    std::string line;
    int lineno = 0;
    // The corpus runs under local-bash's policy (README).
    c->in.host = true;
    while (std::getline(in, line)) {
        lineno++;
        if (line.empty() || line[0] == '#')
            continue;
        auto fail = [&](const std::string &why) {
            *err = "line " + std::to_string(lineno) + ": " + why;
            return false;
        };
        size_t colon = line.find(':');
        if (colon == std::string::npos)
            return fail("no ':'");
        std::string key = line.substr(0, colon);
        std::string raw = line.substr(colon + 1);
        // Exactly one space after the colon is syntax; the rest is the value.
        if (!raw.empty() && raw[0] == ' ')
            raw.erase(0, 1);
        std::string value, value2;
        if (key == "env") {
            size_t eq = raw.find('=');
            if (eq == std::string::npos)
                return fail("env without '='");
            if (!wscorpus::Unescape(raw.substr(0, eq), &value, err) ||
                !wscorpus::Unescape(raw.substr(eq + 1), &value2, err))
                return fail(*err);
            c->in.env.emplace_back(value, value2);
            continue;
        }
        if (!wscorpus::Unescape(raw, &value, err))
            return fail(*err);
        if (key == "command") {
            c->in.has_command = true;
            c->in.command = value;
        } else if (key == "argv") {
            c->in.argv.push_back(value);
        } else if (key == "cwd") {
            c->in.has_cwd = true;
            c->in.cwd = value;
        } else if (key == "allowed") {
            if (!allowed_given)
                c->in.allowed.clear();
            allowed_given = true;
            c->in.allowed.push_back(value);
        } else if (key == "allowlist") {
            if (value != "empty")
                return fail("allowlist: only 'empty'");
            allowed_given = true;
            c->in.allowed.clear();
        } else if (key == "expect") {
            if (!ErrorNames().count(value))
                return fail("unknown result " + value);
            c->expect = value;
        } else if (key == "token" || key == "rule" || key == "char" || key == "limit") {
            c->meta[key] = value;
        } else if (key == "exe") {
            c->exe = value;
        } else if (key == "word") {
            c->has_words = true;
            c->words.push_back(value);
        } else if (key == "envp") {
            c->envp.push_back(value);
        } else if (key == "result_cwd") {
            c->has_result_cwd = true;
            c->result_cwd = value;
        } else {
            return fail("unknown key " + key);
        }
    }
    if (c->expect.empty()) {
        *err = "no expect";
        return false;
    }
    if (c->expect != "OK" && !c->meta.count("token")) {
        *err = "a refusal must name its token";
        return false;
    }
    if (c->expect == "OK" && c->exe.empty()) {
        *err = "an accepted case must name its exe";
        return false;
    }
    return true;
}

std::string CaseName(const ::testing::TestParamInfo<std::string> &info)
{
    std::string name;
    for (char ch : info.param.substr(0, info.param.size() - 5))
        name += isalnum((unsigned char)ch) ? ch : '_';
    return name;
}

class Corpus : public ::testing::TestWithParam<std::string>
{
};

TEST_P(Corpus, Case)
{
    Case c;
    std::string err;
    ASSERT_TRUE(ParseCase(GetParam(), &c, &err)) << GetParam() << ": " << err;

    Outcome out = Check(c.in);
    ASSERT_EQ(out.err, ErrorNames().at(c.expect))
        << "expected " << c.expect << "; message: " << out.message
        << "; token: " << out.meta["token"];
    for (const auto &[key, value] : c.meta) {
        ASSERT_TRUE(out.meta.count(key)) << "no metadata " << key;
        EXPECT_EQ(out.meta[key], value) << "metadata " << key;
    }
    if (c.expect != "OK")
        return;

    std::string exe = Resolved(c.exe);
    ASSERT_FALSE(exe.empty()) << c.exe << " not on this host";
    ASSERT_FALSE(out.argv.empty());
    EXPECT_EQ(out.argv[0], exe);
    if (c.has_words) {
        EXPECT_EQ(std::vector<std::string>(out.argv.begin() + 1, out.argv.end()), c.words);
    }
    for (const auto &e : c.envp) {
        EXPECT_NE(std::find(out.envp.begin(), out.envp.end(), e), out.envp.end())
            << "missing env " << e;
    }
    if (c.has_result_cwd) {
        EXPECT_EQ(out.cwd, c.result_cwd);
    }
}

INSTANTIATE_TEST_SUITE_P(Commands, Corpus, ::testing::ValuesIn(CorpusFiles()), CaseName);

TEST(CorpusDir, HasCases)
{
    // An empty or missing corpus would make the suite above vacuous.
    EXPECT_GE(CorpusFiles().size(), 60u);
}

// ---- the result ----

TEST(Guard, ResultLayout)
{
    Input in = Cmd("  ls\t-l  'a b' ");
    in.env = {{"FOO", "bar"}, {"EMPTY", ""}};
    in.has_cwd = true;
    in.cwd = "sub/dir";
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.argv, (std::vector<std::string>{Resolved("ls"), "-l", "a b"}));
    EXPECT_EQ(out.envp,
              (std::vector<std::string>{std::string("PATH=") + kPath, std::string("HOME=") + kHome,
                                        "LANG=C.UTF-8", "FOO=bar", "EMPTY="}));
    EXPECT_EQ(out.cwd, "sub/dir");
}

TEST(Guard, ArgvIsVerbatim)
{
    Outcome out = Check(Argv({"echo", "a;b", "$(id)", "*", "~", "{a,b}", "x\ny", ""}));
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.argv, (std::vector<std::string>{Resolved("echo"), "a;b", "$(id)", "*", "~",
                                                  "{a,b}", "x\ny", ""}));
}

TEST(Guard, CwdDefaultsToRoot)
{
    Outcome out = Check(Cmd("ls"));
    ASSERT_EQ(out.err, 0);
    EXPECT_EQ(out.cwd, ".");
    Input in = Cmd("ls");
    in.has_cwd = true;
    in.cwd = "";
    out = Check(in);
    ASSERT_EQ(out.err, 0);
    EXPECT_EQ(out.cwd, ".");
}

// ---- command resolution ----

class TempDir : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        // Under /tmp, not the test's own (deep) temporary directory: the
        // paths made here are compared whole with the "token" metadata,
        // which the guard cuts at 127 bytes.
        std::string tmpl = "/tmp/guardXXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        ASSERT_NE(mkdtemp(buf.data()), nullptr);
        dir_ = buf.data();
    }
    void TearDown() override
    {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    std::string dir_;
};

TEST_F(TempDir, SymlinkNamedLikeAllowedCommandIsJudgedByTarget)
{
    // A link called `ls` that really is sh: refused, named by what it is.
    std::string link = dir_ + "/ls";
    ASSERT_EQ(symlink(Resolved("sh").c_str(), link.c_str()), 0);
    Input in = Argv({link, "-c", "id"});
    in.allowed = {"ls"};
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_ENOTALLOWED);
    EXPECT_EQ(out.meta["token"], link);
    EXPECT_EQ(out.meta["rule"], "allowlist");

    // The same as a command string.
    in = Cmd(link + " -c id");
    in.allowed = {"ls"};
    out = Check(in);
    EXPECT_EQ(out.err, -WS_ENOTALLOWED);
    EXPECT_EQ(out.meta["token"], link);
}

TEST_F(TempDir, CopyNamedLikeAllowedCommandIsRefused)
{
    // A regular executable file called `cat` outside PATH (as a workspace
    // file would be) is not cat, even given by absolute path.
    std::string fake = dir_ + "/cat";
    {
        std::ofstream f(fake);
        f << "#!/bin/sh\nid\n";
    }
    ASSERT_EQ(chmod(fake.c_str(), 0755), 0);
    Input in = Argv({fake});
    in.allowed = {"cat"};
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_ENOTALLOWED);
    EXPECT_EQ(out.meta["token"], fake);
}

TEST_F(TempDir, SymlinkToAllowedCommandRunsTheTarget)
{
    // Matching is by canonical path: a link to ls is ls, and the result
    // executes the real file, never the link.
    std::string link = dir_ + "/whatever";
    ASSERT_EQ(symlink(Resolved("ls").c_str(), link.c_str()), 0);
    Input in = Argv({link, "-a"});
    in.allowed = {"ls"};
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.argv, (std::vector<std::string>{Resolved("ls"), "-a"}));
}

TEST_F(TempDir, AbsoluteAllowlistEntryIsCanonicalized)
{
    std::string link = dir_ + "/mycat";
    ASSERT_EQ(symlink(Resolved("cat").c_str(), link.c_str()), 0);
    // The operator allows a path through a symlink; `cat` by name matches.
    Input in = Cmd("cat x");
    in.allowed = {link};
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.argv[0], Resolved("cat"));
}

TEST_F(TempDir, RelativeAllowlistEntryMatchesNothing)
{
    // "./sh" in the allowlist must not come to mean the server's cwd.
    std::string link = dir_ + "/sh";
    ASSERT_EQ(symlink(Resolved("sh").c_str(), link.c_str()), 0);
    char old[PATH_MAX];
    ASSERT_NE(getcwd(old, sizeof(old)), nullptr);
    ASSERT_EQ(chdir(dir_.c_str()), 0);
    Input in = Cmd("sh");
    in.allowed = {"./sh", "x/../sh"};
    Outcome out = Check(in);
    ASSERT_EQ(chdir(old), 0);
    EXPECT_EQ(out.err, -WS_ENOTALLOWED);
    EXPECT_EQ(out.meta["token"], "sh");
}

TEST_F(TempDir, RelativePathEntriesAreSkipped)
{
    // An operator PATH with "", "." or a relative entry must not make
    // lookup depend on the server's cwd: a `cat` there (really sh) is
    // never found, the real cat is.
    std::string link = dir_ + "/cat";
    ASSERT_EQ(symlink(Resolved("sh").c_str(), link.c_str()), 0);
    char old[PATH_MAX];
    ASSERT_NE(getcwd(old, sizeof(old)), nullptr);
    ASSERT_EQ(chdir(dir_.c_str()), 0);
    Input in = Cmd("cat x");
    in.allowed = {"cat"};
    in.path = ":.:sub:/usr/bin:/bin";
    Outcome out = Check(in);
    ASSERT_EQ(chdir(old), 0);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.argv[0], Resolved("cat"));
    EXPECT_EQ(out.envp[0], "PATH=:.:sub:/usr/bin:/bin");
}

TEST_F(TempDir, LookupSkipsNonExecutablesLikeExecvp)
{
    // Earlier PATH entries holding a non-executable file or a directory of
    // that name do not stop the lookup.
    ASSERT_EQ(mkdir((dir_ + "/a").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/b").c_str(), 0755), 0);
    {
        std::ofstream f(dir_ + "/a/cat");
        f << "not executable\n";
    }
    ASSERT_EQ(chmod((dir_ + "/a/cat").c_str(), 0644), 0);
    ASSERT_EQ(mkdir((dir_ + "/b/cat").c_str(), 0755), 0);
    Input in = Cmd("cat x");
    in.allowed = {"cat"};
    in.path = dir_ + "/a:" + dir_ + "/b:/usr/bin:/bin";
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.argv[0], Resolved("cat"));
}

TEST(Guard, ClientPathDoesNotMoveLookup)
{
    // PATH from the client is refused outright, so it can never steer
    // resolution; and lookup uses the policy's PATH only.
    Input in = Cmd("ls");
    in.env = {{"PATH", "/tmp:/usr/bin"}};
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_EENVDENIED);
    EXPECT_EQ(out.meta["token"], "PATH");
}

TEST(Guard, EmptyAllowlistDeniesArgvToo)
{
    Input in = Argv({"ls"});
    in.allowed = {};
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_ENOTALLOWED);
    EXPECT_EQ(out.meta["token"], "ls");
}

TEST(Guard, AllowlistEntriesThatDoNotResolveMatchNothing)
{
    Input in = Cmd("ls");
    in.allowed = {"./ls", "bin/ls", "", "no-such-command-xyz"};
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_ENOTALLOWED);
    EXPECT_EQ(out.meta["token"], "ls");
}

// ---- environment ----

TEST(Guard, PassEnvPullsHostVariable)
{
    ASSERT_EQ(setenv("WS_GUARD_TEST_PASS", "host-value", 1), 0);
    ASSERT_EQ(setenv("WS_GUARD_TEST_NOT_PASSED", "secret", 1), 0);
    ASSERT_EQ(setenv("LD_PRELOAD_WS_GUARD_TEST", "x", 1), 0);
    Input in = Cmd("ls");
    in.pass_env = {"WS_GUARD_TEST_PASS",
                   "WS_GUARD_TEST_UNSET_XYZ",
                   "LD_PRELOAD_WS_GUARD_TEST",
                   "PATH",
                   "HOME",
                   "LANG",
                   "BAD-NAME"};
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.envp,
              (std::vector<std::string>{std::string("PATH=") + kPath, std::string("HOME=") + kHome,
                                        "LANG=C.UTF-8", "WS_GUARD_TEST_PASS=host-value"}));
    unsetenv("LD_PRELOAD_WS_GUARD_TEST");
}

TEST(Guard, ClientReplacesPassEnvAndLang)
{
    ASSERT_EQ(setenv("WS_GUARD_TEST_PASS", "host-value", 1), 0);
    Input in = Cmd("ls");
    in.pass_env = {"WS_GUARD_TEST_PASS"};
    in.env = {{"WS_GUARD_TEST_PASS", "client"}, {"LANG", "en_US.UTF-8"}};
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.envp,
              (std::vector<std::string>{std::string("PATH=") + kPath, std::string("HOME=") + kHome,
                                        "LANG=en_US.UTF-8", "WS_GUARD_TEST_PASS=client"}));
}

TEST(Guard, HomeOverrideDenied)
{
    for (const char *name : {"HOME", "home", "Path", " PATH"}) {
        Input in = Cmd("ls");
        in.env = {{name, "/root"}};
        Outcome out = Check(in);
        EXPECT_EQ(out.err, -WS_EENVDENIED) << name;
        EXPECT_EQ(out.meta["token"], name);
        EXPECT_EQ(out.meta["rule"], "denylist");
    }
}

TEST(Guard, DuplicateEnvNameMalformed)
{
    Input in = Cmd("ls");
    in.env = {{"A", "1"}, {"A", "2"}};
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_EMALFORMED);
    EXPECT_EQ(out.meta["token"], "A");
    EXPECT_EQ(out.meta["rule"], "env_duplicate");
}

TEST(Guard, EnvNameLength)
{
    Input in = Cmd("ls");
    in.env = {{std::string(WS_GUARD_ENV_NAME_MAX, 'N'), "v"}};
    EXPECT_EQ(Check(in).err, 0);
    in.env = {{std::string(WS_GUARD_ENV_NAME_MAX + 1, 'N'), "v"}};
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_EMALFORMED);
    EXPECT_EQ(out.meta["rule"], "env_name");
}

// ---- environment of a command on the host ----

std::vector<std::string> HostBase(const std::string &lang = "C.UTF-8")
{
    return {std::string("PATH=") + kPath,
            std::string("HOME=") + kHome,
            "LANG=" + lang,
            std::string("XDG_CONFIG_HOME=") + kHome + "/.config",
            std::string("XDG_CACHE_HOME=") + kHome + "/.cache",
            std::string("XDG_DATA_HOME=") + kHome + "/.local/share",
            std::string("XDG_STATE_HOME=") + kHome + "/.local/state",
            std::string("XDG_RUNTIME_DIR=") + kRun,
            "GIT_CONFIG_NOSYSTEM=1",
            "GIT_CONFIG_GLOBAL=/dev/null",
            "GIT_PAGER=cat",
            "GIT_EDITOR=:",
            "GIT_SEQUENCE_EDITOR=:",
            "GIT_ASKPASS=",
            "GIT_PROXY_COMMAND=",
            "GIT_CONFIG_COUNT=11",
            "GIT_CONFIG_KEY_0=core.fsmonitor",
            "GIT_CONFIG_VALUE_0=false",
            "GIT_CONFIG_KEY_1=core.hooksPath",
            "GIT_CONFIG_VALUE_1=/dev/null",
            "GIT_CONFIG_KEY_2=core.sshCommand",
            "GIT_CONFIG_VALUE_2=ssh",
            "GIT_CONFIG_KEY_3=credential.helper",
            "GIT_CONFIG_VALUE_3=",
            "GIT_CONFIG_KEY_4=gpg.format",
            "GIT_CONFIG_VALUE_4=openpgp",
            "GIT_CONFIG_KEY_5=gpg.program",
            "GIT_CONFIG_VALUE_5=gpg",
            "GIT_CONFIG_KEY_6=commit.gpgSign",
            "GIT_CONFIG_VALUE_6=false",
            "GIT_CONFIG_KEY_7=tag.gpgSign",
            "GIT_CONFIG_VALUE_7=false",
            "GIT_CONFIG_KEY_8=log.showSignature",
            "GIT_CONFIG_VALUE_8=false",
            "GIT_CONFIG_KEY_9=protocol.ext.allow",
            "GIT_CONFIG_VALUE_9=never",
            "GIT_CONFIG_KEY_10=safe.bareRepository",
            "GIT_CONFIG_VALUE_10=explicit"};
}

// The whole environment of a command on the host, in order: nothing of
// the server's own, HOME and the XDG dirs the command's, git locked down.
TEST(GuardHost, BaseEnvironmentIsExact)
{
    Input in = Cmd("ls");
    in.host = true;
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.envp, HostBase());
}

TEST(GuardHost, NoRuntimeDirLeavesItUnset)
{
    const char *allowed[] = {"ls"};
    const char *argv[] = {"ls"};
    struct ws_guard_policy p = {};
    p.allowed = allowed;
    p.n_allowed = 1;
    p.path = kPath;
    p.home = kHome;
    p.host = true;
    struct ws_guard_request r = {};
    r.argv = argv;
    r.argc = 1;
    struct ws_guard_result *res = nullptr;
    ASSERT_EQ(ws_guard_check(&p, &r, nullptr, &res), 0);
    for (size_t i = 0; i < res->n_env; i++)
        EXPECT_NE(std::string(res->envp[i]).rfind("XDG_RUNTIME_DIR=", 0), 0u) << res->envp[i];
    ws_guard_result_free(res);
}

// A terminal gets TERM in every provider; the client's own replaces it.
TEST(GuardHost, PtySetsTerm)
{
    for (bool host : {false, true}) {
        Input in = Cmd("ls");
        in.host = host;
        in.pty = true;
        Outcome out = Check(in);
        ASSERT_EQ(out.err, 0) << out.message;
        EXPECT_NE(std::find(out.envp.begin(), out.envp.end(), "TERM=" WS_GUARD_TERM),
                  out.envp.end());
        in.env = {{"TERM", "vt100"}};
        out = Check(in);
        ASSERT_EQ(out.err, 0) << out.message;
        EXPECT_NE(std::find(out.envp.begin(), out.envp.end(), "TERM=vt100"), out.envp.end());
        EXPECT_EQ(std::find(out.envp.begin(), out.envp.end(), "TERM=" WS_GUARD_TERM),
                  out.envp.end());
    }
    Outcome out = Check(Cmd("ls"));
    for (const auto &e : out.envp)
        EXPECT_NE(e.rfind("TERM=", 0), 0u) << "TERM without a terminal";
}

TEST(GuardHost, AllowlistedNamesPass)
{
    Input in = Cmd("ls");
    in.host = true;
    in.env = {{"LANG", "de_DE@euro"},
              {"LANGUAGE", "fr:en"},
              {"LC_ALL", ""},
              {"LC_TIME", "en_GB.UTF-8"},
              {"TZ", "CET-1CEST,M3.5.0,M10.5.0/3"},
              {"TERM", "xterm-256color"},
              {"COLORTERM", "truecolor"},
              {"COLUMNS", "132"},
              {"LINES", "50"},
              {"NO_COLOR", "1"},
              {"FORCE_COLOR", "3"},
              {"CLICOLOR", "0"},
              {"CLICOLOR_FORCE", "1"},
              {"CI", "true"},
              {"SOURCE_DATE_EPOCH", "1700000000"}};
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message << " " << out.meta["token"];
    std::vector<std::string> want = HostBase("de_DE@euro");
    for (size_t i = 1; i < in.env.size(); i++)
        want.push_back(in.env[i].first + "=" + in.env[i].second);
    EXPECT_EQ(out.envp, want);
    for (const char *tz : {"UTC", "Europe/Berlin", ":Europe/Paris", "<+03>-3", ""}) {
        in.env = {{"TZ", tz}};
        EXPECT_EQ(Check(in).err, 0) << tz;
    }
}

// Everything else is refused on the host, naming the variable: what makes
// a tool run or load something, and any name not on the list.
TEST(GuardHost, OtherNamesAreDenied)
{
    for (const char *name : {"FOO",
                             "SECRET_TOKEN",
                             "TAR_OPTIONS",
                             "GOFLAGS",
                             "MAKEFLAGS",
                             "CFLAGS",
                             "PAGER",
                             "EDITOR",
                             "LESSOPEN",
                             "XDG_CONFIG_HOME",
                             "XDG_RUNTIME_DIR",
                             "XDG_CONFIG_DIRS",
                             "GIT_DIR",
                             "GIT_TRACE",
                             "GIT_CONFIG_GLOBAL",
                             "http_proxy",
                             "HTTPS_PROXY",
                             "ALL_PROXY",
                             "no_proxy",
                             "PYTHONDONTWRITEBYTECODE",
                             "NODE_OPTIONS",
                             "PERL5LIB",
                             "BASH_ENV",
                             "ENV",
                             "TMPDIR",
                             "TERMINFO",
                             "TZDIR",
                             "USER",
                             "PWD",
                             "npm_config_script_shell",
                             "CARGO_HOME",
                             "lang",
                             "Tz",
                             "LD_PRELOAD",
                             "PATH",
                             "HOME"}) {
        Input in = Cmd("ls");
        in.host = true;
        in.env = {{name, "x"}};
        Outcome out = Check(in);
        EXPECT_EQ(out.err, -WS_EENVDENIED) << name;
        EXPECT_EQ(out.meta["token"], name);
        EXPECT_TRUE(out.meta["rule"] == "env_allowlist" || out.meta["rule"] == "denylist")
            << name << ": " << out.meta["rule"];
    }
}

TEST(GuardHost, ValuesMustHaveTheirForm)
{
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"LANG", "/srv/ws/workspace/locale"},
        {"LANG", "en_US.UTF-8/../../x"},
        {"LANGUAGE", "fr:/tmp/x"},
        {"LC_ALL", "C x"},
        {"LC_CTYPE", "../x"},
        {"TZ", "/etc/shadow"},
        {"TZ", ":/srv/ws/workspace/z"},
        {"TZ", "Europe/../../../tmp/z"},
        {"TZ", "..x"},
        {"TERM", "../evil"},
        {"TERM", "a/b"},
        {"COLORTERM", "x y"},
        {"COLUMNS", "80x"},
        {"LINES", "-1"},
        {"SOURCE_DATE_EPOCH", "1e9"},
        {"CI", "yes please"},
        {"NO_COLOR", "$(id)"},
    };
    for (const auto &[name, value] : bad) {
        Input in = Cmd("ls");
        in.host = true;
        in.env = {{name, value}};
        Outcome out = Check(in);
        EXPECT_EQ(out.err, -WS_EENVDENIED) << name << "=" << value;
        EXPECT_EQ(out.meta["token"], name);
        EXPECT_EQ(out.meta["rule"], "env_value") << name << "=" << value;
    }
}

// The operator's pass_env names are not held to the client's allowlist,
// but never replace the base (HOME, the XDG dirs, git's settings) and the
// denylist still holds for them.
TEST(GuardHost, PassEnvIsTheOperatorsButNeverTheBase)
{
    ASSERT_EQ(setenv("WS_GUARD_TEST_PASS", "host-value", 1), 0);
    ASSERT_EQ(setenv("XDG_CONFIG_HOME", "/server/config", 1), 0);
    ASSERT_EQ(setenv("GIT_PAGER", "less", 1), 0);
    ASSERT_EQ(setenv("TAR_OPTIONS", "--checkpoint-action=exec=id", 1), 0);
    Input in = Cmd("ls");
    in.host = true;
    in.pass_env = {"WS_GUARD_TEST_PASS", "XDG_CONFIG_HOME", "GIT_PAGER", "TAR_OPTIONS", "HOME"};
    Outcome out = Check(in);
    unsetenv("XDG_CONFIG_HOME");
    unsetenv("GIT_PAGER");
    unsetenv("TAR_OPTIONS");
    ASSERT_EQ(out.err, 0) << out.message;
    std::vector<std::string> want = HostBase();
    want.push_back("WS_GUARD_TEST_PASS=host-value");
    EXPECT_EQ(out.envp, want);
}

// The isolated providers keep the denylist alone: an ordinary name passes
// there, the program-running ones do not.
TEST(GuardIsolated, DenylistOnly)
{
    Input in = Cmd("ls");
    in.env = {{"FOO", "bar"}, {"XDG_CONFIG_HOME", "/workspace/.config"}, {"LANG", "/x"}};
    Outcome out = Check(in);
    ASSERT_EQ(out.err, 0) << out.message;
    EXPECT_EQ(out.envp, (std::vector<std::string>{
                            std::string("PATH=") + kPath, std::string("HOME=") + kHome, "LANG=/x",
                            "FOO=bar", "XDG_CONFIG_HOME=/workspace/.config"}));
    for (const char *name :
         {"TAR_OPTIONS", "GOFLAGS", "MAKEFLAGS", "LESS", "ZIPOPT", "RSYNC_RSH"}) {
        in.env = {{name, "x"}};
        out = Check(in);
        EXPECT_EQ(out.err, -WS_EENVDENIED) << name;
        EXPECT_EQ(out.meta["rule"], "denylist") << name;
    }
}

// ---- limits ----

TEST(Guard, CustomLimits)
{
    Input in = Cmd("ls a b");
    in.limits.args = 3;
    EXPECT_EQ(Check(in).err, 0);
    in.limits.args = 2;
    Outcome out = Check(in);
    EXPECT_EQ(out.err, -WS_EARGLIMIT);
    EXPECT_EQ(out.meta["token"], "b");
    EXPECT_EQ(out.meta["rule"], "args");
    EXPECT_EQ(out.meta["limit"], "2");

    in = Cmd("ls abcd");
    in.limits.arg_bytes = 4;
    EXPECT_EQ(Check(in).err, 0);
    in.limits.arg_bytes = 3;
    out = Check(in);
    EXPECT_EQ(out.err, -WS_EARGLIMIT);
    EXPECT_EQ(out.meta["token"], "abcd");
    EXPECT_EQ(out.meta["rule"], "arg_bytes");

    in = Cmd("ls ab");
    in.limits.argv_bytes = 6; // "ls\0ab\0"
    EXPECT_EQ(Check(in).err, 0);
    in.limits.argv_bytes = 5;
    out = Check(in);
    EXPECT_EQ(out.err, -WS_EARGLIMIT);
    EXPECT_EQ(out.meta["token"], "ab");
    EXPECT_EQ(out.meta["rule"], "argv_bytes");

    in = Cmd("ls ab");
    in.limits.command_bytes = 5;
    EXPECT_EQ(Check(in).err, 0);
    in.limits.command_bytes = 4;
    out = Check(in);
    EXPECT_EQ(out.err, -WS_EARGLIMIT);
    EXPECT_EQ(out.meta["rule"], "command_bytes");

    in = Cmd("ls");
    in.env = {{"A", "1"}, {"B", "2"}};
    in.limits.env = 2;
    EXPECT_EQ(Check(in).err, 0);
    in.limits.env = 1;
    out = Check(in);
    EXPECT_EQ(out.err, -WS_EARGLIMIT);
    EXPECT_EQ(out.meta["token"], "B");
    EXPECT_EQ(out.meta["rule"], "env");

    in = Cmd("ls");
    in.env = {{"A", "1"}, {"B", "22"}};
    in.limits.env_bytes = 9; // "A=1\0B=22\0"
    EXPECT_EQ(Check(in).err, 0);
    in.limits.env_bytes = 8;
    out = Check(in);
    EXPECT_EQ(out.err, -WS_EARGLIMIT);
    EXPECT_EQ(out.meta["token"], "B");
    EXPECT_EQ(out.meta["rule"], "env_bytes");
}

TEST(Guard, ArgCountLimitInArgvMode)
{
    std::vector<std::string> argv(WS_GUARD_ARGS_MAX, "x");
    argv[0] = "echo";
    EXPECT_EQ(Check(Argv(argv)).err, 0);
    argv.push_back("one-too-many");
    Outcome out = Check(Argv(argv));
    EXPECT_EQ(out.err, -WS_EARGLIMIT);
    EXPECT_EQ(out.meta["token"], "one-too-many");
    EXPECT_EQ(out.meta["limit"], std::to_string(WS_GUARD_ARGS_MAX));
}

// ---- the API contract ----

TEST(Guard, ExactlyOneOfArgvAndCommand)
{
    Input both = Cmd("ls");
    both.argv = {"ls"};
    Outcome out = Check(both);
    EXPECT_EQ(out.err, -WS_EMALFORMED);
    EXPECT_EQ(out.meta["rule"], "request");
    EXPECT_TRUE(out.meta.count("token"));

    out = Check(Input{});
    EXPECT_EQ(out.err, -WS_EMALFORMED);
    EXPECT_EQ(out.meta["rule"], "request");

    // An empty command string counts as none.
    out = Check(Cmd(""));
    EXPECT_EQ(out.err, -WS_EMALFORMED);
    EXPECT_EQ(out.meta["rule"], "request");
}

TEST(Guard, NulInsideCommandIsSeen)
{
    // command_len, not strlen: bytes after a NUL are not silently dropped.
    Outcome out = Check(Cmd(std::string("ls\0 -l", 6)));
    EXPECT_EQ(out.err, -WS_EMETACHAR);
    EXPECT_EQ(out.meta["token"], "ls\\x00");
    EXPECT_EQ(out.meta["char"], "\\x00");
}

TEST(Guard, PolicyWithoutPathOrHomeIsInvalid)
{
    const char *allowed[] = {"ls"};
    const char *argv[] = {"ls"};
    struct ws_guard_policy p = {};
    p.allowed = allowed;
    p.n_allowed = 1;
    p.home = kHome;
    struct ws_guard_request r = {};
    r.argv = argv;
    r.argc = 1;
    struct ws_guard_result *res = nullptr;
    EXPECT_EQ(ws_guard_check(&p, &r, nullptr, &res), -EINVAL);
    p.path = kPath;
    p.home = nullptr;
    EXPECT_EQ(ws_guard_check(&p, &r, nullptr, &res), -EINVAL);
    EXPECT_EQ(res, nullptr);
}

TEST(Guard, NullDiagIsAccepted)
{
    const char *allowed[] = {"ls"};
    const char *argv[] = {"sh"};
    struct ws_guard_policy p = {};
    p.allowed = allowed;
    p.n_allowed = 1;
    p.path = kPath;
    p.home = kHome;
    struct ws_guard_request r = {};
    r.argv = argv;
    r.argc = 1;
    struct ws_guard_result *res = nullptr;
    EXPECT_EQ(ws_guard_check(&p, &r, nullptr, &res), -WS_ENOTALLOWED);
    r.command = "ls;";
    r.command_len = 3;
    r.argc = 0;
    EXPECT_EQ(ws_guard_check(&p, &r, nullptr, &res), -WS_EMETACHAR);
    EXPECT_EQ(res, nullptr);
    EXPECT_EQ(ws_guard_result_free(nullptr), nullptr);
}

TEST(Guard, LongTokenIsCutForTheDiag)
{
    std::string word(1000, 'a');
    Outcome out = Check(Cmd("ls " + word + ";"));
    EXPECT_EQ(out.err, -WS_EMETACHAR);
    EXPECT_EQ(out.meta["token"], std::string(WS_DIAG_VALUE_MAX - 1, 'a'));
    EXPECT_EQ(out.meta["char"], ";");
}

// A container's file system: the spelling is judged, nothing is resolved.
TEST(Guard, ForeignRootMatchesTheSpellingOnly)
{
    const char *allowed[] = {"cat", "/bin/echo", "definitely-not-on-this-host"};
    struct ws_guard_policy p = {};
    p.allowed = allowed;
    p.n_allowed = 3;
    p.path = "/usr/bin:/bin";
    p.home = "/workspace";
    p.foreign_root = true;
    struct ws_guard_request r = {};
    r.argc = 1;
    struct ws_guard_result *res = nullptr;
    auto run = [&](const char *argv0) {
        const char *argv[] = {argv0};
        r.argv = argv;
        res = nullptr;
        return ws_guard_check(&p, &r, nullptr, &res);
    };
    // Allowed by name (even one the host lacks) or by the exact path; the
    // name stays a name for the runner over there to look up.
    ASSERT_EQ(run("cat"), 0);
    EXPECT_STREQ(res->argv[0], "cat");
    ws_guard_result_free(res);
    ASSERT_EQ(run("definitely-not-on-this-host"), 0);
    ws_guard_result_free(res);
    ASSERT_EQ(run("/bin/echo"), 0);
    EXPECT_STREQ(res->argv[0], "/bin/echo");
    ws_guard_result_free(res);
    // What host resolution would have let through is refused here.
    EXPECT_EQ(run("/bin/cat"), -WS_ENOTALLOWED);
    EXPECT_EQ(run("echo"), -WS_ENOTALLOWED);
    EXPECT_EQ(run("/bin/../bin/echo"), -WS_ENOTALLOWED);
    EXPECT_EQ(run("./cat"), -WS_ENOTALLOWED);
    EXPECT_EQ(run("sh"), -WS_ENOTALLOWED);
    EXPECT_EQ(res, nullptr);
}

} // namespace
