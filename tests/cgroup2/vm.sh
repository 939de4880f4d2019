#!/usr/bin/env bash
# Runs test binaries built on this host on a pure cgroup v2 hierarchy: boots
# Debian's kernel under qemu-system-x86_64 with cgroup_no_v1=all, the
# host's root read-only over 9p (-virtfs), and a cgroup2 mount at
# /sys/fs/cgroup, where pids, memory and cpu are offered to the children of
# the root. Each binary runs as root from the host's root with a fresh
# /tmp; the summary line is "N passed, M failed".
#
#   bash tests/cgroup2/vm.sh --smoke
#       boot, mount cgroup2, check that cgroup.controllers lists pids,
#       memory and cpu, check the host's root is usable, power off;
#   bash tests/cgroup2/vm.sh [--timeout SECONDS] [NAME=VALUE] BINARY [...]
#       run each binary (a Bazel test binary: its runfiles are found next
#       to it) inside the VM; NAME=VALUE sets an environment variable for
#       the binaries after it (as a test target's env would).
#
# Exits 0 when everything passed, 1 when something failed or the VM did
# not finish in time, 2 when it cannot run here (missing tools, no kernel).
#
# Needs root, qemu-system-x86_64 (Debian: qemu-system-x86) and a static
# busybox (busybox-static). The kernel comes from Debian's
# linux-image-amd64, downloaded with apt-get download and unpacked (never
# installed) into the cache, $WS_VM_CACHE (default
# /var/cache/workspaced-vm); the cache is reused offline. KVM is used when
# /dev/kvm opens, TCG (much slower) otherwise.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${WS_VM_CACHE:-/var/cache/workspaced-vm}
mode=run
timeout_s=
bins=()

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
  --smoke) mode=smoke ;;
  --timeout)
    [ $# -ge 2 ] || usage
    timeout_s=$2
    shift
    ;;
  -h | --help) usage ;;
  -*) echo "vm.sh: unknown option $1" >&2; usage ;;
  *) bins+=("$1") ;;
  esac
  shift
done
if [ "$mode" = run ] && [ ${#bins[@]} -eq 0 ]; then
  usage
fi

cannot() {
  echo "vm.sh: cannot run here: $*" >&2
  exit 2
}

[ "$(id -u)" -eq 0 ] || cannot "needs root (qemu exports / over 9p with its owners)"
command -v qemu-system-x86_64 >/dev/null || cannot "no qemu-system-x86_64 (apt-get install qemu-system-x86)"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || cannot "no busybox (apt-get install busybox-static)"
# It runs in the initramfs, where there is no library: it must be static.
if LC_ALL=C readelf -l "$busybox" 2>/dev/null | grep -q 'program interpreter'; then
  cannot "$busybox is not static (apt-get install busybox-static)"
fi

# ---- the kernel -----------------------------------------------------------

# The version linux-image-amd64 points at now; with no package index (an
# offline machine), the newest one in the cache.
kver=${WS_VM_KERNEL:-}
if [ -z "$kver" ]; then
  kver=$(apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: linux-image-\(.*\)$/\1/p' | head -n 1 || true)
fi
if [ -z "$kver" ]; then
  kver=$(ls -1 "$cache" 2>/dev/null | sed -n 's/^kernel-//p' | sort -V | tail -n 1 || true)
fi
[ -n "$kver" ] || cannot "no kernel version: apt-cache knows no linux-image-amd64 and $cache has none"
kdir=$cache/kernel-$kver

# The modules the init needs to mount 9p over virtio, dependencies first.
want_modules=(virtio_pci 9pnet_virtio 9p)

fetch_kernel() {
  local tmp deb
  mkdir -p "$cache"
  # What an interrupted fetch left.
  rm -rf "$cache"/fetch.*
  tmp=$(mktemp -d "$cache/fetch.XXXXXX")
  echo "vm.sh: fetching linux-image-$kver into $cache" >&2
  # apt's sandbox user cannot write a root-owned directory: fetch as root.
  (cd "$tmp" && apt-get download -o APT::Sandbox::User=root "linux-image-$kver" >&2) ||
    cannot "apt-get download linux-image-$kver failed"
  deb=$(ls "$tmp"/linux-image-*.deb)
  dpkg-deb -x "$deb" "$tmp/x"
  local mods=$tmp/x/lib/modules/$kver
  if [ ! -f "$tmp/x/boot/vmlinuz-$kver" ] || [ ! -d "$mods" ]; then
    cannot "unexpected layout in $deb"
  fi

  # name -> file, '-' and '_' being the same in module names.
  declare -A file_of
  while IFS= read -r f; do
    local n=${f##*/}
    n=${n%.ko}
    file_of[${n//-/_}]=$f
  done < <(find "$mods/kernel" -name '*.ko')
  declare -A seen
  local order=()
  visit() {
    local n=${1//-/_} f dep
    [ -n "${seen[$n]:-}" ] && return 0
    seen[$n]=1
    f=${file_of[$n]:-}
    [ -n "$f" ] || return 0 # built in
    for dep in $(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | head -n 1 | tr ',' ' '); do
      visit "$dep"
    done
    order+=("$n")
  }
  local m
  for m in "${want_modules[@]}"; do
    visit "$m"
    [ -n "${file_of[${m//-/_}]:-}" ] || grep -q "/${m}.ko" "$mods/modules.builtin" 2>/dev/null ||
      cannot "module $m is in neither $deb's modules nor its built-ins"
  done

  local stage=$tmp/kernel-$kver
  mkdir -p "$stage/modules"
  cp "$tmp/x/boot/vmlinuz-$kver" "$stage/vmlinuz"
  cp "$tmp/x/boot/config-$kver" "$stage/config"
  for m in "${order[@]}"; do
    cp "${file_of[$m]}" "$stage/modules/$m.ko"
  done
  printf '%s\n' "${order[@]}" >"$stage/modules.order"
  rm -rf "$kdir"
  mv "$stage" "$kdir"
  rm -rf "$tmp"
}

if [ ! -f "$kdir/vmlinuz" ] || [ ! -f "$kdir/modules.order" ]; then
  fetch_kernel
fi

# ---- the initramfs: busybox, the modules, init.sh and the job -------------

work=$(mktemp -d /tmp/ws-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,modules,job}
cp "$busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
cp "$here/init.sh" "$root/init"
chmod 755 "$root/init"
cp "$kdir"/modules/*.ko "$root/modules/" 2>/dev/null || true
cp "$kdir/modules.order" "$root/modules.order"
echo "$mode" >"$root/job/mode"

# The job runs with the host's root as its root: its own /bin/sh, and the
# binaries at the paths they have here.
{
  echo '#!/bin/sh'
  echo 'passed=0; failed=0; n=0'
  echo 'export HOME=/tmp PATH=/usr/sbin:/usr/bin:/sbin:/bin TEST_WORKSPACE=workspaced GTEST_COLOR=no'
  for b in "${bins[@]}"; do
    if [[ "$b" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
      printf 'export %q=%q\n' "${b%%=*}" "${b#*=}"
      continue
    fi
    real=$(realpath -e "$b") || cannot "no such binary: $b"
    [ -x "$real" ] || cannot "not executable: $b"
    q=$(printf '%q' "$real")
    cat <<EOF
n=\$((n + 1))
echo "ws-vm: RUN $q"
export TEST_SRCDIR=$q.runfiles TEST_TMPDIR=/tmp/t.\$n
mkdir -p "\$TEST_TMPDIR"
(cd "\$TEST_SRCDIR/workspaced" 2>/dev/null || cd /tmp; exec $q)
rc=\$?
if [ \$rc -eq 0 ]; then passed=\$((passed + 1)); echo "ws-vm: PASS $q"
else failed=\$((failed + 1)); echo "ws-vm: FAIL $q (exit \$rc)"; fi
EOF
  done
  echo 'echo $passed >/tmp/ws-vm-passed; echo $failed >/tmp/ws-vm-failed'
} >"$root/job/run.sh"

(cd "$root" && find . -print0 | busybox cpio -o -H newc -0 2>/dev/null) | gzip -1 >"$work/initrd.gz" ||
  cannot "could not pack the initramfs"

# ---- boot ------------------------------------------------------------------

# KVM when it boots this kernel: /dev/kvm must open, and the kernel must get
# as far as printing its version. Some hosts' /dev/kvm opens yet cannot
# run a stock kernel (PVM, the kvm_pvm module, runs only guests built for
# it; there the boot stops after the real-mode stub). IA32_ARCH_CAPABILITIES
# is left out of the CPU model: nested hypervisors refuse to set it and
# qemu aborts.
kvm_cpu=host,-arch-capabilities
kvm_works() {
  (exec 3<>/dev/kvm) 2>/dev/null || { why_not_kvm="/dev/kvm does not open"; return 1; }
  if [ -d /sys/module/kvm_pvm ]; then
    why_not_kvm="/dev/kvm is PVM (kvm_pvm), which boots only kernels built for it"
    return 1
  fi
  # Without a root file system the kernel panics at once and, with
  # panic=-1 and -no-reboot, qemu exits.
  local out
  out=$(timeout -k 5 20 qemu-system-x86_64 -accel kvm -cpu "$kvm_cpu" -m 256 -nodefaults \
    -display none -no-reboot -monitor none -serial stdio -kernel "$kdir/vmlinuz" \
    -append "console=ttyS0 panic=-1 earlyprintk=serial,ttyS0" </dev/null 2>&1 || true)
  if ! grep -q 'Linux version' <<<"$out"; then
    why_not_kvm="the kernel does not boot under KVM here (no version line within 20s)"
    return 1
  fi
}
why_not_kvm=
if [ -z "${WS_VM_TCG:-}" ] && kvm_works; then
  accel=(-accel kvm -cpu "$kvm_cpu")
  how=kvm
  : "${timeout_s:=300}"
else
  [ -n "${WS_VM_TCG:-}" ] && why_not_kvm="WS_VM_TCG is set"
  echo "vm.sh: TCG, not KVM: $why_not_kvm" >&2
  accel=(-accel tcg -cpu max)
  how=tcg
  : "${timeout_s:=1200}"
fi
echo "vm.sh: kernel $kver, $how, $mode, up to ${timeout_s}s" >&2

log=$work/console.log
start=$(date +%s)
set +e
timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
  "${accel[@]}" -m 2048 -smp 2 \
  -nodefaults -display none -no-reboot -monitor none -serial stdio \
  -kernel "$kdir/vmlinuz" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 panic=-1 cgroup_no_v1=all quiet loglevel=3" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  </dev/null 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
elapsed=$(($(date +%s) - start))

summary=$(tr -d '\r' <"$log" | sed -n 's/^ws-vm: \([0-9]* passed, [0-9]* failed\)$/\1/p' | tail -n 1)
if [ -z "$summary" ]; then
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "vm.sh: the VM did not finish within ${timeout_s}s ($how)" >&2
  else
    echo "vm.sh: the VM ended without a summary (qemu exit $rc)" >&2
  fi
  exit 1
fi
echo "vm.sh: $summary ($how, ${elapsed}s)"
case "$summary" in
*", 0 failed") exit 0 ;;
*) exit 1 ;;
esac
