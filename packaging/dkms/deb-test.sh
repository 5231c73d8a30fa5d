# Sourced by packaging/deb/test.sh: prescient-dkms_<version>_all.deb
# ($DKMS_DEB) in the clean root $R, which has Debian's dkms (see test.sh's
# header for what is built where).
S=./usr/src/prescient-$VERSION
files=$(dpkg-deb -c "$DKMS_DEB" | awk '{print $1, $6}')
need=("$S/dkms.conf" "$S/Kbuild" "$S/kmod/prescient_main.rs" "$S/kmod/glue.c" "$S/kmod/layout/uvm550.h"
  "$S/kmod/layout/uvm580.h" "$S/packaging/dkms/build.sh" "$S/tools/uvm-layouts/uvm-layouts.sh"
  "$S/tools/uvm-layouts/lib.sh" "$S/core/src/lib.rs" "$S/uapi/src/lib.rs")
missing=$(for f in "${need[@]}"; do grep -q " $f\$" <<<"$files" || echo "$f"; done)
junk=$(grep -E '\.(o|ko|mod|mod\.c|cmd|rmeta)$|/modules\.order$|/Module\.symvers$' <<<"$files")
conf=$(dpkg-deb --fsys-tarfile "$DKMS_DEB" | tar -xOf - "$S/dkms.conf")
make0=$(sed -n 's/^MAKE\[0\]="\([^ ]*\).*/\1/p' <<<"$conf")
ok=0
[ -z "$missing$junk" ] && grep -qx "PACKAGE_VERSION=\"$VERSION\"" <<<"$conf" && grep -qx 'PACKAGE_NAME="prescient"' <<<"$conf" &&
  ! grep -q @VERSION@ <<<"$conf" && grep -q "^-rwxr-xr-x $S/$make0\$" <<<"$files" && ok=1
check dkms-files $ok "$(grep -vc '/$' <<<"$files") files, $(du -h "$DKMS_DEB" | cut -f1); dkms.conf: $(grep -E '^PACKAGE_(NAME|VERSION)' <<<"$conf" | paste -sd' '), MAKE $make0${missing:+; missing: $missing}${junk:+; build outputs: $junk}"

cp "$DKMS_DEB" "$R/tmp/"
chroot "$R" dpkg -i "/tmp/$(basename "$DKMS_DEB")" >"$WORK/dkms-dpkg.log" 2>&1 && rc=0 || rc=$?
st=$(chroot "$R" dkms status -m prescient -v "$VERSION" 2>&1)
src=$(readlink "$R/var/lib/dkms/prescient/$VERSION/source")
said=$(grep -m1 '^prescient-dkms: ' "$WORK/dkms-dpkg.log")
check dkms-install "$([ $rc = 0 ] && [[ $st == "prescient/$VERSION"*": added" ]] && [ "$src" = "/usr/src/prescient-$VERSION" ] && [ -n "$said" ] && echo 1)" \
  "dpkg rc $rc; dkms status: $st; source -> $src; postinst: $said"

# A kernel tree without CONFIG_RUST (dkms wants a tree with include/ and a
# .config): dkms runs MAKE[0], the packaged build.sh, which must refuse in
# one line and build nothing.
K=$R/tmp/k-norust
mkdir -p "$K/include/config" && printf 'CONFIG_MODULES=y\nCONFIG_CC_IS_GCC=y\n' >"$K/.config"
echo 6.1.0-norust >"$K/include/config/kernel.release"
chroot "$R" dkms build -m prescient -v "$VERSION" -k 6.1.0-norust --kernelsourcedir /tmp/k-norust >"$WORK/dkms-build.log" 2>&1 && rc=0 || rc=$?
log=$(cat "$R/var/lib/dkms/prescient/$VERSION/build/make.log" 2>/dev/null)
refusal=$(grep '^prescient: ' <<<"$log")
check dkms-refuses "$([ $rc != 0 ] && [ "$(grep -c . <<<"$refusal")" = 1 ] && grep -q 'without CONFIG_RUST.*user-space backend' <<<"$refusal" && ! find "$R/var/lib/dkms/prescient" -name prescient.ko | grep -q . && echo 1)" \
  "dkms build rc $rc; make.log: ${refusal:-$(tail -3 "$WORK/dkms-build.log" | paste -sd' ')}"

chroot "$R" dpkg -r prescient-dkms >>"$WORK/dkms-dpkg.log" 2>&1 && rc=0 || rc=$?
st=$(chroot "$R" dkms status 2>&1)
left=$(ls -d "$R/usr/src/prescient-$VERSION" "$R/var/lib/dkms/prescient" 2>/dev/null)
check dkms-remove "$([ $rc = 0 ] && [ -z "$st" ] && [ -z "$left" ] && echo 1)" "dpkg -r rc $rc; dkms status '${st}'${left:+; left: $left}"
