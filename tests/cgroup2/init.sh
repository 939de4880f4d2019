#!/bin/sh
# /init of the VM that vm.sh boots (busybox sh, pid 1): mounts the host's
# root read-only from 9p, gives it a fresh /proc, /sys, /dev, /tmp and a
# cgroup2 hierarchy at /sys/fs/cgroup (the kernel runs with
# cgroup_no_v1=all, so it is the only one), runs the job vm.sh packed next
# to this file with that root as its root, prints "ws-vm: N passed, M failed" and
# powers off. Every line meant for vm.sh starts with "ws-vm:".
/bin/busybox --install -s /bin
export PATH=/bin

say() { echo "ws-vm: $*"; }
# pid 1 must not exit (the kernel would panic): every way out powers off.
finish() {
  say "$1 passed, $2 failed"
  sync
  poweroff -f
  sleep 60
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say "kernel $(uname -r), $(nproc) CPUs"
# vm.sh lists the modules dependencies first.
while read -r m; do
  insmod "/modules/$m.ko" || say "insmod $m failed"
done </modules.order

mode=$(cat /job/mode)
fail=0
mkdir -p /host
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /host; then
  say "cannot mount the host's root over 9p"
  finish 0 1
fi
for d in proc sys dev tmp run; do
  [ -d "/host/$d" ] || { say "the host root has no /$d"; finish 0 1; }
done
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs tmpfs /host/dev/shm
mount -t tmpfs -o mode=1777 tmpfs /host/tmp
mount -t tmpfs -o mode=755 tmpfs /host/run
if ! mount -t cgroup2 cgroup2 /host/sys/fs/cgroup; then
  say "cannot mount cgroup2"
  finish 0 1
fi
controllers=$(cat /host/sys/fs/cgroup/cgroup.controllers)
say "cgroup.controllers: $controllers"

if [ "$mode" = smoke ]; then
  for c in pids memory cpu; do
    case " $controllers " in
    *" $c "*) ;;
    *) say "controller $c missing"; fail=1 ;;
    esac
  done
  # The tests run from the host's root: it must be usable as one.
  if chroot /host /bin/sh -c 'test -x /bin/sh && echo ok' >/dev/null 2>&1; then
    say "host root usable through 9p"
  else
    say "cannot run /bin/sh in the host's root"
    fail=1
  fi
  finish $((1 - fail)) "$fail"
fi

# The job runs with the host's root as the root of the mount namespace,
# not in a chroot: the kernel refuses a new user namespace to a chrooted
# process (bubblewrap's sandboxes need one), and pivot_root cannot leave
# an initramfs. switch_root empties the initramfs and makes /host the
# root; from there the host's own shell is pid 1 and the host's tools are
# all there is, so the second stage reports and powers off by itself
# (sysrq "o": no init system to ask).
cp /job/run.sh /host/tmp/ws-vm-run.sh
cat >/host/tmp/ws-vm-stage2.sh <<'STAGE2'
/bin/sh /tmp/ws-vm-run.sh
echo "ws-vm: $(cat /tmp/ws-vm-passed 2>/dev/null || echo 0) passed, $(cat /tmp/ws-vm-failed 2>/dev/null || echo 1) failed"
sync
echo o >/proc/sysrq-trigger
# pid 1 must outlive the power-off; its file system may go first.
sleep 60 2>/dev/null
STAGE2
exec switch_root /host /bin/sh /tmp/ws-vm-stage2.sh
