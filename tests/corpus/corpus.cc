// The hostile-path corpus shared by tests/unit/posix:fs_test and
// tests/e2e:corpus_test; see corpus.h.
#include "tests/corpus/corpus.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace fs = std::filesystem;

namespace wscorpus
{

// Decodes \\, \n, \t, \xHH and \r{N:text} (text repeated N times).
bool Unescape(const std::string &in, std::string *out, std::string *err)
{
    out->clear();
    for (size_t i = 0; i < in.size(); i++) {
        if (in[i] != '\\') {
            out->push_back(in[i]);
            continue;
        }
        if (++i == in.size()) {
            *err = "dangling backslash";
            return false;
        }
        switch (in[i]) {
        case '\\':
            out->push_back('\\');
            break;
        case 'n':
            out->push_back('\n');
            break;
        case 't':
            out->push_back('\t');
            break;
        case 'x':
            if (i + 2 >= in.size()) {
                *err = "short \\x";
                return false;
            }
            out->push_back((char)std::stoi(in.substr(i + 1, 2), nullptr, 16));
            i += 2;
            break;
        case 'r': {
            size_t close = in.find('}', i);
            size_t colon = in.find(':', i);
            if (i + 1 >= in.size() || in[i + 1] != '{' || close == std::string::npos ||
                colon == std::string::npos || colon > close) {
                *err = "bad \\r{N:text}";
                return false;
            }
            int n = std::stoi(in.substr(i + 2, colon - i - 2));
            std::string unit = in.substr(colon + 1, close - colon - 1);
            for (int k = 0; k < n; k++)
                *out += unit;
            i = close;
            break;
        }
        default:
            *err = std::string("unknown escape \\") + in[i];
            return false;
        }
    }
    return true;
}

namespace
{

void WriteFixtureFile(const std::string &path, const std::string &content, mode_t mode = 0644)
{
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0 || write(fd, content.data(), content.size()) != (ssize_t)content.size() ||
        fchmod(fd, mode) != 0)
        abort();
    close(fd);
}

} // namespace

const std::set<std::string> &ResultNames()
{
    static const std::set<std::string> names = {
        "OK",          "ENOENT",       "EXDEV",       "ELOOP",        "ENOTDIR",
        "EISDIR",      "EEXIST",       "ENOTEMPTY",   "ENAMETOOLONG", "EINVAL",
        "EBUSY",       "EFBIG",        "EAGAIN",      "ESTALE",       "WS_ESYMLINK_LEAF",
        "WS_ESPECIAL", "WS_EHARDLINK", "WS_EBADPATH", "WS_ELIMIT",
    };
    return names;
}

const std::vector<std::string> &Ops()
{
    static const std::vector<std::string> ops = {"stat",     "open_read", "opendir", "write",
                                                 "write_p",  "mkdir",     "mkdir_p", "remove",
                                                 "remove_r", "move_from", "move_to"};
    return ops;
}

std::string CorpusDir(const std::string &name)
{
    const char *srcdir = getenv("TEST_SRCDIR");
    const char *ws = getenv("TEST_WORKSPACE");
    if (!srcdir || !ws)
        return "";
    return std::string(srcdir) + "/" + ws + "/tests/corpus/" + name;
}

std::vector<std::string> CorpusFiles(const std::string &name)
{
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(CorpusDir(name), ec))
        if (e.path().extension() == ".case")
            files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    return files;
}

bool ParseCase(const std::string &file, CorpusCase *c, std::string *err)
{
    std::ifstream in(CorpusDir() + "/" + file);
    if (!in) {
        *err = "cannot open";
        return false;
    }
    c->file = file;
    bool have_path = false;
    std::string all, line;
    int lineno = 0;
    while (std::getline(in, line)) {
        lineno++;
        if (line.empty() || line[0] == '#')
            continue;
        size_t colon = line.find(':');
        if (colon == std::string::npos) {
            *err = "line " + std::to_string(lineno) + ": no ':'";
            return false;
        }
        std::string key = line.substr(0, colon);
        std::string value = line.substr(colon + 1);
        if (key == "path") {
            // Exactly one space after the colon is syntax; the rest is the path.
            if (!value.empty() && value[0] == ' ')
                value.erase(0, 1);
            if (!Unescape(value, &c->path, err)) {
                *err = "line " + std::to_string(lineno) + ": " + *err;
                return false;
            }
            have_path = true;
            continue;
        }
        value.erase(0, value.find_first_not_of(" \t"));
        value.erase(value.find_last_not_of(" \t") + 1);
        if (key == "requires") {
            c->requires_.insert(value);
            continue;
        }
        if (!ResultNames().count(value)) {
            *err = "line " + std::to_string(lineno) + ": unknown result " + value;
            return false;
        }
        if (key == "all") {
            all = value;
            continue;
        }
        if (std::find(Ops().begin(), Ops().end(), key) == Ops().end()) {
            *err = "line " + std::to_string(lineno) + ": unknown op " + key;
            return false;
        }
        c->expect[key] = value;
    }
    if (!have_path) {
        *err = "no path";
        return false;
    }
    if (!all.empty())
        for (const auto &op : Ops())
            c->expect.emplace(op, all);
    if (c->expect.empty()) {
        *err = "no expectations";
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

// ---- the fixture ----

bool BuildFixture(const std::string &ws, const std::string &outside)
{
    auto Symlink = [&ws](const std::string &target, const std::string &rel) {
        if (symlink(target.c_str(), (ws + "/" + rel).c_str()) != 0)
            abort();
    };

    mkdir(ws.c_str(), 0755); // may exist already
    mkdir(outside.c_str(), 0755);
    mkdir((outside + "/sub").c_str(), 0755);
    WriteFixtureFile(outside + "/canary", "canary\n");
    WriteFixtureFile(outside + "/f", "outside-f\n");
    WriteFixtureFile(outside + "/sub/inner", "inner\n");

    WriteFixtureFile(ws + "/file", "hello");
    mkdir((ws + "/dir").c_str(), 0755);
    mkdir((ws + "/dir/sub").c_str(), 0755);
    mkdir((ws + "/empty").c_str(), 0755);
    WriteFixtureFile(ws + "/dir/nested", "nested");
    Symlink("..", "dir/up");
    Symlink("../..", "dir/upup");
    Symlink(outside, "abs_out");
    Symlink(outside + "/canary", "abs_out_file");
    Symlink("../outside", "rel_out");
    Symlink("../outside/canary", "rel_out_file");
    Symlink("dir", "in_dir");
    Symlink("file", "in_file");
    Symlink("/proc/self/root", "proc_root");
    Symlink("/proc/self/cwd", "proc_cwd");
    Symlink("../../../../../../../../../../../../../../../../proc/self/root", "proc_rel");
    Symlink("loop_b", "loop_a");
    Symlink("loop_a", "loop_b");
    Symlink("self_loop", "self_loop");
    Symlink("..", "parent_link");
    Symlink(".", "dot_link");
    Symlink("nowhere", "dangling");
    if (mkfifo((ws + "/fifo").c_str(), 0644) != 0)
        abort();
    if (link((outside + "/canary").c_str(), (ws + "/hardlink_out").c_str()) != 0)
        abort();
    WriteFixtureFile(ws + "/pair_a", "pair");
    if (link((ws + "/pair_a").c_str(), (ws + "/pair_b").c_str()) != 0)
        abort();
    bool have_chardev = mknod((ws + "/chardev").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;

    // sun_path is short and TEST_TMPDIR long: bind by a relative name.
    int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, "sock");
    if (cwd < 0 || s < 0 || chdir(ws.c_str()) != 0 ||
        bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0 || fchdir(cwd) != 0)
        abort();
    close(s);
    close(cwd);
    return have_chardev;
}

// ---- host-side checks ----

std::string ReadAll(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string TreeSignature(const std::string &root)
{
    std::map<std::string, std::string> entries;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
        const std::string p = it->path().string();
        struct stat st;
        if (lstat(p.c_str(), &st) != 0) {
            entries[p] = "vanished";
            continue;
        }
        std::ostringstream d;
        d << std::oct << st.st_mode << std::dec << " " << st.st_size << " " << st.st_mtim.tv_sec
          << "." << st.st_mtim.tv_nsec;
        if (S_ISREG(st.st_mode))
            d << " content=" << ReadAll(p);
        else if (S_ISLNK(st.st_mode))
            d << " -> " << fs::read_symlink(p, ec).string();
        entries[p] = d.str();
    }
    struct stat st;
    lstat(root.c_str(), &st);
    std::string sig = "root mtime " + std::to_string(st.st_mtim.tv_nsec) + "\n";
    for (const auto &[p, d] : entries)
        sig += p + ": " + d + "\n";
    return sig;
}

std::set<std::string> ListNames(const std::string &dir)
{
    std::set<std::string> names;
    for (const auto &e : fs::directory_iterator(dir))
        names.insert(e.path().filename().string());
    return names;
}

std::vector<std::string> TempFiles(const std::string &root)
{
    std::vector<std::string> found;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
         it.increment(ec))
        if (it->path().filename().string().rfind(".ws-tmp-", 0) == 0)
            found.push_back(it->path().string());
    return found;
}

} // namespace wscorpus
