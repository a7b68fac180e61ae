#!/usr/bin/env bash
# Installs the system packages the test suite uses, from Debian's apt, when
# they are missing: iproute2 and iptables (network-namespace tests; the
# ork's partitions drop packets with iptables inside namespaces they
# create), OpenSSH's server and client (ssh through the fabric, the shell
# benchmark's baseline),
# Chromium (the web interface's browser tests) and Node.js with npm (the
# interface's build and its test driver, playwright-core), and what the
# base VM image (hack/vm-image.sh) and the QEMU rack boot with: mmdebstrap
# and e2fsprogs (the image is built from Debian's packages into a directory,
# then `mke2fs -d`), QEMU (qemu-system-x86, qemu-utils), cloud-localds
# (cloud-image-utils: the NoCloud seed) and genisoimage (the agent disk).
# Run as root; otherwise it says what is missing and fails.
set -euo pipefail

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v "${CHROMIUM:-/usr/bin/chromium}" >/dev/null 2>&1 || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v mke2fs >/dev/null 2>&1 || need+=(e2fsprogs)
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v qemu-img >/dev/null 2>&1 || need+=(qemu-utils)
command -v cloud-localds >/dev/null 2>&1 || need+=(cloud-image-utils)
command -v genisoimage >/dev/null 2>&1 || need+=(genisoimage)
command -v sfdisk >/dev/null 2>&1 || need+=(fdisk)
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql-15)
[[ -f /usr/lib/grub/i386-pc/boot.img ]] && command -v grub-mkimage >/dev/null 2>&1 || need+=(grub-pc-bin)
# llama.cpp's llama-server, built from source (hack/build-llama.sh).
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v git >/dev/null 2>&1 || need+=(git)
command -v file >/dev/null 2>&1 || need+=(file)
# Archive volumes' tests make tar.bz2 and zip archives with the real tools.
command -v bzip2 >/dev/null 2>&1 || need+=(bzip2)
command -v zip >/dev/null 2>&1 || need+=(zip)
if ((${#need[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "missing system packages: ${need[*]} (apt-get install ${need[*]}, as root)" >&2
    exit 1
  fi
  printf '[deps %s] installing %s\n' "$(date +%T)" "${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# playwright-core needs Node.js 20 or later.
major=$(node -p 'process.versions.node.split(".")[0]')
if ((major < 20)); then
  echo "Node.js $(node --version) is too old for the browser tests (playwright-core needs 20 or later)" >&2
  exit 1
fi
