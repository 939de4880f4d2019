/* The seccomp filter of the bubblewrap sandbox.
 *
 * The server builds the program once at start with libseccomp, keeps the
 * exported BPF bytes (a struct sock_filter array), and gives every bwrap run
 * its own sealed memfd holding them (`bwrap --seccomp FD` reads FD to EOF and
 * installs the program last, after PR_SET_NO_NEW_PRIVS, right before exec).
 *
 * The filter is a deny list over a default of ALLOW: the sandbox runs
 * arbitrary developer tools, so an allow list would break them one missing
 * syscall at a time. Bubblewrap's namespaces and the lack of capabilities are
 * the main wall; this filter takes away kernel attack surface and the few
 * things an unprivileged process may still do that a sandbox should not.
 * Every refusal is EPERM, what a capability check would say, so tools take
 * their "not permitted" path, unless stated otherwise.
 *
 * Architecture: the filter holds x86_64 only, and any other calling
 * convention gets EPERM (SCMP_FLTATR_ACT_BADARCH). A 64-bit process can still
 * enter the kernel as i386 (int $0x80, AUDIT_ARCH_I386: other syscall
 * numbers, so an x86_64 rule would not match) or as x32 (AUDIT_ARCH_X86_64
 * with nr | __X32_SYSCALL_BIT: the same numbers plus a bit, which an exact
 * nr == N rule would not match either). libseccomp's x86_64 filter refuses
 * every nr >= __X32_SYSCALL_BIT (except -1, the "skipped by a tracer"
 * number) with the bad-arch action when x32 is not in the filter; the unit
 * test checks both entry points on the running kernel and in the BPF itself.
 *
 * Refused outright (EPERM); names libseccomp cannot resolve for x86_64 are
 * skipped (vm86, vm86old, umount and stime exist on i386 only), except the
 * few newer than libseccomp 2.5.4, added by their x86_64 number:
 *   - kernel modules, kexec and reboot: init_module finit_module
 *     delete_module create_module get_kernel_syms query_module kexec_load
 *     kexec_file_load reboot;
 *   - mounts and the root: mount umount2 umount fsopen fsconfig fsmount
 *     fspick move_mount open_tree open_tree_attr mount_setattr pivot_root
 *     chroot; the sandbox's file system view is bwrap's to build, and the
 *     new mount API is reachable without the old mount(2);
 *   - namespaces: setns unshare (clone's namespace flags: below);
 *   - other processes' memory and files: ptrace process_vm_readv
 *     process_vm_writev process_madvise kcmp pidfd_getfd (pidfd_getfd is
 *     the same power as a ptrace attach, so it goes with ptrace);
 *   - large kernel attack surface that tools do not need: perf_event_open
 *     bpf userfaultfd io_uring_setup io_uring_enter io_uring_register
 *     fanotify_init lookup_dcookie; io_uring also runs work in kernel
 *     threads that this filter would never see;
 *   - the kernel keyring, shared beyond the sandbox: keyctl add_key
 *     request_key;
 *   - clocks: settimeofday clock_settime clock_adjtime adjtimex stime (this
 *     also refuses the read-only adjtimex/ntp_gettime queries, as Docker
 *     does);
 *   - host administration and obsolete interfaces: acct quotactl
 *     quotactl_fd swapon swapoff syslog vhangup nfsservctl sysfs _sysctl
 *     ustat uselib;
 *   - hardware: iopl ioperm vm86 vm86old;
 *   - file handles, which bypass path permission checks: open_by_handle_at
 *     name_to_handle_at;
 *   - NUMA policy: mbind set_mempolicy set_mempolicy_home_node move_pages
 *     migrate_pages and also get_mempolicy. The query is harmless by itself,
 *     but libnuma probes NUMA with it: refusing it alongside the calls it
 *     guards makes libnuma >= 2.0.19 report "no NUMA" instead of failing
 *     later in mbind, which is what Docker's default profile does too.
 *
 * Refused by argument:
 *   - clone3 -> ENOSYS, always: its flags sit in memory seccomp cannot read,
 *     and ENOSYS makes glibc fall back to clone(2), whose flags it can;
 *   - clone with any CLONE_NEW* flag (NEWNS NEWUTS NEWIPC NEWUSER NEWPID
 *     NEWNET NEWCGROUP NEWTIME), each flag tested alone on arg 0. NEWTIME
 *     overlaps clone's exit-signal byte and cannot reach the kernel through
 *     clone(2) anyway; the rule only refuses exit signals >= 128, which the
 *     kernel refuses too;
 *   - personality unless the low 32 bits of arg 0 are one of Docker's
 *     values: 0 (PER_LINUX), PER_LINUX32, UNAME26, UNAME26 | PER_LINUX32,
 *     0xffffffff (query). Flags such as ADDR_NO_RANDOMIZE or
 *     READ_IMPLIES_EXEC weaken exploit mitigations for what runs next;
 *   - ioctl TIOCSTI (push input into a terminal, e.g. the one of a shell
 *     outside the sandbox) and TIOCLINUX, on the low 32 bits of the request
 *     (the kernel takes an unsigned int, so garbage in the high half does
 *     not get past);
 *   - socket and socketpair with a family other than AF_UNIX, AF_INET,
 *     AF_INET6, or AF_NETLINK with a protocol other than NETLINK_ROUTE
 *     (`ip` and getifaddrs() read interfaces through it; without
 *     CAP_NET_ADMIN it is read-only in effect). Packet, vsock, AF_ALG,
 *     bluetooth... are attack surface or a way around the network setup.
 *     Any family above AF_NETLINK, including every value with high bits
 *     set, is refused, so the remaining per-family rules compare the low 32
 *     bits the kernel uses.
 *
 * Limitation: a deny list lags new kernels; a syscall added after
 * libseccomp 2.5.4 and not listed above is allowed.
 *
 * Ownership: ws_seccomp_new() returns an object owned by the caller (free
 * with ws_seccomp_free). ws_seccomp_fd() returns a new fd owned by the
 * caller; pointers from ws_seccomp_program() and ws_seccomp_summary() are
 * owned by the object and live as long as it does.
 *
 * Thread safety: the object is immutable once built; every function but
 * ws_seccomp_free may be called from many threads at once.
 *
 * Returns: int functions return >= 0 or a negated errno; ret_* are written
 * only on success.
 */
#ifndef WS_POSIX_SECCOMP_H
#define WS_POSIX_SECCOMP_H

#include <stddef.h>

/* Largest program accepted: BPF_MAXINSNS (4096) instructions of 8 bytes,
 * the kernel's limit for a classic BPF filter. */
#define WS_SECCOMP_PROG_MAX (4096 * 8)
/* Room for the summary line, terminating NUL included. */
#define WS_SECCOMP_SUMMARY_MAX 256

/* An exported BPF program, immutable once built. */
struct ws_seccomp;

/* Builds and exports the program (once, at server start: it takes a few
 * milliseconds). Returns 0 and the object in *ret, or:
 *   -EINVAL  ret is NULL;
 *   -ENOMEM  out of memory;
 *   -E2BIG   the program is over WS_SECCOMP_PROG_MAX;
 *   -EPROTO  libseccomp exported something that is not whole instructions;
 *   other    a negated errno from libseccomp or memfd_create. */
int ws_seccomp_new(struct ws_seccomp **ret);
/* The same, for sandboxes whose one mapped uid (and gid) is at least
 * `id_floor` (a workspace's own, from a range that starts there; 0: no
 * such rules). A call that would make the process, or a file, some id
 * below it (setuid, setgid, setreuid, setregid, setresuid, setresgid,
 * setfsuid, setfsgid, chown, fchown, lchown, fchownat) fails with EPERM,
 * as it does for a user without privileges on a host, instead of the
 * EINVAL of an id the namespace does not map, which programs do not
 * expect (Python's subprocess tests, for one). Ids above the workspace's
 * own still get EINVAL: a filter cannot compare one argument twice. */
int ws_seccomp_new_ids(unsigned id_floor, struct ws_seccomp **ret);

/* Accepts NULL. */
void ws_seccomp_free(struct ws_seccomp *s);

/* A new memfd holding the program for one bwrap run: O_CLOEXEC (a spawn
 * must dup it onto the fd number it passes to bwrap), file offset 0, sealed
 * against writes, shrinking and growing, and against further seals. It only
 * copies the cached bytes. Returns the fd (the caller closes it), -EINVAL
 * for a NULL s, or a negated errno from memfd_create, write or fcntl. */
int ws_seccomp_fd(const struct ws_seccomp *s);

/* The raw program, a struct sock_filter array, and its length in bytes in
 * *ret_len (a multiple of 8), for tests and for installing it directly.
 * Returns NULL, with *ret_len untouched, when s or ret_len is NULL. */
const void *ws_seccomp_program(const struct ws_seccomp *s, size_t *ret_len);

/* A one-line human-readable description for Describe, e.g. "x86_64 only
 * (i386, x32: EPERM); deny list (66 syscalls) EPERM; clone3 ENOSYS; ...".
 * Returns "" for a NULL s. */
const char *ws_seccomp_summary(const struct ws_seccomp *s);

#endif
