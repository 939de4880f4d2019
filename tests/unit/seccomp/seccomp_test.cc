// Tests for server/posix/seccomp.c, two ways:
//  - on the running kernel: a forked child sets PR_SET_NO_NEW_PRIVS,
//    installs the program's bytes with PR_SET_SECCOMP and makes one call;
//    the result comes back through a pipe. Arguments are picked so that,
//    without the filter, the kernel would answer something other than EPERM
//    (ENOENT, EBADF, EFAULT, EINVAL or success), and so that nothing
//    touches the host if the filter were wrong;
//  - in a small classic-BPF interpreter over struct seccomp_data, which
//    sweeps every syscall number and many argument values without running
//    any of them, and checks what the kernel cannot show here (another
//    architecture, x32 on a kernel built without it).
// The expected deny list below is written from <sys/syscall.h> numbers, not
// from the module's table, so a name the module misspells or libseccomp
// does not know shows up as a difference.
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/posix/seccomp.h"
}

namespace
{

constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kEperm = SECCOMP_RET_ERRNO | EPERM;
constexpr uint32_t kEnosys = SECCOMP_RET_ERRNO | ENOSYS;
// What the interpreter answers for a program it cannot run to a RET.
constexpr uint32_t kBroken = 0xdeadbeef;
// What a probe reports when it threw (e.g. std::thread without clone).
constexpr long kProbeThrew = -3;
constexpr uint64_t kX32Bit = 0x40000000; // __X32_SYSCALL_BIT
constexpr long kOpenTreeAttr = 467;      // x86_64, Linux 6.15; not in these headers
constexpr long kI386Getpid = 20;

#define SC(name)                                                                                   \
    {                                                                                              \
        SYS_##name, #name                                                                          \
    }
// Every syscall refused outright, by x86_64 number.
const std::vector<std::pair<long, const char *>> kDenied = {
    SC(init_module),
    SC(finit_module),
    SC(delete_module),
    SC(create_module),
    SC(get_kernel_syms),
    SC(query_module),
    SC(kexec_load),
    SC(kexec_file_load),
    SC(reboot),
    SC(mount),
    SC(umount2),
    SC(fsopen),
    SC(fsconfig),
    SC(fsmount),
    SC(fspick),
    SC(move_mount),
    SC(open_tree),
    {kOpenTreeAttr, "open_tree_attr"},
    SC(mount_setattr),
    SC(pivot_root),
    SC(chroot),
    SC(setns),
    SC(unshare),
    SC(ptrace),
    SC(process_vm_readv),
    SC(process_vm_writev),
    SC(process_madvise),
    SC(kcmp),
    SC(pidfd_getfd),
    SC(perf_event_open),
    SC(bpf),
    SC(userfaultfd),
    SC(io_uring_setup),
    SC(io_uring_enter),
    SC(io_uring_register),
    SC(fanotify_init),
    SC(lookup_dcookie),
    SC(keyctl),
    SC(add_key),
    SC(request_key),
    SC(settimeofday),
    SC(clock_settime),
    SC(clock_adjtime),
    SC(adjtimex),
    SC(acct),
    SC(quotactl),
    SC(quotactl_fd),
    SC(swapon),
    SC(swapoff),
    SC(syslog),
    SC(vhangup),
    SC(nfsservctl),
    SC(sysfs),
    SC(_sysctl),
    SC(ustat),
    SC(uselib),
    SC(iopl),
    SC(ioperm),
    SC(open_by_handle_at),
    SC(name_to_handle_at),
    SC(mbind),
    SC(set_mempolicy),
    SC(set_mempolicy_home_node),
    SC(move_pages),
    SC(migrate_pages),
    SC(get_mempolicy),
};
#undef SC

#ifdef CLONE_NEWTIME
constexpr uint64_t kNewTime = CLONE_NEWTIME;
#else
constexpr uint64_t kNewTime = 0;
#endif
constexpr uint64_t kCloneNsMask = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                  CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP | kNewTime;

// Docker's personality values, compared on the low 32 bits like the kernel.
bool PersonalityAllowed(uint64_t v)
{
    uint32_t lo = (uint32_t)v;
    return lo == 0 || lo == 0x8 || lo == 0x20000 || lo == 0x20008 || lo == 0xffffffff;
}

// The filter refuses every family or netlink protocol with high bits set,
// although the kernel would read only the low 32: it fails closed.
bool SocketAllowed(uint64_t family, uint64_t protocol)
{
    return family == AF_UNIX || family == AF_INET || family == AF_INET6 ||
           (family == AF_NETLINK && protocol == NETLINK_ROUTE);
}

// Classic BPF as the kernel runs a seccomp filter, for the instructions a
// libseccomp program uses (anything else fails the test).
uint32_t RunBpf(const sock_filter *prog, size_t n, const seccomp_data &d)
{
    uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {};
    for (size_t pc = 0; pc < n; pc++) {
        const sock_filter &f = prog[pc];
        switch (f.code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (f.k % 4 != 0 || f.k + 4 > sizeof(d)) {
                ADD_FAILURE() << "load outside seccomp_data at " << pc;
                return kBroken;
            }
            memcpy(&a, (const char *)&d + f.k, 4);
            break;
        case BPF_LD | BPF_MEM:
            a = mem[f.k % BPF_MEMWORDS];
            break;
        case BPF_LDX | BPF_MEM:
            x = mem[f.k % BPF_MEMWORDS];
            break;
        case BPF_ST:
            mem[f.k % BPF_MEMWORDS] = a;
            break;
        case BPF_STX:
            mem[f.k % BPF_MEMWORDS] = x;
            break;
        case BPF_ALU | BPF_AND | BPF_K:
            a &= f.k;
            break;
        case BPF_ALU | BPF_OR | BPF_K:
            a |= f.k;
            break;
        case BPF_MISC | BPF_TAX:
            x = a;
            break;
        case BPF_MISC | BPF_TXA:
            a = x;
            break;
        case BPF_JMP | BPF_JA:
            pc += f.k;
            break;
        case BPF_JMP | BPF_JEQ | BPF_K:
            pc += a == f.k ? f.jt : f.jf;
            break;
        case BPF_JMP | BPF_JGT | BPF_K:
            pc += a > f.k ? f.jt : f.jf;
            break;
        case BPF_JMP | BPF_JGE | BPF_K:
            pc += a >= f.k ? f.jt : f.jf;
            break;
        case BPF_JMP | BPF_JSET | BPF_K:
            pc += (a & f.k) ? f.jt : f.jf;
            break;
        case BPF_RET | BPF_K:
            return f.k;
        case BPF_RET | BPF_A:
            return a;
        default:
            ADD_FAILURE() << "opcode 0x" << std::hex << f.code << " at " << std::dec << pc;
            return kBroken;
        }
    }
    ADD_FAILURE() << "ran off the end of the program";
    return kBroken;
}

// One call's result, reported by the child.
struct Report {
    int installed; // 1 once the filter is in (or none was asked for)
    int err;
    long ret;
};

struct Outcome {
    bool reported = false; // the child reported and exited 0
    int signal = 0;        // the child died of this signal instead
    long ret = 0;
    int err = 0;
};

class Seccomp : public ::testing::Test
{
  protected:
    static void SetUpTestSuite()
    {
        build_error_ = ws_seccomp_new(&filter_);
    }

    static void TearDownTestSuite()
    {
        ws_seccomp_free(filter_);
        filter_ = nullptr;
    }

    void SetUp() override
    {
        ASSERT_EQ(build_error_, 0) << strerror(-build_error_);
        ASSERT_NE(filter_, nullptr);
        prog_ = static_cast<const sock_filter *>(ws_seccomp_program(filter_, &len_));
        ASSERT_NE(prog_, nullptr);
        ASSERT_GT(len_, 0u);
        ASSERT_EQ(len_ % sizeof(sock_filter), 0u);
    }

    uint32_t Decide(long nr, std::vector<uint64_t> args = {},
                    uint32_t arch = AUDIT_ARCH_X86_64) const
    {
        seccomp_data d = {};
        d.nr = (int)nr;
        d.arch = arch;
        d.instruction_pointer = 0x401000;
        for (size_t i = 0; i < args.size() && i < 6; i++)
            d.args[i] = args[i];
        return RunBpf(prog_, len_ / sizeof(sock_filter), d);
    }

    // Runs probe in a forked child, under the filter when `filtered`. The
    // probe returns a syscall-style result (-1 with errno on failure).
    Outcome Run(const std::function<long()> &probe, bool filtered = true) const
    {
        Outcome o;
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) {
            ADD_FAILURE() << "pipe2: " << strerror(errno);
            return o;
        }
        pid_t pid = fork();
        if (pid < 0) {
            ADD_FAILURE() << "fork: " << strerror(errno);
            close(p[0]);
            close(p[1]);
            return o;
        }
        if (pid == 0) {
            close(p[0]);
            // A fault in the probe must kill the child with its signal, as
            // in a plain build: the sanitizers' own handlers would turn it
            // into exit status 1, which reads as "did not report".
            for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE})
                signal(sig, SIG_DFL);
            Report rep = {1, 0, 0};
            sock_fprog fprog = {(unsigned short)(len_ / sizeof(sock_filter)),
                                const_cast<sock_filter *>(prog_)};
            if (filtered && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
                             prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0)) {
                rep = {0, errno, -1};
            } else {
                // An exception must not unwind into gtest: the child would
                // go on running the rest of the suite.
                try {
                    errno = 0;
                    rep.ret = probe();
                    rep.err = errno;
                } catch (...) {
                    rep = {1, 0, kProbeThrew};
                }
            }
            if (write(p[1], &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
                _exit(2);
            _exit(0);
        }
        close(p[1]);
        Report rep = {};
        size_t got = 0;
        while (got < sizeof(rep)) {
            ssize_t n = read(p[0], (char *)&rep + got, sizeof(rep) - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        close(p[0]);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (WIFSIGNALED(status)) {
            o.signal = WTERMSIG(status);
            return o;
        }
        if (got != sizeof(rep) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ADD_FAILURE() << "child did not report (status " << status << ")";
            return o;
        }
        if (!rep.installed) {
            ADD_FAILURE() << "installing the filter failed: " << strerror(rep.err);
            return o;
        }
        o.reported = true;
        o.ret = rep.ret;
        o.err = rep.err;
        return o;
    }

    void ExpectRefused(const std::string &what, const std::function<long()> &probe,
                       int want = EPERM) const
    {
        Outcome o = Run(probe);
        ASSERT_TRUE(o.reported) << what << ": child died of signal " << o.signal;
        EXPECT_EQ(o.ret, -1) << what;
        EXPECT_EQ(o.err, want) << what << ": got " << strerror(o.err);
    }

    void ExpectAllowed(const std::string &what, const std::function<long()> &probe) const
    {
        Outcome o = Run(probe);
        ASSERT_TRUE(o.reported) << what << ": child died of signal " << o.signal;
        EXPECT_GE(o.ret, 0) << what << ": ret " << o.ret << ", " << strerror(o.err);
    }

    static struct ws_seccomp *filter_;
    static int build_error_;
    const sock_filter *prog_ = nullptr;
    size_t len_ = 0;
};

struct ws_seccomp *Seccomp::filter_ = nullptr;
int Seccomp::build_error_ = 0;

long Sys(long nr, uint64_t a0 = 0, uint64_t a1 = 0, uint64_t a2 = 0, uint64_t a3 = 0,
         uint64_t a4 = 0, uint64_t a5 = 0)
{
    return syscall(nr, a0, a1, a2, a3, a4, a5);
}

// getpid through the i386 entry point (int $0x80, AUDIT_ARCH_I386); the
// kernel clears r8-r11 on the way back.
long Int80Getpid()
{
    long ret = kI386Getpid;
    __asm__ volatile("int $0x80" : "+a"(ret) : : "memory", "r8", "r9", "r10", "r11");
    if (ret < 0 && ret > -4096) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
}

// ---- the object ----

TEST_F(Seccomp, ProgramAndSummary)
{
    EXPECT_LE(len_, (size_t)WS_SECCOMP_PROG_MAX);
    std::string summary = ws_seccomp_summary(filter_);
    EXPECT_EQ(summary.rfind("x86_64 only", 0), 0u) << summary;
    EXPECT_NE(summary.find("deny list (" + std::to_string(kDenied.size()) + " syscalls) EPERM"),
              std::string::npos)
        << summary;
    EXPECT_NE(summary.find("clone3 ENOSYS"), std::string::npos) << summary;
    EXPECT_NE(summary.find(std::to_string(len_ / sizeof(sock_filter)) + " BPF insns"),
              std::string::npos)
        << summary;
    EXPECT_EQ(summary.find('\n'), std::string::npos);
    EXPECT_LT(summary.size(), (size_t)WS_SECCOMP_SUMMARY_MAX);

    size_t len = 12345;
    EXPECT_EQ(ws_seccomp_program(nullptr, &len), nullptr);
    EXPECT_EQ(len, 12345u);
    EXPECT_EQ(ws_seccomp_program(filter_, nullptr), nullptr);
    EXPECT_STREQ(ws_seccomp_summary(nullptr), "");
    EXPECT_EQ(ws_seccomp_fd(nullptr), -EINVAL);
    EXPECT_EQ(ws_seccomp_new(nullptr), -EINVAL);
    ws_seccomp_free(nullptr);
}

TEST_F(Seccomp, BuildsTheSameProgramEachTime)
{
    struct ws_seccomp *again = nullptr;
    ASSERT_EQ(ws_seccomp_new(&again), 0);
    size_t len = 0;
    const void *prog = ws_seccomp_program(again, &len);
    ASSERT_EQ(len, len_);
    EXPECT_EQ(memcmp(prog, prog_, len), 0);
    ws_seccomp_free(again);
}

TEST_F(Seccomp, FdHoldsTheProgramSealedAtOffsetZero)
{
    int fd = ws_seccomp_fd(filter_);
    ASSERT_GE(fd, 0) << strerror(-fd);

    EXPECT_EQ(lseek(fd, 0, SEEK_CUR), 0);
    int fdflags = fcntl(fd, F_GETFD);
    ASSERT_GE(fdflags, 0);
    EXPECT_TRUE(fdflags & FD_CLOEXEC);
    int seals = fcntl(fd, F_GET_SEALS);
    ASSERT_GE(seals, 0) << strerror(errno);
    EXPECT_EQ(seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
              F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);

    // Read it the way bwrap does: from the current offset to EOF.
    std::vector<char> buf(len_ + 64);
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf.data() + got, buf.size() - got);
        ASSERT_GE(n, 0) << strerror(errno);
        if (n == 0)
            break;
        got += (size_t)n;
    }
    ASSERT_EQ(got, len_);
    EXPECT_EQ(memcmp(buf.data(), prog_, len_), 0);

    EXPECT_EQ(pwrite(fd, "x", 1, 0), -1);
    EXPECT_EQ(errno, EPERM);
    EXPECT_EQ(write(fd, "x", 1), -1);
    EXPECT_EQ(errno, EPERM);
    EXPECT_EQ(ftruncate(fd, 0), -1);
    EXPECT_EQ(errno, EPERM);
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), -1);
    EXPECT_EQ(errno, EPERM);
    EXPECT_EQ(mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);

    // Every call is a fresh fd of its own.
    int fd2 = ws_seccomp_fd(filter_);
    ASSERT_GE(fd2, 0);
    EXPECT_NE(fd2, fd);
    EXPECT_EQ(lseek(fd2, 0, SEEK_CUR), 0);
    close(fd2);
    close(fd);
}

// ---- the BPF, in the interpreter ----

TEST_F(Seccomp, BpfEverySyscallNumber)
{
    std::set<long> denied;
    for (const auto &d : kDenied)
        denied.insert(d.first);
    ASSERT_EQ(denied.size(), kDenied.size());

    // Zero arguments: socket and socketpair then ask for AF_UNSPEC, which
    // is refused; clone, ioctl and personality(0) are allowed.
    for (long nr = 0; nr < 1024; nr++) {
        uint32_t want = kAllow;
        if (denied.count(nr) || nr == SYS_socket || nr == SYS_socketpair)
            want = kEperm;
        else if (nr == SYS_clone3)
            want = kEnosys;
        EXPECT_EQ(Decide(nr), want) << "syscall " << nr;
    }
    for (const auto &d : kDenied)
        EXPECT_EQ(Decide(d.first, {1, 2, 3, 4, 5, 6}), kEperm) << d.second;
}

TEST_F(Seccomp, BpfOtherArchitecturesAndX32Refused)
{
    // x32: the x86_64 convention with bit 30 in the number. libseccomp
    // refuses the whole range with the bad-arch action, the one exception
    // being nr -1 (what a tracer leaves to skip a call), an ordinary
    // ENOSYS for the kernel.
    for (long nr = 0; nr < 1024; nr++)
        EXPECT_EQ(Decide((long)(kX32Bit | (uint64_t)nr)), kEperm) << "x32 syscall " << nr;
    EXPECT_EQ(Decide((long)(kX32Bit | 0x3fffffff)), kEperm);
    EXPECT_EQ(Decide((long)0x80000000), kEperm);
    EXPECT_EQ(Decide(-1), kAllow);

    for (uint32_t arch : {(uint32_t)AUDIT_ARCH_I386, (uint32_t)AUDIT_ARCH_AARCH64,
                          (uint32_t)AUDIT_ARCH_ARM, (uint32_t)0})
        for (long nr : {0L, 1L, kI386Getpid, 39L, 120L, 500L})
            EXPECT_EQ(Decide(nr, {}, arch), kEperm) << "arch 0x" << std::hex << arch;
}

TEST_F(Seccomp, BpfPersonality)
{
    std::vector<uint64_t> values = {0,          8,          0x20000,           0x20008,
                                    0xffffffff, 0xfffffffe, 0x7fffffff,        0x80000000,
                                    0x20009,    0x20018,    0x40000,           0x400000,
                                    0x0006,     0x40008,    0x20000 | 0x40000, 0xfffdffff,
                                    0xfffffff7, 0xfffdfff7, 0xfffdfff8};
    for (int i = 0; i < 32; i++) {
        uint64_t bi = UINT64_C(1) << i;
        values.push_back(bi);
        values.push_back(0xffffffff & ~bi);
        for (int j = i + 1; j < 32; j++) {
            uint64_t bj = UINT64_C(1) << j;
            values.push_back(bi | bj);
            values.push_back(0xffffffff & ~(bi | bj));
        }
    }
    std::mt19937_64 rng(20240611);
    for (int i = 0; i < 200000; i++)
        values.push_back(rng() & 0xffffffff);
    // Garbage in the high half does not matter: the kernel takes an
    // unsigned int.
    size_t n = values.size();
    for (size_t i = 0; i < n; i += 7)
        values.push_back(values[i] | (rng() << 32));

    for (uint64_t v : values)
        ASSERT_EQ(Decide(SYS_personality, {v}), PersonalityAllowed(v) ? kAllow : kEperm)
            << "personality(0x" << std::hex << v << ")";
}

TEST_F(Seccomp, BpfClone)
{
    EXPECT_EQ(Decide(SYS_clone3, {0, 88}), kEnosys);
    EXPECT_EQ(Decide(SYS_clone, {SIGCHLD}), kAllow);
    EXPECT_EQ(Decide(SYS_clone,
                     {CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                      CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID}),
              kAllow);
    for (uint64_t bit = 1; bit; bit <<= 1) {
        uint32_t want = (bit & kCloneNsMask) ? kEperm : kAllow;
        EXPECT_EQ(Decide(SYS_clone, {bit | SIGCHLD}), want) << std::hex << bit;
    }
    std::mt19937_64 rng(7);
    for (int i = 0; i < 100000; i++) {
        uint64_t flags = rng() & rng(); // sparse, so some have no namespace bit
        ASSERT_EQ(Decide(SYS_clone, {flags}), (flags & kCloneNsMask) ? kEperm : kAllow)
            << std::hex << flags;
    }
}

TEST_F(Seccomp, BpfIoctl)
{
    for (uint64_t req : {(uint64_t)TIOCSTI, (uint64_t)TIOCLINUX}) {
        EXPECT_EQ(Decide(SYS_ioctl, {0, req}), kEperm);
        EXPECT_EQ(Decide(SYS_ioctl, {0, req | UINT64_C(0xdead000000000000)}), kEperm);
        EXPECT_EQ(Decide(SYS_ioctl, {0, req | UINT64_C(0xffffffff00000000)}), kEperm);
        EXPECT_EQ(Decide(SYS_ioctl, {0, req + 1}), kAllow);
        EXPECT_EQ(Decide(SYS_ioctl, {0, req | 0x10000}), kAllow);
    }
    EXPECT_EQ(Decide(SYS_ioctl, {0, TIOCGWINSZ}), kAllow);
    EXPECT_EQ(Decide(SYS_ioctl, {0, FIONREAD}), kAllow);
}

TEST_F(Seccomp, BpfSocketFamilies)
{
    for (long nr : {(long)SYS_socket, (long)SYS_socketpair}) {
        for (uint64_t family = 0; family < 1024; family++)
            for (uint64_t proto : {0, 1, 9, 16})
                ASSERT_EQ(Decide(nr, {family, SOCK_STREAM, proto}),
                          SocketAllowed(family, proto) ? kAllow : kEperm)
                    << nr << " family " << family << " protocol " << proto;
        for (uint64_t family : {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET}) {
            EXPECT_EQ(Decide(nr, {family | (UINT64_C(1) << 32), SOCK_STREAM, 0}), kEperm);
            EXPECT_EQ(Decide(nr, {family | UINT64_C(0xffffffff00000000), SOCK_STREAM, 0}), kEperm);
        }
        EXPECT_EQ(Decide(nr, {UINT64_MAX, SOCK_STREAM, 0}), kEperm);
        EXPECT_EQ(Decide(nr, {0xffffffff, SOCK_STREAM, 0}), kEperm);
        EXPECT_EQ(Decide(nr, {AF_NETLINK, SOCK_RAW, UINT64_C(1) << 32}), kEperm);
        EXPECT_EQ(Decide(nr, {AF_NETLINK, SOCK_RAW, UINT64_MAX}), kEperm);
    }
}

// A sandbox whose one mapped uid is a workspace's (at least the range's
// first): an id below that floor in any call that gives a process or a
// file an id is EPERM, as for a user without privileges on a host, not the
// EINVAL of an unmapped id; the workspace's own ids, ids above, and -1
// ("unchanged") go on to the kernel. Without a floor nothing changes.
TEST(SeccompIds, IdsBelowTheFloorAreEperm)
{
    constexpr uint64_t kFloor = 524288, kOwn = 524300, kUnchanged = 0xffffffff;
    ws_seccomp *f = nullptr;
    ASSERT_EQ(ws_seccomp_new_ids((unsigned)kFloor, &f), 0);
    size_t len = 0;
    auto *prog = static_cast<const sock_filter *>(ws_seccomp_program(f, &len));
    auto decide = [&](long nr, std::vector<uint64_t> args) {
        seccomp_data d = {};
        d.nr = (int)nr;
        d.arch = AUDIT_ARCH_X86_64;
        for (size_t i = 0; i < args.size(); i++)
            d.args[i] = args[i];
        return RunBpf(prog, len / sizeof(sock_filter), d);
    };
    const struct {
        long nr;
        unsigned first, n;
    } calls[] = {
        {SYS_setuid, 0, 1},   {SYS_setgid, 0, 1},   {SYS_setfsuid, 0, 1},  {SYS_setfsgid, 0, 1},
        {SYS_setreuid, 0, 2}, {SYS_setregid, 0, 2}, {SYS_setresuid, 0, 3}, {SYS_setresgid, 0, 3},
        {SYS_chown, 1, 2},    {SYS_fchown, 1, 2},   {SYS_lchown, 1, 2},    {SYS_fchownat, 2, 2},
    };
    for (const auto &c : calls) {
        std::vector<uint64_t> ok(6, kOwn);
        EXPECT_EQ(decide(c.nr, ok), kAllow) << c.nr;
        for (unsigned a = c.first; a < c.first + c.n; a++) {
            for (uint64_t below : {UINT64_C(0), UINT64_C(65534), kFloor - 1}) {
                std::vector<uint64_t> args = ok;
                args[a] = below;
                EXPECT_EQ(decide(c.nr, args), kEperm) << c.nr << " arg " << a << " " << below;
            }
            for (uint64_t fine : {kFloor, kOwn + 1, kUnchanged}) {
                std::vector<uint64_t> args = ok;
                args[a] = fine;
                EXPECT_EQ(decide(c.nr, args), kAllow) << c.nr << " arg " << a << " " << fine;
            }
        }
    }
    EXPECT_NE(std::string(ws_seccomp_summary(f)).find("ids below the workspace range"),
              std::string::npos);
    ws_seccomp_free(f);

    // No floor: the program of ws_seccomp_new, where setuid(0) is the
    // kernel's to judge.
    ASSERT_EQ(ws_seccomp_new_ids(0, &f), 0);
    prog = static_cast<const sock_filter *>(ws_seccomp_program(f, &len));
    EXPECT_EQ(decide(SYS_setuid, {0}), kAllow);
    ws_seccomp_free(f);
}

// ---- the kernel ----

TEST_F(Seccomp, KernelDeniedSyscalls)
{
    ExpectRefused("mount", [] {
        return (long)mount("none", "/nonexistent-ws-seccomp", "tmpfs", 0, nullptr);
    });
    ExpectRefused("umount2", [] { return (long)umount2("/nonexistent-ws-seccomp", 0); });
    ExpectRefused("unshare(CLONE_NEWUSER)", [] { return (long)unshare(CLONE_NEWUSER); });
    ExpectRefused("unshare(0)", [] { return (long)unshare(0); });
    ExpectRefused("setns", [] { return (long)setns(-1, CLONE_NEWNET); });
    ExpectRefused("ptrace", [] { return Sys(SYS_ptrace, PTRACE_ATTACH, 0); });
    ExpectRefused("process_vm_readv", [] {
        char a = 0, b = 0;
        iovec local = {&a, 1}, remote = {&b, 1};
        return (long)process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    });
    ExpectRefused("process_vm_writev", [] {
        char a = 0, b = 0;
        iovec local = {&a, 1}, remote = {&b, 1};
        return (long)process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
    });
    ExpectRefused("kcmp",
                  [] { return Sys(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, 0, 0); });
    ExpectRefused("pidfd_getfd", [] { return Sys(SYS_pidfd_getfd, (uint64_t)-1, 0, 0); });
    ExpectRefused("perf_event_open",
                  [] { return Sys(SYS_perf_event_open, 0, 0, (uint64_t)-1, (uint64_t)-1, 0); });
    ExpectRefused("keyctl",
                  [] { return Sys(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, (uint64_t)-3, 0); });
    ExpectRefused("add_key", [] { return Sys(SYS_add_key, 0, 0, 0, 0, 0); });
    ExpectRefused("request_key", [] { return Sys(SYS_request_key, 0, 0, 0, 0); });
    ExpectRefused("bpf", [] { return Sys(SYS_bpf, 0, 0, 0); });
    ExpectRefused("userfaultfd", [] { return Sys(SYS_userfaultfd, O_CLOEXEC); });
    ExpectRefused("init_module", [] { return Sys(SYS_init_module, 0, 0, 0); });
    ExpectRefused("finit_module", [] { return Sys(SYS_finit_module, (uint64_t)-1, 0, 0); });
    ExpectRefused("delete_module", [] { return Sys(SYS_delete_module, 0, 0); });
    // Invalid flags: the kernel would say EINVAL before unloading anything.
    ExpectRefused("kexec_load", [] { return Sys(SYS_kexec_load, 0, 0, 0, 0xdead0000); });
    ExpectRefused("pivot_root", [] {
        return Sys(SYS_pivot_root, (uintptr_t) "/nonexistent-ws-seccomp",
                   (uintptr_t) "/nonexistent-ws-seccomp");
    });
    ExpectRefused("chroot", [] { return (long)chroot("/nonexistent-ws-seccomp"); });
    ExpectRefused("fsopen", [] { return Sys(SYS_fsopen, 0, 0); });
    ExpectRefused("open_tree", [] { return Sys(SYS_open_tree, (uint64_t)-1, 0, 0); });
    ExpectRefused("open_tree_attr", [] { return Sys(kOpenTreeAttr, (uint64_t)-1, 0, 0, 0, 0); });
    ExpectRefused("move_mount", [] { return Sys(SYS_move_mount, (uint64_t)-1, 0, 0, 0, 0); });
    ExpectRefused("io_uring_setup", [] { return Sys(SYS_io_uring_setup, 1, 0); });
    ExpectRefused("io_uring_enter", [] { return Sys(SYS_io_uring_enter, (uint64_t)-1, 0, 0, 0); });
    ExpectRefused("clock_settime", [] { return Sys(SYS_clock_settime, CLOCK_REALTIME, 0); });
    ExpectRefused("adjtimex", [] { return Sys(SYS_adjtimex, 0); });
    ExpectRefused("acct", [] { return Sys(SYS_acct, (uintptr_t) "/nonexistent-ws-seccomp"); });
    ExpectRefused("swapon",
                  [] { return Sys(SYS_swapon, (uintptr_t) "/nonexistent-ws-seccomp", 0); });
    ExpectRefused("syslog", [] { return Sys(SYS_syslog, 10 /* SIZE_BUFFER */, 0, 0); });
    ExpectRefused("open_by_handle_at",
                  [] { return Sys(SYS_open_by_handle_at, (uint64_t)-1, 0, 0); });
    ExpectRefused("get_mempolicy", [] { return Sys(SYS_get_mempolicy, 0, 0, 0, 0, 0); });
    ExpectRefused("set_mempolicy", [] { return Sys(SYS_set_mempolicy, 0, 0, 0); });
}

TEST_F(Seccomp, KernelOrdinaryCallsWork)
{
    ExpectAllowed("getpid", [] { return (long)getpid(); });
    ExpectAllowed("open /dev/null", [] { return (long)open("/dev/null", O_RDONLY | O_CLOEXEC); });
    ExpectAllowed("ioctl FIONREAD", [] {
        int p[2], n = 0;
        if (pipe(p) != 0)
            return -1L;
        return (long)ioctl(p[0], FIONREAD, &n);
    });
    ExpectAllowed("prctl", [] { return (long)prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); });
}

TEST_F(Seccomp, KernelPersonality)
{
    ExpectRefused("personality(PER_BSD)", [] { return (long)personality(PER_BSD); });
    ExpectRefused("personality(ADDR_NO_RANDOMIZE)",
                  [] { return (long)personality(ADDR_NO_RANDOMIZE); });
    ExpectRefused("personality(READ_IMPLIES_EXEC)",
                  [] { return (long)personality(READ_IMPLIES_EXEC); });
    ExpectRefused("personality(0xfffffffe)", [] { return Sys(SYS_personality, 0xfffffffe); });
    ExpectRefused("personality(PER_BSD | 1 << 32)",
                  [] { return Sys(SYS_personality, PER_BSD | (UINT64_C(1) << 32)); });
    ExpectAllowed("personality(0xffffffff)", [] { return (long)personality(0xffffffff); });
    ExpectAllowed("personality(0xffffffff | 1 << 40)",
                  [] { return Sys(SYS_personality, 0xffffffff | (UINT64_C(1) << 40)); });
    for (unsigned long v : {0x0UL, 0x8UL, 0x20000UL, 0x20008UL})
        ExpectAllowed("personality(" + std::to_string(v) + ")", [v] {
            if (personality(v) < 0)
                return -1L;
            // Really set: the query returns it.
            return (unsigned long)personality(0xffffffff) == v ? 0L : -2L;
        });
}

TEST_F(Seccomp, KernelClone)
{
    ExpectRefused(
        "clone3", [] { return Sys(SYS_clone3, 0, 0); }, ENOSYS);
    for (uint64_t flag : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                          CLONE_NEWNET, CLONE_NEWCGROUP}) {
        ExpectRefused("clone(" + std::to_string(flag) + " | SIGCHLD)", [flag] {
            long r = Sys(SYS_clone, flag | SIGCHLD, 0, 0, 0, 0);
            if (r == 0)
                _exit(0); // the filter failed; the parent sees the pid
            if (r > 0)
                waitpid((pid_t)r, nullptr, 0);
            return r;
        });
    }
    ExpectAllowed("fork", [] {
        pid_t pid = fork();
        if (pid == 0)
            _exit(7);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid)
            return -1L;
        return WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0L : -2L;
    });
    // glibc tries clone3 first and falls back to clone(2) on ENOSYS.
    ExpectAllowed("std::thread", [] {
        int seen = 0;
        std::thread t([&seen] { seen = 1; });
        t.join();
        return seen == 1 ? 0L : -2L;
    });
}

TEST_F(Seccomp, KernelIoctl)
{
    // fd -1: without the filter the kernel says EBADF.
    ExpectRefused("ioctl(TIOCSTI)", [] {
        char c = 'x';
        return (long)ioctl(-1, TIOCSTI, &c);
    });
    ExpectRefused("ioctl(TIOCSTI | garbage << 32)", [] {
        char c = 'x';
        return Sys(SYS_ioctl, (uint64_t)-1, TIOCSTI | UINT64_C(0xdead000000000000), (uintptr_t)&c);
    });
    ExpectRefused("ioctl(TIOCLINUX)", [] {
        char c = 6;
        return (long)ioctl(-1, TIOCLINUX, &c);
    });
    ExpectRefused(
        "ioctl(TIOCGWINSZ) on fd -1",
        [] {
            struct winsize ws;
            return (long)ioctl(-1, TIOCGWINSZ, &ws);
        },
        EBADF);
}

TEST_F(Seccomp, KernelSockets)
{
    ExpectRefused("socket(AF_PACKET)", [] { return (long)socket(AF_PACKET, SOCK_RAW, 0); });
    ExpectRefused("socket(AF_ALG)", [] { return (long)socket(AF_ALG, SOCK_SEQPACKET, 0); });
    ExpectRefused("socket(AF_VSOCK)", [] { return (long)socket(AF_VSOCK, SOCK_STREAM, 0); });
    ExpectRefused("socket(AF_BLUETOOTH)", [] { return (long)socket(AF_BLUETOOTH, SOCK_RAW, 0); });
    ExpectRefused("socket(AF_NETLINK, NETLINK_AUDIT)",
                  [] { return (long)socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT); });
    ExpectRefused("socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)",
                  [] { return (long)socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT); });
    ExpectRefused("socket(AF_INET | 1 << 32)",
                  [] { return Sys(SYS_socket, AF_INET | (UINT64_C(1) << 32), SOCK_STREAM, 0); });
    ExpectRefused("socket(AF_PACKET | 1 << 32)",
                  [] { return Sys(SYS_socket, AF_PACKET | (UINT64_C(1) << 32), SOCK_RAW, 0); });
    ExpectRefused("socket(-1)", [] { return (long)socket(-1, SOCK_STREAM, 0); });
    ExpectRefused("socketpair(AF_PACKET)", [] {
        int sv[2];
        return (long)socketpair(AF_PACKET, SOCK_RAW, 0, sv);
    });

    ExpectAllowed("socket(AF_UNIX)", [] { return (long)socket(AF_UNIX, SOCK_STREAM, 0); });
    ExpectAllowed("socket(AF_INET)", [] { return (long)socket(AF_INET, SOCK_STREAM, 0); });
    ExpectAllowed("socket(AF_NETLINK, NETLINK_ROUTE)",
                  [] { return (long)socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE); });
    ExpectAllowed("socketpair(AF_UNIX)", [] {
        int sv[2];
        return (long)socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    });
    // A kernel without IPv6 says EAFNOSUPPORT; the filter must not say EPERM.
    Outcome o = Run([] { return (long)socket(AF_INET6, SOCK_STREAM, 0); });
    ASSERT_TRUE(o.reported);
    EXPECT_TRUE(o.ret >= 0 || o.err == EAFNOSUPPORT) << strerror(o.err);
}

TEST_F(Seccomp, KernelX32Refused)
{
    // Without the filter this kernel answers ENOSYS (no CONFIG_X86_X32_ABI)
    // or the pid; with it, EPERM either way.
    ExpectRefused("x32 getpid", [] { return Sys((long)(kX32Bit | SYS_getpid)); });
    ExpectRefused("x32 mount", [] {
        return Sys((long)(kX32Bit | SYS_mount), (uintptr_t) "none",
                   (uintptr_t) "/nonexistent-ws-seccomp", (uintptr_t) "tmpfs", 0, 0);
    });
    ExpectRefused("x32 unshare", [] { return Sys((long)(kX32Bit | SYS_unshare), CLONE_NEWUSER); });
}

// What a kernel without the i386 entry does to int $0x80, made on any
// kernel: a vector with no user-mode gate faults with SIGSEGV. Run() must
// report that signal in every build (the sanitizers install SIGSEGV handlers
// that would otherwise turn it into an exit status), or the test below fails
// instead of skipping on such a kernel.
TEST_F(Seccomp, ProbeFaultIsReportedAsItsSignal)
{
    Outcome o = Run(
        [] {
            __asm__ volatile("int $0x81" ::: "memory");
            return 0L;
        },
        false);
    EXPECT_FALSE(o.reported);
    EXPECT_EQ(o.signal, SIGSEGV) << strsignal(o.signal);
}

TEST_F(Seccomp, KernelI386Refused)
{
    // A kernel without IA-32 emulation has no int $0x80 entry at all (the
    // child takes a SIGSEGV): then there is no syscall to filter.
    Outcome plain = Run(Int80Getpid, false);
    if (plain.signal != 0)
        GTEST_SKIP() << "no i386 syscall entry on this kernel: int $0x80 without the filter "
                     << "is killed by " << strsignal(plain.signal)
                     << " (no CONFIG_IA32_EMULATION, or ia32_emulation=0)";
    ASSERT_TRUE(plain.reported);
    if (plain.ret <= 0 && plain.err == ENOSYS)
        GTEST_SKIP() << "no i386 syscall entry on this kernel: int $0x80 getpid without the "
                     << "filter says ENOSYS";
    ASSERT_GT(plain.ret, 0) << "int $0x80 getpid without the filter: " << strerror(plain.err);
    ExpectRefused("int $0x80 getpid", Int80Getpid);
}

} // namespace
