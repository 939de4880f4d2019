/* The sandbox's seccomp filter, built with libseccomp; see seccomp.h for the
 * policy and why. */
#include "server/posix/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/base/fd.h"
#include "server/base/io.h"
#include "server/base/macros.h"

/* Syscall numbers, clone's argument order and the x32 handling below are
 * x86_64's; another architecture needs its own review, not a rebuild. */
#if !defined(__x86_64__) || defined(__ILP32__)
#error "the sandbox seccomp policy is written for x86_64"
#endif

/* Linux 6.3: the memfd can never be made executable. Debian 12's headers
 * predate it; older kernels refuse the flag with EINVAL. */
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

#define INSN_SIZE sizeof(struct sock_filter)
/* libseccomp's "binary tree" optimization: the syscall number is found in
 * O(log n) comparisons instead of walking the whole deny list on every
 * syscall the sandbox makes. */
#define OPTIMIZE_BINARY_TREE 2
/* The personality bits Docker's allowed values may carry (0, PER_LINUX32,
 * UNAME26, UNAME26 | PER_LINUX32); 0xffffffff is allowed on top. */
#define PERS_FREE ((uint32_t)PER_LINUX32 | (uint32_t)UNAME26)
#define LOW32     UINT64_C(0xffffffff)

struct ws_seccomp {
    struct sock_filter *prog;
    size_t len; /* bytes */
    char summary[WS_SECCOMP_SUMMARY_MAX];
};

/* Refused outright; grouped and explained in seccomp.h. */
static const char *const deny_names[] = {
    /* kernel modules, kexec, reboot */
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "get_kernel_syms",
    "query_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    /* mounts and the root */
    "mount",
    "umount2",
    "umount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "open_tree_attr",
    "mount_setattr",
    "pivot_root",
    "chroot",
    /* namespaces */
    "setns",
    "unshare",
    /* other processes */
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "kcmp",
    "pidfd_getfd",
    /* kernel attack surface */
    "perf_event_open",
    "bpf",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    "lookup_dcookie",
    /* keyring */
    "keyctl",
    "add_key",
    "request_key",
    /* clocks */
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "stime",
    /* host administration, obsolete interfaces */
    "acct",
    "quotactl",
    "quotactl_fd",
    "swapon",
    "swapoff",
    "syslog",
    "vhangup",
    "nfsservctl",
    "sysfs",
    "_sysctl",
    "ustat",
    "uselib",
    /* hardware */
    "iopl",
    "ioperm",
    "vm86",
    "vm86old",
    /* file handles */
    "open_by_handle_at",
    "name_to_handle_at",
    /* NUMA policy */
    "mbind",
    "set_mempolicy",
    "set_mempolicy_home_node",
    "move_pages",
    "migrate_pages",
    "get_mempolicy",
};

/* Deny-list syscalls newer than libseccomp 2.5.4, by x86_64 number (the
 * table is append-only, numbers never change). Used only when libseccomp
 * cannot resolve the name, so a newer libseccomp takes over. */
static const struct {
    const char *name;
    int nr;
} deny_fallback[] = {
    {"open_tree_attr", 467}, /* Linux 6.15 */
};

/* Every CLONE_NEW* flag; each gets its own rule because libseccomp ORs
 * rules but ANDs the comparisons within one. */
static const uint64_t clone_ns_flags[] = {
    CLONE_NEWNS,   CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
    CLONE_NEWPID,  CLONE_NEWNET, CLONE_NEWCGROUP,
#ifdef CLONE_NEWTIME
    CLONE_NEWTIME,
#endif
};

static const uint64_t ioctl_denied[] = {TIOCSTI, TIOCLINUX};

/* A sealable, close-on-exec memfd. Returns the fd or a negated errno. */
static int memfd_new(const char *name)
{
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    int fd = memfd_create(name, flags | MFD_NOEXEC_SEAL);

    if (fd < 0 && errno == EINVAL)
        fd = memfd_create(name, flags);
    return fd < 0 ? -errno : fd;
}

static int rule(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned n,
                const struct scmp_arg_cmp *cmp)
{
    /* _exact: fail rather than let libseccomp rewrite a rule it cannot
     * express as given. */
    return seccomp_rule_add_exact_array(ctx, action, nr, n, cmp);
}

/* EPERM when (arg[argn] & mask) == datum. */
static int deny_masked(scmp_filter_ctx ctx, int nr, unsigned argn, uint64_t mask, uint64_t datum)
{
    const struct scmp_arg_cmp cmp = {
        .arg = argn, .op = SCMP_CMP_MASKED_EQ, .datum_a = mask, .datum_b = datum};

    return rule(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &cmp);
}

/* Adds the deny list. Returns the number of syscalls added or a negated
 * errno. */
static int add_deny_list(scmp_filter_ctx ctx)
{
    int count = 0;

    for (size_t i = 0; i < WS_ELEMENTSOF(deny_names); i++) {
        int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, deny_names[i]);

        for (size_t j = 0; nr < 0 && j < WS_ELEMENTSOF(deny_fallback); j++)
            if (strcmp(deny_fallback[j].name, deny_names[i]) == 0)
                nr = deny_fallback[j].nr;
        /* Unknown to libseccomp, or a syscall x86_64 does not have
         * (negative pseudo numbers): nothing to refuse. */
        if (nr < 0)
            continue;
        int r = rule(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0, NULL);
        if (r < 0)
            return r;
        count++;
    }
    return count;
}

/* personality(2) is allowed for 0, PER_LINUX32, UNAME26, UNAME26 |
 * PER_LINUX32 (the values with no bit outside PERS_FREE) and 0xffffffff.
 * libseccomp cannot negate a comparison nor put two on one argument, so
 * "anything else" is a union of masked patterns on the low 32 bits (the
 * kernel takes an unsigned int). Call the 30 bits outside PERS_FREE, in
 * ascending order, b[0]..b[29]:
 *   - they are mixed: then for some i, b[i] is set and b[(i + 1) % 30] is
 *     clear (a cyclic sequence that is not constant has such a step), one
 *     rule per i;
 *   - they are all set but PER_LINUX32 or UNAME26 is clear: two rules.
 * A value outside the allowed five has its b bits mixed, or all set (and,
 * not being 0xffffffff, a PERS_FREE bit clear), or all clear (then it is one
 * of the four). The allowed values match none of the rules. */
static int add_personality_rules(scmp_filter_ctx ctx)
{
    const int nr = SCMP_SYS(personality);
    const uint32_t fixed = ~PERS_FREE;
    uint32_t bits[32];
    unsigned n = 0;
    int r;

    for (unsigned b = 0; b < 32; b++)
        if (fixed & (UINT32_C(1) << b))
            bits[n++] = UINT32_C(1) << b;
    for (unsigned i = 0; i < n; i++) {
        uint32_t set = bits[i], clear = bits[(i + 1) % n];
        r = deny_masked(ctx, nr, 0, set | clear, set);
        if (r < 0)
            return r;
    }
    for (unsigned b = 0; b < 32; b++) {
        uint32_t bit = UINT32_C(1) << b;
        if (!(PERS_FREE & bit))
            continue;
        r = deny_masked(ctx, nr, 0, fixed | bit, fixed);
        if (r < 0)
            return r;
    }
    return 0;
}

static int add_clone_rules(scmp_filter_ctx ctx)
{
    /* ENOSYS, not EPERM: glibc (pthread_create, posix_spawn) retries with
     * clone(2) only on ENOSYS. */
    int r = rule(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0, NULL);
    if (r < 0)
        return r;
    /* x86_64's clone(2) takes the flags in arg 0; the kernel reads the low
     * 32 bits, where every CLONE_NEW* flag is. */
    for (size_t i = 0; i < WS_ELEMENTSOF(clone_ns_flags); i++) {
        r = deny_masked(ctx, SCMP_SYS(clone), 0, clone_ns_flags[i], clone_ns_flags[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

static int add_ioctl_rules(scmp_filter_ctx ctx)
{
    for (size_t i = 0; i < WS_ELEMENTSOF(ioctl_denied); i++) {
        int r = deny_masked(ctx, SCMP_SYS(ioctl), 1, LOW32, ioctl_denied[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

static int add_socket_rules(scmp_filter_ctx ctx, int nr)
{
    /* Every family above the highest allowed one, compared on all 64 bits:
     * this also refuses any value with high bits set, so the per-family
     * rules below only ever see values the kernel reads unchanged. */
    const struct scmp_arg_cmp above = {.arg = 0, .op = SCMP_CMP_GT, .datum_a = AF_NETLINK};
    int r = rule(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &above);
    if (r < 0)
        return r;
    for (uint64_t f = 0; f < AF_NETLINK; f++) {
        if (f == AF_UNIX || f == AF_INET || f == AF_INET6)
            continue;
        r = deny_masked(ctx, nr, 0, LOW32, f);
        if (r < 0)
            return r;
    }
    /* Netlink only for NETLINK_ROUTE. The protocol is compared on 64 bits,
     * so NETLINK_ROUTE with high garbage is refused too. */
    const struct scmp_arg_cmp netlink[] = {
        {.arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = LOW32, .datum_b = AF_NETLINK},
        {.arg = 2, .op = SCMP_CMP_NE, .datum_a = NETLINK_ROUTE},
    };
    return rule(ctx, SCMP_ACT_ERRNO(EPERM), nr, 2, netlink);
}

/* EPERM for an id below id_floor in the arguments of the calls that give
 * a process or a file an id (see ws_seccomp_new_ids). The ids are 32-bit,
 * zero-extended; -1 ("unchanged") is above every floor. */
static int add_id_rules(scmp_filter_ctx ctx, unsigned id_floor)
{
    static const struct {
        int nr;
        unsigned first, n; /* the id arguments */
    } calls[] = {
        {SCMP_SYS(setuid), 0, 1},    {SCMP_SYS(setgid), 0, 1},    {SCMP_SYS(setfsuid), 0, 1},
        {SCMP_SYS(setfsgid), 0, 1},  {SCMP_SYS(setreuid), 0, 2},  {SCMP_SYS(setregid), 0, 2},
        {SCMP_SYS(setresuid), 0, 3}, {SCMP_SYS(setresgid), 0, 3}, {SCMP_SYS(chown), 1, 2},
        {SCMP_SYS(fchown), 1, 2},    {SCMP_SYS(lchown), 1, 2},    {SCMP_SYS(fchownat), 2, 2},
    };

    for (size_t i = 0; i < WS_ELEMENTSOF(calls); i++)
        for (unsigned a = calls[i].first; a < calls[i].first + calls[i].n; a++) {
            struct scmp_arg_cmp below = {.arg = a, .op = SCMP_CMP_LT, .datum_a = id_floor};
            int r = rule(ctx, SCMP_ACT_ERRNO(EPERM), calls[i].nr, 1, &below);

            if (r < 0)
                return r;
        }
    return 0;
}

static int add_rules(scmp_filter_ctx ctx)
{
    int count = add_deny_list(ctx);
    if (count < 0)
        return count;
    int r = add_personality_rules(ctx);
    if (r >= 0)
        r = add_clone_rules(ctx);
    if (r >= 0)
        r = add_ioctl_rules(ctx);
    if (r >= 0)
        r = add_socket_rules(ctx, SCMP_SYS(socket));
    if (r >= 0)
        r = add_socket_rules(ctx, SCMP_SYS(socketpair));
    return r < 0 ? r : count;
}

/* Exports ctx's program through a memfd (libseccomp 2.5 exports only to an
 * fd) and reads it back into a new buffer. */
static int export_program(scmp_filter_ctx ctx, struct sock_filter **ret_prog, size_t *ret_len)
{
    ws_cleanup_fd int fd = memfd_new("ws-seccomp-export");
    struct stat st;

    if (fd < 0)
        return fd;
    int r = seccomp_export_bpf(ctx, fd);
    if (r < 0)
        return r;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (st.st_size > WS_SECCOMP_PROG_MAX)
        return -E2BIG;
    if (st.st_size <= 0 || st.st_size % INSN_SIZE != 0)
        return -EPROTO;

    size_t len = (size_t)st.st_size;
    struct sock_filter *prog = malloc(len);
    if (!prog)
        return -ENOMEM;
    ssize_t n = ws_pread_all(fd, prog, len, 0);
    if (n != (ssize_t)len) {
        free(prog);
        return n < 0 ? (int)n : -EIO;
    }
    *ret_prog = prog;
    *ret_len = len;
    return 0;
}

int ws_seccomp_new(struct ws_seccomp **ret)
{
    return ws_seccomp_new_ids(0, ret);
}

int ws_seccomp_new_ids(unsigned id_floor, struct ws_seccomp **ret)
{
    scmp_filter_ctx ctx = NULL;
    struct ws_seccomp *s = NULL;
    int count;
    int r;

    if (!ret)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!s || !ctx) {
        r = -ENOMEM;
        goto out;
    }
    /* seccomp_init put in the native architecture alone (x86_64, checked at
     * compile time); everything else, i386 and x32 included, gets EPERM. */
    r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM));
    if (r < 0)
        goto out;
    /* A failing write during export then says which errno, not just
     * -ECANCELED. */
    r = seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1);
    if (r < 0)
        goto out;
    r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, OPTIMIZE_BINARY_TREE);
    if (r < 0)
        goto out;
    count = add_rules(ctx);
    if (count < 0) {
        r = count;
        goto out;
    }
    if (id_floor > 0) {
        r = add_id_rules(ctx, id_floor);
        if (r < 0)
            goto out;
    }
    r = export_program(ctx, &s->prog, &s->len);
    if (r < 0)
        goto out;
    snprintf(s->summary, sizeof(s->summary),
             "x86_64 only (i386, x32: EPERM); deny list (%d syscalls) EPERM; clone3 ENOSYS; "
             "EPERM by argument: clone CLONE_NEW*, personality, ioctl TIOCSTI/TIOCLINUX, "
             "socket families but unix/inet/inet6/netlink-route%s; %u BPF insns",
             count, id_floor ? ", ids below the workspace range" : "",
             (unsigned)(s->len / INSN_SIZE));
    *ret = s;
    s = NULL;
    r = 0;
out:
    seccomp_release(ctx);
    ws_seccomp_free(s);
    return r;
}

void ws_seccomp_free(struct ws_seccomp *s)
{
    if (!s)
        return;
    free(s->prog);
    free(s);
}

int ws_seccomp_fd(const struct ws_seccomp *s)
{
    if (!s)
        return -EINVAL;
    ws_cleanup_fd int fd = memfd_new("ws-seccomp");
    if (fd < 0)
        return fd;
    /* pwrite leaves the file offset at 0, where bwrap starts reading. */
    int r = ws_pwrite_all(fd, s->prog, s->len, 0);
    if (r < 0)
        return r;
    /* The fd crosses into the sandbox setup; nobody may change the program
     * between here and bwrap's read. */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
        return -errno;
    return ws_steal_fd(&fd);
}

const void *ws_seccomp_program(const struct ws_seccomp *s, size_t *ret_len)
{
    if (!s || !ret_len)
        return NULL;
    *ret_len = s->len;
    return s->prog;
}

const char *ws_seccomp_summary(const struct ws_seccomp *s)
{
    return s ? s->summary : "";
}
