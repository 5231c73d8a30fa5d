#!/bin/sh
# usage: [INIT=script] mkinitramfs.sh KDIR OUT.cpio.gz NAME=FILE...   (files land in /lib or /bin by NAME)
# INIT: the guest's /init (default: vm-tests/init.sh; tests/e2e has its own).
# Uses the kernel's own usr/gen_init_cpio: no root or mknod needed.
set -eu
KB=$1; OUT=$2; shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
BB=$(command -v busybox || echo /bin/busybox)
LIST=$(mktemp)
{
  for d in /bin /lib /dev /proc /sys /tmp; do echo "dir $d 755 0 0"; done
  echo "nod /dev/console 600 0 0 c 5 1"
  echo "file /bin/busybox $BB 755 0 0"
  for a in sh mount insmod rmmod lsmod cat echo grep ls dmesg poweroff uname cut sleep seq tail \
           ip wget kill chmod mkdir rm sed tr head test; do
    echo "slink /bin/$a busybox 777 0 0"
  done
  echo "file /init ${INIT:-$HERE/init.sh} 755 0 0"
  for kv in "$@"; do echo "file ${kv%%=*} ${kv#*=} 755 0 0"; done
} > "$LIST"
"$KB/usr/gen_init_cpio" "$LIST" | gzip -1 > "$OUT"
rm -f "$LIST"
