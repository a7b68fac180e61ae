#!/usr/bin/env bash
# vm-smoke.sh — boot the base image (hack/vm-image.sh) the way the QEMU rack
# will, and check what the rack relies on:
#
#   * a copy-on-write qcow2 overlay on the cached base disk (grown to 4G;
#     cloud-init grows the root filesystem to fit)
#   * a NoCloud seed (cloud-localds, label cidata) with an SSH key made here
#     and a runcmd that writes a marker
#   * a read-only agent disk (genisoimage -V COSMICAC -R -J): the guest sees
#     /dev/disk/by-label/COSMICAC and mounts it read-only
#   * user-mode networking: the guest's sshd forwarded to a loopback port
#     only, and the guest reaching a TCP service on the host's loopback
#     through slirp at 10.0.2.2
#   * KVM when /dev/kvm really runs the image's kernel, else TCG
#
# and measures: QEMU start -> kernel up, -> systemd, -> SSH reachable,
# -> cloud-init finished; `uname -r` in the guest vs the host.
#
# Usage:  hack/vm-smoke.sh            # one boot
#         RUNS=3 hack/vm-smoke.sh     # three boots, one after another, with p50s
#         BOOT=disk hack/vm-smoke.sh  # boot disk-bios.qcow2 from disk instead
#                                     # (SeaBIOS, GRUB, no -kernel), as a
#                                     # user's stock image is booted
#
# Environment (all optional):
#   RUNS=N                boots, one at a time                 (default 1)
#   BOOT                  kernel (direct kernel boot of disk.qcow2) or disk
#                         (disk-bios.qcow2 from its own GRUB)   (default kernel)
#   COSMICAC_QEMU_ACCEL   kvm or tcg, skipping the probe        (default: probe)
#   BOOT_TIMEOUT          seconds for one boot, up to SSH + cloud-init done
#                                                        (default 600 TCG, 180 KVM)
#   SMOKE_DIR             where to keep serial logs and results (default: a temp dir,
#                         removed on success unless KEEP=1)
# Needs qemu-system-x86, qemu-utils, cloud-image-utils, genisoimage and
# openssh-client (hack/install-deps.sh), and root for a cold image build.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNS=${RUNS:-1}
log() { printf '[vm-smoke %s] %s\n' "$(date +%T)" "$*" >&2; }
for c in qemu-system-x86_64 qemu-img cloud-localds genisoimage ssh ssh-keygen python3 timeout; do
  command -v "$c" >/dev/null || { log "$c not found (hack/install-deps.sh installs it)"; exit 1; }
done

IMG=$("$HERE/vm-image.sh")
[[ -f "$IMG/image.json" ]] || { log "no image in $IMG"; exit 1; }
CMDLINE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kernelCmdline"])' "$IMG/image.json")
FMT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["format"])' "$IMG/image.json")
BOOT=${BOOT:-kernel}
case "$BOOT" in
  kernel) DISK=$IMG/disk.qcow2
          KERNEL_ARGS=(-kernel "$IMG/vmlinuz" -initrd "$IMG/initrd.img" -append "$CMDLINE") ;;
  disk)   DISK=$IMG/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bootDisk"]["disk"])' "$IMG/image.json")
          FMT=qcow2 KERNEL_ARGS=() ;;
  *)      log "BOOT must be kernel or disk"; exit 2 ;;
esac

if [[ -n "${SMOKE_DIR:-}" ]]; then
  mkdir -p "$SMOKE_DIR"; WORK=$(cd "$SMOKE_DIR" && pwd)
else
  WORK=$(mktemp -d /tmp/cosmicac-vm-smoke.XXXXXX)
fi
QEMU_PID='' HTTP_PID='' ok=0
cleanup() {
  if [[ -n "$QEMU_PID" ]]; then kill "$QEMU_PID" 2>/dev/null || true; wait "$QEMU_PID" 2>/dev/null || true; fi
  if [[ -n "$HTTP_PID" ]]; then kill "$HTTP_PID" 2>/dev/null || true; wait "$HTTP_PID" 2>/dev/null || true; fi
  if [[ $ok == 1 && -z "${SMOKE_DIR:-}" && "${KEEP:-0}" != 1 ]]; then
    rm -rf "$WORK"
  else
    log "logs kept in $WORK"
  fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
since() { python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])) if sys.argv[2] else "nan")' "$1" "${2:-}"; }

# ---------------------------------------------------------------- accelerator
# /dev/kvm can exist and still not run a stock kernel: a paravirtual KVM
# such as PVM (kvm-pvm) runs real-mode code (SeaBIOS, a boot sector) but
# aborts on `-cpu host` (an MSR it refuses) and hangs a stock kernel with any
# other CPU model. So boot the image's own kernel with KVM, exactly as a
# replica would, without a root disk: it works if the kernel gets as far as
# "Kernel panic" (cannot mount root) within 20 s (it takes about 1 s).
kvm_works() {
  [[ -r /dev/kvm && -w /dev/kvm ]] || return 1
  local plog=$WORK/kvm-probe.serial
  : > "$plog"
  # (in a subshell, so that bash's "Aborted" notice goes to the log too)
  (timeout 20 qemu-system-x86_64 -machine q35 -accel kvm -cpu host -m 256 -smp 1 \
    -nodefaults -no-reboot -display none -monitor none -serial "file:$plog" \
    -kernel "$IMG/vmlinuz" -append "console=ttyS0 panic=-1 root=/dev/nonexistent" \
    </dev/null || true) >"$WORK/kvm-probe.log" 2>&1
  grep -aq 'Kernel panic' "$plog"
}
case "${COSMICAC_QEMU_ACCEL:-}" in
  kvm) ACCEL=(-accel kvm -cpu host) ;;
  tcg) ACCEL=(-accel "tcg,tb-size=128") ;;
  "")  if kvm_works; then ACCEL=(-accel kvm -cpu host); else ACCEL=(-accel "tcg,tb-size=128"); fi ;;
  *)   log "COSMICAC_QEMU_ACCEL must be kvm or tcg"; exit 2 ;;
esac
ACCEL_NAME=${ACCEL[1]%%,*}
[[ $ACCEL_NAME == kvm ]] && BOOT_TIMEOUT=${BOOT_TIMEOUT:-180} || BOOT_TIMEOUT=${BOOT_TIMEOUT:-600}
log "image $IMG; accelerator $ACCEL_NAME; boot $BOOT ($(basename "$DISK"))"

# ------------------------------------------------------------- shared inputs
ssh-keygen -q -t ed25519 -N '' -C cosmicac-smoke -f "$WORK/id_ed25519"
PUB=$(cat "$WORK/id_ed25519.pub")
AGENT_TOKEN=agent-$RANDOM$RANDOM
HOST_TOKEN=host-$RANDOM$RANDOM
mkdir -p "$WORK/agent" "$WORK/www"
echo "$AGENT_TOKEN" > "$WORK/agent/hello.txt"
echo "$HOST_TOKEN" > "$WORK/www/hello.txt"
genisoimage -quiet -V COSMICAC -R -J -o "$WORK/agent.iso" "$WORK/agent"
HPORT=$(free_port)
python3 -m http.server --bind 127.0.0.1 --directory "$WORK/www" "$HPORT" >"$WORK/http.log" 2>&1 &
HTTP_PID=$!

SSH_OPTS=(-i "$WORK/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
  -o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=5)
results=()

boot_once() {
  local n=$1 dir=$WORK/run$1
  mkdir -p "$dir"
  cat > "$dir/user-data" <<EOF
#cloud-config
ssh_authorized_keys:
  - $PUB
runcmd:
  - [ sh, -c, 'echo "runcmd ran at \$(date -u +%FT%TZ)" > /var/lib/cosmicac-smoke-marker' ]
  - [ sh, -c, 'mkdir -p /mnt/cosmicac && mount -o ro /dev/disk/by-label/COSMICAC /mnt/cosmicac && cat /mnt/cosmicac/hello.txt > /run/cosmicac-agent-seen' ]
  - [ python3, -c, 'import urllib.request as u; open("/run/cosmicac-host-seen","wb").write(u.urlopen("http://10.0.2.2:$HPORT/hello.txt", timeout=20).read())' ]
EOF
  printf 'instance-id: cosmicac-smoke-%s-%s\nlocal-hostname: cosmicac-smoke\n' "$n" "$RANDOM" > "$dir/meta-data"
  cloud-localds "$dir/seed.img" "$dir/user-data" "$dir/meta-data"
  qemu-img create -q -f qcow2 -b "$DISK" -F "$FMT" "$dir/overlay.qcow2" 4G
  local sport; sport=$(free_port)
  local serial=$dir/serial.log
  : > "$serial"

  local t0; t0=$(now)
  timeout "$BOOT_TIMEOUT" qemu-system-x86_64 -name "cosmicac-smoke-$n" \
    -machine q35 "${ACCEL[@]}" -m 512 -smp 1 \
    -nographic -monitor none -serial "file:$serial" \
    ${KERNEL_ARGS[@]+"${KERNEL_ARGS[@]}"} \
    -drive "file=$dir/overlay.qcow2,if=virtio,format=qcow2,discard=unmap" \
    -drive "file=$dir/seed.img,if=virtio,format=raw,readonly=on" \
    -drive "file=$WORK/agent.iso,if=virtio,format=raw,readonly=on" \
    -netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$sport-:22" \
    -device virtio-net-pci,netdev=n0,romfile= \
    -device virtio-rng-pci \
    </dev/null >"$dir/qemu.log" 2>&1 &
  QEMU_PID=$!

  local t_kernel='' t_systemd='' t_ssh='' t_ci='' deadline
  deadline=$(( $(date +%s) + BOOT_TIMEOUT ))
  while :; do
    kill -0 "$QEMU_PID" 2>/dev/null || { log "run $n: QEMU exited: $(tail -3 "$dir/qemu.log")"; return 1; }
    (( $(date +%s) < deadline )) || { log "run $n: no boot in ${BOOT_TIMEOUT}s; tail of $serial:"; tail -20 "$serial" >&2; return 1; }
    [[ -z "$t_kernel" ]] && grep -aq 'Linux version' "$serial" && t_kernel=$(now)
    [[ -z "$t_systemd" ]] && grep -aEq 'Welcome to .*Debian' "$serial" && t_systemd=$(now)
    [[ -z "$t_ci" ]] && grep -aEq 'Cloud-init v\. .* finished at' "$serial" && t_ci=$(now)
    if [[ -z "$t_ssh" && -n "$t_kernel" ]] && timeout 8 ssh "${SSH_OPTS[@]}" -p "$sport" debian@127.0.0.1 true 2>/dev/null; then
      t_ssh=$(now)
    fi
    [[ -n "$t_ssh" && -n "$t_ci" ]] && break
    sleep 0.5
  done
  local kernel systemd sshd ci
  kernel=$(since "$t0" "$t_kernel"); systemd=$(since "$t0" "$t_systemd")
  sshd=$(since "$t0" "$t_ssh"); ci=$(since "$t0" "$t_ci")
  log "run $n: kernel up ${kernel}s, systemd ${systemd}s, SSH ${sshd}s, cloud-init finished ${ci}s"

  # ------------------------------------------------------------ the checks
  local g=(timeout 300 ssh "${SSH_OPTS[@]}" -p "$sport" debian@127.0.0.1)
  local guest_kernel; guest_kernel=$("${g[@]}" uname -r)
  "${g[@]}" 'cloud-init status --wait' | tee "$dir/cloud-init-status" | grep -q 'status: done' \
    || { log "run $n: cloud-init status: $(cat "$dir/cloud-init-status")"; return 1; }
  "${g[@]}" 'cat /var/lib/cosmicac-smoke-marker' | grep -q 'runcmd ran at' || { log "run $n: no runcmd marker"; return 1; }
  "${g[@]}" 'test -e /dev/disk/by-label/COSMICAC && test -e /dev/disk/by-label/cidata' \
    || { log "run $n: /dev/disk/by-label lacks COSMICAC or cidata"; return 1; }
  [[ $("${g[@]}" 'cat /run/cosmicac-agent-seen') == "$AGENT_TOKEN" ]] || { log "run $n: agent disk not read"; return 1; }
  "${g[@]}" 'findmnt -no OPTIONS /mnt/cosmicac' | grep -qE '(^|,)ro(,|$)' || { log "run $n: agent disk not read-only"; return 1; }
  [[ $("${g[@]}" 'cat /run/cosmicac-host-seen') == "$HOST_TOKEN" ]] || { log "run $n: host service via 10.0.2.2 not reached from runcmd"; return 1; }
  "${g[@]}" "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://10.0.2.2:$HPORT/hello.txt\", timeout=20).read().decode().strip())'" \
    | grep -qx "$HOST_TOKEN" || { log "run $n: host service via 10.0.2.2 not reached over ssh"; return 1; }
  local rootsize; rootsize=$("${g[@]}" 'df -BM --output=size / | tail -1' | tr -dc 0-9)
  if [[ $BOOT == kernel ]]; then
    (( rootsize > 3000 )) || { log "run $n: root filesystem not grown to the 4G overlay (${rootsize}M)"; return 1; }
  else
    # From disk: GRUB's command line, the root on partition 1. The partition
    # is not grown (no growpart in the image), so neither is the root.
    "${g[@]}" 'cat /proc/cmdline' | grep -q '^BOOT_IMAGE=/boot/vmlinuz-.* root=LABEL=cosmicac-root ' \
      || { log "run $n: /proc/cmdline is not GRUB's: $("${g[@]}" 'cat /proc/cmdline')"; return 1; }
    [[ $("${g[@]}" 'findmnt -no SOURCE /') == /dev/vda1 ]] || { log "run $n: root is not /dev/vda1"; return 1; }
    grep -aq 'Loading Linux' "$serial" || { log "run $n: no GRUB output on the serial console"; return 1; }
  fi
  "${g[@]}" 'systemd-analyze; systemd-analyze blame | head -15; cloud-init analyze show; cloud-init analyze blame' \
    > "$dir/analyze.txt" 2>&1 || true
  log "run $n: guest kernel $guest_kernel (host $(uname -r)); root ${rootsize}M; checks passed"

  kill "$QEMU_PID" 2>/dev/null || true; wait "$QEMU_PID" 2>/dev/null || true
  QEMU_PID=
  results+=("$n $kernel $systemd $sshd $ci $guest_kernel")
}

for ((i = 1; i <= RUNS; i++)); do
  boot_once "$i"
done

python3 - "$WORK/result.json" "$ACCEL_NAME" "$(uname -r)" "$IMG" "$BOOT" "${results[@]}" <<'EOF'
import json, statistics, sys
out, accel, host_kernel, img, boot, *rows = sys.argv[1:]
runs = []
for r in rows:
    n, k, s, ssh, ci, gk = r.split()
    runs.append({"run": int(n), "kernelUp": float(k), "systemd": float(s),
                 "sshReachable": float(ssh), "cloudInitFinished": float(ci), "guestKernel": gk})
p50 = {m: statistics.median(r[m] for r in runs) for m in ("kernelUp", "systemd", "sshReachable", "cloudInitFinished")}
doc = {"accel": accel, "boot": boot, "hostKernel": host_kernel, "image": img, "runs": runs, "p50Seconds": p50}
json.dump(doc, open(out, "w"), indent=2)
print(json.dumps(doc, indent=2))
EOF
ok=1
log "all $RUNS boot(s) passed ($ACCEL_NAME, boot $BOOT)"
