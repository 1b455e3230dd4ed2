# shellcheck shell=bash
# image.sh — host-side pieces of the Soft-RoCE VM that are cached between runs (sourced by run.sh).
#
# Purpose: install the Debian packages the VM needs (idempotent), fetch and unpack Debian's kernel package
# (never installed on the host), and build the base initramfs (busybox, rdma-core tools, the rxe provider,
# the kernel modules in load order, guest-init.sh as /init). Everything lands under $CACHE, keyed by the
# kernel package version and the inputs' checksums, so a warm run only builds the small per-run payload.
# Non-goals: other distributions, compressed-module kernels beyond .ko/.ko.xz/.ko.zst, a root filesystem.
#
# Every function that cannot provide what the VM needs calls skip "<reason>" (defined in run.sh), which
# prints "SKIPPED: <reason>" and exits 77.

# kmod: depmod, because the kernel package ships no modules.dep (its postinst generates it).
HOST_PACKAGES=(qemu-system-x86 busybox-static cpio gzip xz-utils zstd kmod iproute2 libibverbs1 ibverbs-providers
  ibverbs-utils)
# Roots of the guest's module set; their dependencies come from modules.dep (depmod of the package).
# crc32_generic: rxe's ICRC asks the crypto API for "crc32", which is a module (not a dependency) in Debian.
# rdma_ucm: the rdma_cm stack, for tests that connect through librdmacm.
MODULE_ROOTS=(virtio_pci virtio_net dummy crc32_generic rdma_rxe ib_uverbs rdma_ucm)
# Files the tools need that ldd does not list: glibc dlopen()s libgcc_s (pthread_exit/cancel unwinding),
# libibverbs dlopen()s its provider through /etc/libibverbs.d/<name>.driver.
DLOPENED=(libgcc_s.so.1)
GUEST_TOOLS=(ibv_devices ibv_devinfo ibv_rc_pingpong rdma bash)

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

# install_packages: apt-get install only what is missing; a no-op (no apt call at all) when all are present
install_packages() {
  local missing=() p out
  for p in "${HOST_PACKAGES[@]}"; do
    is_installed "$p" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$DO_INSTALL" = 1 ] || skip "missing host packages (${missing[*]}) and --no-install was given"
  [ "$(id -u)" -eq 0 ] || skip "missing host packages (${missing[*]}) and not running as root"
  log "apt-get install ${missing[*]}"
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
    out=$(apt-get update -q 2>&1) || skip "apt-get update failed: $(tail -1 <<<"$out")"
  fi
  out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" 2>&1) ||
    skip "apt-get install ${missing[*]} failed: $(grep -m1 -E '^E:' <<<"$out")"
}

# check_space DIR MB: the kernel package (~70 MB) and its unpacked subset need room
check_space() {
  local avail
  avail=$(df -Pm "$1" | awk 'NR == 2 { print $4 }')
  [ "${avail:-0}" -ge "$2" ] || skip "only ${avail} MB free in $1, need $2 MB (set ZW_SOFTROCE_CACHE elsewhere)"
}

# resolve_kernel: sets KPKG (e.g. linux-image-6.1.0-57-amd64) and KPKG_VERSION; ZW_SOFTROCE_KPKG overrides.
# Offline, the newest already-unpacked kernel in the cache is used instead.
resolve_kernel() {
  KPKG=${ZW_SOFTROCE_KPKG:-}
  if [ -z "$KPKG" ]; then
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ && !k { k = $2 } END { print k }')
  fi
  KPKG_VERSION=
  [ -n "$KPKG" ] && KPKG_VERSION=$(apt-cache policy "$KPKG" 2>/dev/null | awk '/Candidate:/ { print $2 }')
  if [ -z "$KPKG" ] || [ -z "$KPKG_VERSION" ] || [ "$KPKG_VERSION" = "(none)" ]; then
    [ -z "${ZW_SOFTROCE_KPKG:-}" ] || skip "apt has no version of ZW_SOFTROCE_KPKG=$ZW_SOFTROCE_KPKG"
    local cached
    cached=$(find "$CACHE/kernel" -maxdepth 2 -name .complete -printf '%T@ %h\n' 2>/dev/null | sort -rn |
      awk 'NR == 1 { print $2 }')
    [ -n "$cached" ] || skip "cannot resolve the kernel package of linux-image-amd64 (apt-get update needed?)"
    cached=$(basename "$cached")
    KPKG=${cached%%_*}
    KPKG_VERSION=${cached#*_}
    log "apt cannot resolve linux-image-amd64; using cached $KPKG $KPKG_VERSION"
  fi
}

# fetch_kernel: sets KDIR (unpacked subset of the kernel package) and KVER (its uname -r)
fetch_kernel() {
  KDIR=$CACHE/kernel/${KPKG}_${KPKG_VERSION}
  if [ ! -f "$KDIR/.complete" ]; then
    check_space "$CACHE" 400
    log "downloading $KPKG $KPKG_VERSION (unpacked into the cache, not installed)"
    local tmp out deb
    tmp=$(mktemp -d "$CACHE/download.XXXXXX")
    out=$( (cd "$tmp" && apt-get download "$KPKG=$KPKG_VERSION") 2>&1) || {
      rm -rf "$tmp"
      skip "apt-get download $KPKG=$KPKG_VERSION failed: $(grep -m1 -E '^E:' <<<"$out")"
    }
    deb=$(find "$tmp" -name '*.deb' -print -quit)
    rm -rf "$KDIR"
    mkdir -p "$KDIR"
    # The kernel, the module metadata and the directories that hold every module the guest might load.
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$KDIR" --wildcards './boot/vmlinuz-*' './lib/modules/*/modules.*' \
      './lib/modules/*/kernel/drivers/infiniband/*' './lib/modules/*/kernel/drivers/virtio/*' \
      './lib/modules/*/kernel/drivers/net/*' './lib/modules/*/kernel/net/*' './lib/modules/*/kernel/crypto/*' \
      './lib/modules/*/kernel/fs/configfs/*' './lib/modules/*/kernel/lib/*' ||
      skip "unpacking $deb failed"
    rm -rf "$tmp"
    find "$CACHE/kernel" -mindepth 1 -maxdepth 1 ! -name "${KPKG}_${KPKG_VERSION}" -exec rm -rf {} + # superseded
    KVER=$(ls "$KDIR/lib/modules")
    depmod -b "$KDIR" "$KVER" || skip "depmod -b $KDIR $KVER failed"
    touch "$KDIR/.complete"
  fi
  KVER=$(ls "$KDIR/lib/modules")
  [ -f "$KDIR/boot/vmlinuz-$KVER" ] || skip "no vmlinuz-$KVER in $KPKG"
  [ -f "$KDIR/lib/modules/$KVER/modules.dep" ] || skip "no modules.dep for $KVER in $KDIR"
}

# module_order: prints the modules (paths relative to lib/modules/KVER) that MODULE_ROOTS need, dependencies
# first. modules.dep lists each module's full dependency closure; modprobe loads that list back to front.
module_order() {
  awk -v roots="${MODULE_ROOTS[*]}" '
    function base(p) { sub(/.*\//, "", p); sub(/\.ko(\.[a-z]+)?$/, "", p); return p }
    {
      mod = $1; sub(/:$/, "", mod); path[base(mod)] = mod; deps[base(mod)] = ""
      for (i = NF; i >= 2; i--) deps[base(mod)] = deps[base(mod)] " " $i
    }
    function emit(p) { if (!(p in seen)) { seen[p] = 1; print p } }
    END {
      n = split(roots, r, " ")
      for (i = 1; i <= n; i++) {
        if (!(r[i] in path)) { print "MISSING " r[i]; continue }
        m = split(deps[r[i]], d, " ")
        for (j = 1; j <= m; j++) emit(d[j])
        emit(path[r[i]])
      }
    }' "$KDIR/lib/modules/$KVER/modules.dep"
}

# copy_to ROOT SRC [DST]: copy a host file (following links) to the same or the given path under ROOT
copy_to() {
  local root=$1 src=$2 dst=${3:-$2}
  mkdir -p "$root$(dirname "$dst")"
  cp -L "$src" "$root$dst"
}

# copy_with_libs ROOT SRC [DST]: copy a file and, if it is a dynamic ELF, its ldd closure (merged-/usr paths)
copy_with_libs() {
  local root=$1 src=$2 dst=${3:-$2} lib out
  copy_to "$root" "$src" "$dst"
  out=$(ldd "$src" 2>/dev/null) || return 0 # scripts and static binaries have no libraries to add
  if grep -q 'not found' <<<"$out"; then
    die "$src needs libraries ldd cannot find: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')"
  fi
  while read -r lib; do
    case "$lib" in /lib/* | /lib64/*) lib=/usr$lib ;; esac
    [ -e "$root$lib" ] || copy_to "$root" "$lib"
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out")
}

# base_key: changes whenever anything that goes into the base image changes
base_key() {
  {
    echo "$KPKG $KPKG_VERSION ${MODULE_ROOTS[*]} ${GUEST_TOOLS[*]}"
    dpkg-query -W busybox-static libc6 libibverbs1 ibverbs-providers ibverbs-utils iproute2 bash 2>/dev/null
    cat "$HERE/guest-init.sh" "$HERE/image.sh"
  } | sha256sum | cut -c1-16
}

# build_base_root ROOT: the directory tree of the base initramfs
build_base_root() {
  local root=$1 t p prov drv m
  mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib64,usr/local/bin,proc,sys,dev,tmp,etc,root,zw/tests}
  ln -s usr/bin "$root/bin"
  ln -s usr/sbin "$root/sbin"
  ln -s usr/lib "$root/lib"
  ln -s usr/lib64 "$root/lib64"
  cp /bin/busybox "$root/usr/bin/busybox"
  for t in $(/bin/busybox --list); do
    [ "$t" = busybox ] || ln -s busybox "$root/usr/bin/$t"
  done
  for t in "${GUEST_TOOLS[@]}"; do
    p=$(command -v "$t") || skip "host tool $t not found"
    rm -f "$root/usr/bin/$t"
    copy_with_libs "$root" "$p" "/usr/bin/$t"
  done
  for t in "${DLOPENED[@]}"; do
    p=$(ldconfig -p | awk -v n="$t" '$1 == n && /x86-64/ && !p { p = $NF } END { print p }')
    [ -n "$p" ] || skip "$t not found on the host"
    copy_to "$root" "$p" "/usr/lib/x86_64-linux-gnu/$t"
  done
  prov=$(dpkg -L ibverbs-providers | grep -E '/libibverbs/librxe-rdmav[0-9]+\.so$' || true)
  prov=${prov%%$'\n'*}
  drv=/etc/libibverbs.d/rxe.driver
  if [ -z "$prov" ] || [ ! -f "$drv" ]; then skip "the rxe provider of ibverbs-providers is not installed"; fi
  copy_with_libs "$root" "$prov"
  copy_to "$root" "$drv"
  : >"$root/etc/zw-modules"
  while read -r m; do
    [[ $m == MISSING* ]] && skip "kernel $KPKG has no module ${m#MISSING }"
    p=/lib/modules/$KVER/${m%.ko*}.ko
    mkdir -p "$root$(dirname "$p")"
    case "$m" in # busybox insmod wants plain .ko
      *.ko) cp "$KDIR/lib/modules/$KVER/$m" "$root$p" ;;
      *.ko.xz) xz -dc "$KDIR/lib/modules/$KVER/$m" >"$root$p" ;;
      *.ko.zst) zstd -qdc "$KDIR/lib/modules/$KVER/$m" >"$root$p" ;;
    esac
    echo "$p" >>"$root/etc/zw-modules"
  done < <(module_order)
  [ -s "$root/etc/zw-modules" ] || skip "no kernel modules found for ${MODULE_ROOTS[*]} in $KDIR"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
  mknod -m 600 "$root/dev/console" c 5 1
  mknod -m 666 "$root/dev/null" c 1 3
  install -m 755 "$HERE/guest-init.sh" "$root/init"
}

# pack ROOT OUT: a newc cpio (the format the kernel unpacks), gzip -1 because TCG decompresses slowly anyway
pack() {
  (cd "$1" && find . -print0 | sort -z | cpio --null -o -H newc --quiet | gzip -1) >"$2.tmp"
  mv "$2.tmp" "$2"
}

# build_base: sets BASE (the cached base initramfs) and BASE_ROOT (its unpacked tree, to dedupe payloads)
build_base() {
  local key
  key=$(base_key)
  BASE=$CACHE/base-$key.cpio.gz
  BASE_ROOT=$CACHE/base-$key
  [ -f "$BASE" ] && [ -d "$BASE_ROOT" ] && return 0
  log "building base initramfs $key for $KVER"
  # earlier keys are stale (another kernel, script or host package version)
  find "$CACHE" -maxdepth 1 -name 'base-*' -exec rm -rf {} +
  build_base_root "$BASE_ROOT"
  pack "$BASE_ROOT" "$BASE"
}
