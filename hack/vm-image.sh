#!/usr/bin/env bash
# vm-image.sh — build the CosmicAC base VM image: a small Debian 12 (bookworm)
# with cloud-init and openssh-server, from Debian's packages only, and cache it
# outside the checkout by content. The QEMU rack boots it with its own kernel
# (direct kernel boot); see docs/vm-image.md for the contract.
#
# Usage:  hack/vm-image.sh                # build (or find in the cache); prints DEST
#         hack/vm-image.sh --print-dest   # print DEST without building
#
# DEST is ${COSMICAC_CACHE:-~/.cache/cosmicac}/images/debian-12-<hash>, where
# <hash> is the SHA-256 (first 16 hex digits) of this script, the package list
# and the disk size, so a change to the recipe makes a new image and every
# clone on a machine shares one build. DEST holds:
#
#   disk.qcow2   the root filesystem: ext4 on the whole disk (no partition
#                table, no bootloader), label cosmicac-root, compressed qcow2
#   vmlinuz      the guest kernel (linux-image-cloud-amd64), from the image
#   initrd.img   its initramfs (virtio_pci, virtio_blk; ext4 is built in)
#   disk-bios.qcow2  the same system shaped like a stock cloud image, booted
#                from its own disk: an MBR partition table, one ext4 root
#                partition (same label) from sector 2048, and GRUB for BIOS
#                (boot.img in sector 0, core.img in the gap after it,
#                /boot/grub/grub.cfg); compressed qcow2. The QEMU rack boots
#                it like a user's own image: no image.json, no -kernel
#   image.json   format, file names, kernel command line, root device, sizes,
#                kernel version, packages, build time; bootDisk: the above
#
# Needs root (mmdebstrap's root mode makes device nodes and chroots), and the
# packages mmdebstrap, e2fsprogs, qemu-utils, fdisk (sfdisk) and grub-pc-bin
# (grub-mkimage and GRUB's i386-pc modules) (hack/install-deps.sh).
# Nothing is downloaded but Debian packages, through apt. No loop devices or
# mounts of disk images: `mke2fs -d` writes the filesystem from a directory
# (for disk-bios.qcow2, at the partition's offset: `mke2fs -E offset=`), and
# GRUB is installed by writing its images at their sectors with dd, as
# grub-install would but without a device.
# A cold build takes a few minutes on 2 cores; later runs print DEST and exit.
#
# Environment (all optional):
#   COSMICAC_CACHE       cache root                       (default ~/.cache/cosmicac)
#   VM_IMAGE_SIZE        virtual disk size                (default 2G; grown at boot
#                        by cloud-init when a rack makes a larger overlay)
#   VM_IMAGE_MIRROR      Debian mirror URL or sources file for mmdebstrap
#                        (default: mmdebstrap's, with updates and security)
#   FORCE=1              rebuild even if DEST is complete
set -euo pipefail

SUITE=bookworm
# Only what is needed to boot, get a NoCloud seed applied and accept SSH.
# ifupdown + isc-dhcp-client: cloud-init on bookworm renders the network as
# /etc/network/interfaces.d (eni); udev: /dev/disk/by-label for the seed and
# the agent disk; dbus: hostnamectl and logind; sudo: cloud-init's default user.
PACKAGES=(
  linux-image-cloud-amd64 initramfs-tools
  systemd-sysv udev dbus
  cloud-init
  openssh-server
  ifupdown isc-dhcp-client iproute2 netbase
  e2fsprogs kmod procps sudo
)
SIZE=${VM_IMAGE_SIZE:-2G}
# The kernel command line a rack passes with -append (root is the first
# virtio disk: the job's overlay).
CMDLINE="root=/dev/vda rw console=ttyS0,115200n8"
ROOT_LABEL=cosmicac-root
# disk-bios.qcow2: the root partition's first sector (1 MiB, as fdisk and
# Debian's images align it; GRUB's core.img lives in sectors 1..2047), and
# GRUB's kernel command line, as in Debian's cloud images.
PART_START=2048
GRUB_CMDLINE="root=LABEL=$ROOT_LABEL ro console=tty0 console=ttyS0,115200 earlyprintk=ttyS0,115200 consoleblank=0"
GRUB_DIR=/usr/lib/grub/i386-pc
# Built into core.img, so that GRUB reads its grub.cfg and boots Linux
# without loading a module (they are in /boot/grub/i386-pc too).
GRUB_MODULES=(biosdisk part_msdos ext2 normal linux search search_label configfile echo serial terminal)

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HASH=$( { cat "$SELF"; printf '%s\n' "${PACKAGES[@]}" "$SIZE"; } | sha256sum | cut -c1-16)
CACHE=${COSMICAC_CACHE:-${HOME:?HOME not set}/.cache/cosmicac}
DEST=$CACHE/images/debian-12-$HASH
if [[ "${1:-}" == --print-dest ]]; then
  echo "$DEST"
  exit 0
fi
[[ $# == 0 ]] || { echo "usage: $0 [--print-dest]" >&2; exit 2; }

log() { printf '[vm-image %s] %s\n' "$(date +%T)" "$*" >&2; }

complete() {
  [[ -f "$DEST/image.json" && -f "$DEST/disk.qcow2" && -f "$DEST/vmlinuz" && -f "$DEST/initrd.img" && -f "$DEST/disk-bios.qcow2" ]]
}
if [[ "${FORCE:-0}" != 1 ]] && complete; then
  log "up to date in $DEST; nothing to do"
  echo "$DEST"
  exit 0
fi

[[ $(id -u) == 0 ]] || { log "must run as root (mmdebstrap's root mode); try sudo"; exit 1; }
for c in mmdebstrap mke2fs qemu-img sha256sum sfdisk grub-mkimage; do
  command -v "$c" >/dev/null || { log "$c not found (hack/install-deps.sh installs it)"; exit 1; }
done
[[ -f $GRUB_DIR/boot.img && -f $GRUB_DIR/diskboot.img ]] || { log "no GRUB for BIOS in $GRUB_DIR (grub-pc-bin; hack/install-deps.sh installs it)"; exit 1; }

mkdir -p "$CACHE/images"
# One build at a time per image: a second caller waits and then finds it.
exec 9>"$CACHE/images/.debian-12-$HASH.lock"
flock 9
if [[ "${FORCE:-0}" != 1 ]] && complete; then
  log "built meanwhile in $DEST"
  echo "$DEST"
  exit 0
fi

start=$(date +%s)
WORK=$(mktemp -d "$CACHE/images/.build-$HASH.XXXXXX")
# On every exit, also one that kills mmdebstrap halfway: first unmount
# whatever it left mounted in the chroot (/proc, /sys, /dev), deepest
# first, then remove the directory without crossing into another
# filesystem, so a mount left behind is never emptied through it.
cleanup() {
  local m
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r)
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ROOTFS=$WORK/rootfs
OUT=$WORK/out
mkdir -p "$ROOTFS" "$OUT"

# Hooks run outside the chroot with the root directory as $1.
# Before the kernel is installed: a small initramfs with the virtio drivers
# (ext4 and crc32c are built into the cloud kernel), so one is made, once.
essential_hook='
  mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/etc/initramfs-tools/hooks"
  printf "MODULES=list\nCOMPRESS=zstd\n" > "$1/etc/initramfs-tools/conf.d/cosmicac"
  cat > "$1/etc/initramfs-tools/hooks/cosmicac" <<"EOF"
#!/bin/sh
# CosmicAC: the drivers a QEMU rack root disk needs.
[ "$1" = prereqs ] && exit 0
. /usr/share/initramfs-tools/hook-functions
manual_add_modules virtio_pci virtio_blk virtio_scsi virtio_mmio virtio_console
EOF
  chmod 0755 "$1/etc/initramfs-tools/hooks/cosmicac"
'
customize_hook='
  set -e
  r=$1
  printf "%s\n" "# CosmicAC base image: ext4 on the whole first disk" \
    "LABEL='"$ROOT_LABEL"' / ext4 rw,errors=remount-ro 0 1" > "$r/etc/fstab"
  echo debian > "$r/etc/hostname"
  printf "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n" > "$r/etc/hosts"
  # Each VM makes its own machine-id and SSH host keys on first boot.
  : > "$r/etc/machine-id"; rm -f "$r/var/lib/dbus/machine-id"
  rm -f "$r"/etc/ssh/ssh_host_*
  # Root keeps no password (locked); logins are by SSH key via cloud-init.
  chroot "$r" usermod -p "*" root
  # A login prompt on the serial console.
  mkdir -p "$r/etc/systemd/system/getty.target.wants"
  ln -sf /lib/systemd/system/serial-getty@.service \
    "$r/etc/systemd/system/getty.target.wants/serial-getty@ttyS0.service"
  # Nothing a short-lived VM needs: no timers that run apt or scrub
  # filesystems, and no e2scrub_reap at boot (27 s under TCG).
  for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer e2scrub_reap.service; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  echo "LANG=C.UTF-8" > "$r/etc/default/locale"
  cat > "$r/etc/cloud/cloud.cfg.d/90_cosmicac.cfg" <<"EOF"
# CosmicAC base image: the seed is a NoCloud disk (label cidata); never wait
# for a cloud metadata service.
datasource_list: [ NoCloud, None ]
# Already C.UTF-8: no locale-gen at boot.
locale: C.UTF-8
# Host keys: no RSA (its key generation costs seconds under TCG).
ssh_genkeytypes: [ ed25519, ecdsa ]
# No grub-pc package in this image (direct kernel boot, or, on
# disk-bios.qcow2, a GRUB installed from outside): nothing to configure.
grub_dpkg:
  enabled: false
EOF
  # sshd starts after cloud-init has made the host keys; should cloud-init
  # not have run, it makes one ed25519 key itself (`ssh-keygen -A` would make
  # an RSA key too: 40 s under TCG).
  mkdir -p "$r/etc/systemd/system/ssh.service.d"
  cat > "$r/etc/systemd/system/ssh.service.d/cosmicac-hostkeys.conf" <<"EOF"
[Unit]
After=cloud-init.service
[Service]
ExecStartPre=
ExecStartPre=/bin/sh -c "ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -q -t ed25519 -N \"\" -f /etc/ssh/ssh_host_ed25519_key"
ExecStartPre=/usr/sbin/sshd -t
EOF
'

log "mmdebstrap $SUITE (${#PACKAGES[@]} packages) into $ROOTFS"
mirror=()
[[ -n "${VM_IMAGE_MIRROR:-}" ]] && mirror=("$VM_IMAGE_MIRROR")
include=$(IFS=,; echo "${PACKAGES[*]}")
mmdebstrap --mode=root --variant=apt --format=directory \
  --include="$include" \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --aptopt='Acquire::Languages "none"' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --essential-hook="$essential_hook" \
  --customize-hook="$customize_hook" \
  --customize-hook='rm -rf "$1"/var/cache/apt/*.bin "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/tmp/*' \
  "$SUITE" "$ROOTFS" ${mirror[@]+"${mirror[@]}"} >&2

# The kernel and initramfs, for direct kernel boot (-kernel/-initrd).
kver=$(cd "$ROOTFS/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | sort -V | tail -1)
[[ -n "$kver" && -f "$ROOTFS/boot/initrd.img-$kver" ]] || { log "no kernel/initrd in the image"; exit 1; }
cp "$ROOTFS/boot/vmlinuz-$kver" "$OUT/vmlinuz"
cp "$ROOTFS/boot/initrd.img-$kver" "$OUT/initrd.img"
initrd_list=$(chroot "$ROOTFS" lsinitramfs "/boot/initrd.img-$kver")
for m in virtio_pci virtio_blk; do
  grep -q "/$m\.ko" <<<"$initrd_list" || { log "initrd lacks $m"; exit 1; }
done
rootfs_mb=$(du -sm "$ROOTFS" | cut -f1)

log "mke2fs -d: ${SIZE} ext4 (label $ROOT_LABEL) from a ${rootfs_mb} MB tree"
mke2fs -q -F -t ext4 -L "$ROOT_LABEL" -m 1 -E root_owner=0:0 -d "$ROOTFS" "$WORK/disk.raw" "$SIZE" >&2
# zstd, not qcow2's default zlib: 1.7 CPU-s a disk, not 11, and a little
# smaller (197.9 against 201.9 MB); QEMU decompresses it faster at boot too.
log "qemu-img convert to compressed qcow2 (zstd)"
qemu-img convert -c -f raw -O qcow2 -o compression_type=zstd "$WORK/disk.raw" "$OUT/disk.qcow2"
rm -f "$WORK/disk.raw"

# disk-bios.qcow2: the same tree, plus GRUB's configuration and modules
# (added only now, so disk.qcow2 is as before), in partition 1 of an MBR
# disk, with GRUB for BIOS in sector 0 and the gap after it.
bstart=$(date +%s)
log "disk-bios: MBR, ext4 partition from sector $PART_START, GRUB for BIOS"
mkdir -p "$ROOTFS/boot/grub/i386-pc"
cp "$GRUB_DIR"/*.mod "$GRUB_DIR"/*.lst "$ROOTFS/boot/grub/i386-pc/"
cat > "$ROOTFS/boot/grub/grub.cfg" <<EOF
# CosmicAC disk-bios image (hack/vm-image.sh): GRUB for BIOS, booting from
# partition 1 as Debian's cloud images do.
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
set default=0
search --no-floppy --label --set=root $ROOT_LABEL
menuentry 'Debian GNU/Linux 12 (CosmicAC disk-bios)' {
	echo 'Loading Linux $kver ...'
	linux /boot/vmlinuz-$kver $GRUB_CMDLINE
	echo 'Loading initial ramdisk ...'
	initrd /boot/initrd.img-$kver
}
EOF
truncate -s "$SIZE" "$WORK/disk-bios.raw"
printf 'label: dos\nstart=%d, type=83, bootable\n' "$PART_START" | sfdisk -q "$WORK/disk-bios.raw" >&2
part_sectors=$(sfdisk -J "$WORK/disk-bios.raw" | python3 -c 'import json,sys; print(json.load(sys.stdin)["partitiontable"]["partitions"][0]["size"])')
mke2fs -q -F -t ext4 -L "$ROOT_LABEL" -m 1 -E "root_owner=0:0,offset=$((PART_START * 512)),nodiscard" -d "$ROOTFS" \
  "$WORK/disk-bios.raw" "$((part_sectors / 2))k" >&2
e2fsck -fn "$WORK/disk-bios.raw?offset=$((PART_START * 512))" >/dev/null 2>&1 || { log "disk-bios: e2fsck fails on partition 1"; exit 1; }
# GRUB without grub-install (which needs a device): core.img is diskboot.img
# (its blocklist's length set by grub-mkimage; its start, sector 2, is where
# the rest of core.img follows when core.img begins at sector 1) and the
# kernel with the modules; boot.img's kernel sector (offset 0x5c) is 1 as
# built, and its boot drive (0x64) 0xff: the drive the BIOS booted. Only
# boot.img's first 440 bytes are written: the disk signature and the
# partition table after them stay.
grub-mkimage -O i386-pc -d "$GRUB_DIR" -o "$WORK/core.img" -p "(hd0,msdos1)/boot/grub" "${GRUB_MODULES[@]}"
core_sectors=$(( ($(stat -c %s "$WORK/core.img") + 511) / 512 ))
(( core_sectors < PART_START )) || { log "disk-bios: core.img ($core_sectors sectors) does not fit before sector $PART_START"; exit 1; }
[[ $(od -An -tx1 -j $((0x5c)) -N 8 "$GRUB_DIR/boot.img" | tr -d ' ') == 0100000000000000 ]] || { log "disk-bios: boot.img's kernel sector is not 1"; exit 1; }
dd if="$GRUB_DIR/boot.img" of="$WORK/disk-bios.raw" bs=440 count=1 conv=notrunc status=none
dd if="$WORK/core.img" of="$WORK/disk-bios.raw" bs=512 seek=1 conv=notrunc status=none
log "disk-bios: qemu-img convert to compressed qcow2 (zstd)"
qemu-img convert -c -f raw -O qcow2 -o compression_type=zstd "$WORK/disk-bios.raw" "$OUT/disk-bios.qcow2"
rm -f "$WORK/disk-bios.raw"
grub_version=$(dpkg-query -W -f '${Version}' grub-pc-bin 2>/dev/null || grub-mkimage --version | awk '{print $NF}')
bsecs=$(( $(date +%s) - bstart ))

pkgs=$(chroot "$ROOTFS" dpkg-query -W -f '${Package}=${Version}\n' "${PACKAGES[@]}" linux-image-"$kver" | sort)
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
secs=$(( $(date +%s) - start ))
python3 - "$OUT" "$kver" "$CMDLINE" "$ROOT_LABEL" "$built" "$secs" "$rootfs_mb" "$HASH" "$pkgs" \
  "$PART_START" "$part_sectors" "$GRUB_CMDLINE" "$grub_version" "$core_sectors" "$bsecs" "${GRUB_MODULES[*]}" <<'EOF'
import json, os, subprocess, sys
(out, kver, cmdline, label, built, secs, rootfs_mb, h, pkgs,
 part_start, part_sectors, grub_cmdline, grub_version, core_sectors, bsecs, grub_modules) = sys.argv[1:]
def qinfo(f):
    return json.loads(subprocess.check_output(
        ["qemu-img", "info", "--output=json", os.path.join(out, f)]))
info = qinfo("disk.qcow2")
binfo = qinfo("disk-bios.qcow2")
doc = {
    "name": "debian-12",
    "hash": h,
    "os": "Debian GNU/Linux 12 (bookworm)",
    "arch": "x86_64",
    "disk": "disk.qcow2",
    "format": "qcow2",
    "virtualSizeBytes": info["virtual-size"],
    "fileSizeBytes": os.path.getsize(os.path.join(out, "disk.qcow2")),
    "rootfsMB": int(rootfs_mb),
    "partitions": "none: ext4 on the whole disk",
    "rootDevice": "/dev/vda",
    "rootLabel": label,
    "boot": "direct-kernel",
    "kernel": "vmlinuz",
    "initrd": "initrd.img",
    "kernelCmdline": cmdline,
    "kernelVersion": kver,
    "kernelBytes": os.path.getsize(os.path.join(out, "vmlinuz")),
    "initrdBytes": os.path.getsize(os.path.join(out, "initrd.img")),
    "cloudInit": {"datasources": ["NoCloud", "None"], "seedLabel": "cidata", "defaultUser": "debian"},
    "agentDiskLabel": "COSMICAC",
    "serialConsole": "ttyS0",
    "packages": pkgs.split(),
    "built": built,
    "buildSeconds": int(secs),
    # The same system as a disk that boots itself, as a stock cloud image
    # does: give the rack this file alone (--image NAME=PATH), no kernel.
    "bootDisk": {
        "disk": "disk-bios.qcow2",
        "format": "qcow2",
        "virtualSizeBytes": binfo["virtual-size"],
        "fileSizeBytes": os.path.getsize(os.path.join(out, "disk-bios.qcow2")),
        "partitions": "msdos: 1 (ext4, label %s, sectors %s+%s, bootable)" % (label, part_start, part_sectors),
        "rootDevice": "/dev/vda1",
        "boot": "bios-grub",
        "bootloader": "GRUB %s i386-pc: boot.img in sector 0, core.img (%s sectors) from sector 1, /boot/grub/grub.cfg" % (grub_version, core_sectors),
        "grubModules": grub_modules.split(),
        "kernelCmdline": "BOOT_IMAGE=/boot/vmlinuz-%s %s" % (kver, grub_cmdline),
        "buildSeconds": int(bsecs),
    },
}
with open(os.path.join(out, "image.json"), "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
EOF

rm -rf "$DEST"
mv "$OUT" "$DEST"
log "built in ${secs}s: $DEST ($(du -sh "$DEST" | cut -f1), kernel $kver)"
echo "$DEST"
