#include "tests/reliability/soak/probe.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

namespace soak
{

using namespace workspace::v1;

bool FullScale()
{
    const char *v = getenv("WS_SOAK_FULL");
    return v && std::string(v) == "1";
}

bool Sanitized()
{
    const char *v = getenv("WORKSPACED_SANITIZED");
    return v && std::string(v) == "1";
}

std::vector<Backend> ExecBackends()
{
    return {{"local-bash", "local-bash", EXEC_MODE_DEFAULT},
            {"sandbox-agent", "local-sandbox", EXEC_MODE_AGENT},
            {"sandbox-per-command", "local-sandbox", EXEC_MODE_PER_COMMAND},
            {"docker-agent", "docker", EXEC_MODE_AGENT},
            {"docker-per-command", "docker", EXEC_MODE_PER_COMMAND}};
}

grpc::Status OpenBackend(Workspaces::Stub *stub, const Backend &b,
                         const std::vector<std::string> &allowed, wstest::Ws *ret)
{
    OpenRequest req;
    if (b.provider == "memory") {
        req.mutable_memory();
    } else if (b.provider == "local-bash") {
        req.mutable_local_bash();
    } else if (b.provider == "local-sandbox") {
        req.mutable_local_sandbox()->set_exec_mode(b.mode);
    } else {
        DockerConfig *dc = req.mutable_docker();
        dc->set_image(kDockerImage);
        dc->set_pull_policy(PULL_NEVER);
        dc->set_exec_mode(b.mode);
    }
    req.mutable_capabilities()->mutable_fs();
    if (b.provider != "memory") {
        ShellCapability *shell = req.mutable_capabilities()->mutable_shell();
        for (const auto &c : allowed)
            shell->add_allowed_commands(c);
    }
    OpenResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    grpc::Status s = stub->Open(&ctx, req, &resp);
    if (s.ok())
        *ret = wstest::Ws{resp.workspace().id(), resp.workspace().ref().token()};
    return s;
}

grpc::Status CloseWs(Workspaces::Stub *stub, const std::string &id)
{
    CloseRequest req;
    req.set_workspace_id(id);
    CloseResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    return stub->Close(&ctx, req, &resp);
}

namespace
{

std::string Slurp(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Directories at and below `dir`.
int CountTree(const std::string &dir)
{
    int n = 1;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return n;
    while (struct dirent *de = readdir(d)) {
        if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        n += CountTree(dir + "/" + de->d_name);
    }
    closedir(d);
    return n;
}

int Walk(const std::string &dir, const std::string &name, const std::string &pid, int depth)
{
    int n = 0;
    DIR *d = opendir(dir.c_str());
    if (!d)
        return 0;
    while (struct dirent *de = readdir(d)) {
        if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        std::string child = dir + "/" + de->d_name;
        if (de->d_name == "workspaced-" + pid || (name == "workspaced" && de->d_name == pid))
            n += CountTree(child);
        else if (depth < 12)
            n += Walk(child, de->d_name, pid, depth + 1);
    }
    closedir(d);
    return n;
}

} // namespace

int CountCgroupsOf(pid_t pid)
{
    std::istringstream in(Slurp("/proc/self/mountinfo"));
    std::string line;
    std::map<std::string, bool> seen;
    int n = 0;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::vector<std::string> fields;
        for (std::string x; f >> x;)
            fields.push_back(x);
        size_t dash = 0;
        while (dash < fields.size() && fields[dash] != "-")
            dash++;
        if (dash < 5 || dash + 1 >= fields.size())
            continue;
        const std::string &type = fields[dash + 1];
        if (type != "cgroup" && type != "cgroup2")
            continue;
        if (seen[fields[4]])
            continue;
        seen[fields[4]] = true;
        n += Walk(fields[4], "", std::to_string(pid), 0);
    }
    return n;
}

std::string ServerId(const std::string &state_dir)
{
    std::string id = Slurp(state_dir + "/server-id");
    while (!id.empty() && (id.back() == '\n' || id.back() == ' '))
        id.pop_back();
    return id;
}

int CountContainersOf(const std::string &server_id)
{
    if (server_id.empty())
        return -1;
    std::string cmd = "docker ps -aq --no-trunc --filter label=dev.workspaced.server=" + server_id +
                      " 2>/dev/null; echo rc=$?";
    FILE *p = popen(cmd.c_str(), "r");
    if (!p)
        return -1;
    int n = 0;
    bool ok = false;
    char buf[512];
    while (fgets(buf, sizeof(buf), p)) {
        std::string l(buf);
        if (l.compare(0, 3, "rc=") == 0)
            ok = l == "rc=0\n";
        else if (l.size() > 1)
            n++;
    }
    pclose(p);
    return ok ? n : -1;
}

int CountDescendants(pid_t pid)
{
    std::map<long, std::vector<long>> kids;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    while (struct dirent *de = readdir(d)) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        std::string s = Slurp(std::string("/proc/") + de->d_name + "/stat");
        size_t close = s.rfind(')');
        if (close == std::string::npos || close + 2 >= s.size())
            continue;
        std::istringstream f(s.substr(close + 2));
        char state = 0;
        long ppid = 0;
        if (!(f >> state >> ppid) || state == 'Z' || state == 'X')
            continue;
        kids[ppid].push_back(atol(de->d_name));
    }
    closedir(d);
    int n = 0;
    std::vector<long> todo = {pid};
    while (!todo.empty()) {
        long p = todo.back();
        todo.pop_back();
        for (long c : kids[p]) {
            n++;
            todo.push_back(c);
        }
    }
    return n;
}

Sample Take(const wstest::Server &srv, const std::string &server_id, const std::string &marker)
{
    Sample s;
    wstest::ProcStats st = wstest::StatsOf(srv.pid());
    s.fds = st.fds;
    s.threads = st.threads;
    s.rss_kb = st.rss_kb;
    s.zombies = st.zombies;
    s.descendants = CountDescendants(srv.pid());
    s.cgroups = CountCgroupsOf(srv.pid());
    s.containers = CountContainersOf(server_id);
    s.marked = marker.empty() ? 0 : wstest::CountProcsWithMarker(marker);
    std::string p = "/proc/" + std::to_string(srv.pid());
    if (DIR *d = opendir((p + "/fd").c_str())) {
        while (struct dirent *de = readdir(d)) {
            if (de->d_name[0] == '.')
                continue;
            char buf[512];
            ssize_t n = readlink((p + "/fd/" + de->d_name).c_str(), buf, sizeof(buf) - 1);
            std::string t(buf, n > 0 ? n : 0);
            size_t br = t.find(":[");
            if (br != std::string::npos && t.compare(0, 10, "anon_inode") != 0)
                t = t.substr(0, br);
            s.fd_kinds[t]++;
        }
        closedir(d);
    }
    if (DIR *d = opendir((p + "/task").c_str())) {
        while (struct dirent *de = readdir(d)) {
            if (de->d_name[0] == '.')
                continue;
            std::string name = Slurp(p + "/task/" + de->d_name + "/comm");
            while (!name.empty() && name.back() == '\n')
                name.pop_back();
            s.thread_names[name]++;
        }
        closedir(d);
    }
    return s;
}

std::string Diff(const std::map<std::string, int> &before, const std::map<std::string, int> &after)
{
    std::string out;
    std::map<std::string, std::pair<int, int>> all;
    for (const auto &[k, v] : before)
        all[k].first = v;
    for (const auto &[k, v] : after)
        all[k].second = v;
    for (const auto &[k, v] : all)
        if (v.first != v.second)
            out += k + " " + std::to_string(v.first) + "->" + std::to_string(v.second) + "; ";
    return out;
}

std::string Table(const Sample &b, const Sample &a, long rss_bound_kb)
{
    std::ostringstream o;
    o << "| metric | before | after | allowed after |\n| --- | --- | --- | --- |\n";
    o << "| open fds | " << b.fds << " | " << a.fds << " | = before |\n";
    o << "| threads | " << b.threads << " | " << a.threads << " | = before |\n";
    o << "| RSS (KiB) | " << b.rss_kb << " | " << a.rss_kb << " | <= before + " << rss_bound_kb
      << " |\n";
    o << "| zombie children | " << b.zombies << " | " << a.zombies << " | 0 |\n";
    o << "| live descendants | " << b.descendants << " | " << a.descendants << " | = before |\n";
    o << "| cgroups made | " << b.cgroups << " | " << a.cgroups << " | = before |\n";
    o << "| labelled containers | " << b.containers << " | " << a.containers << " | = before |\n";
    o << "| workload processes | " << b.marked << " | " << a.marked << " | 0 |\n";
    return o.str();
}

namespace
{

void Octal(char *field, size_t width, unsigned long long v)
{
    snprintf(field, width, "%0*llo", static_cast<int>(width - 1), v);
}

} // namespace

std::string Tar(const std::vector<std::pair<std::string, std::string>> &files)
{
    std::string out;
    for (const auto &[name, data] : files) {
        char h[512];
        memset(h, 0, sizeof(h));
        snprintf(h, 100, "%s", name.c_str());
        Octal(h + 100, 8, 0644);
        Octal(h + 108, 8, 0);
        Octal(h + 116, 8, 0);
        Octal(h + 124, 12, data.size());
        Octal(h + 136, 12, 1700000000);
        memset(h + 148, ' ', 8);
        h[156] = '0';
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        unsigned sum = 0;
        for (unsigned char c : h)
            sum += c;
        snprintf(h + 148, 8, "%06o", sum);
        h[155] = ' ';
        out.append(h, sizeof(h));
        out += data;
        out.append((512 - data.size() % 512) % 512, '\0');
    }
    out.append(1024, '\0');
    return out;
}

} // namespace soak
