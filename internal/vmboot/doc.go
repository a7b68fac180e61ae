// Package vmboot builds what a job's VM boots with, the same for every rack
// that boots VMs (the Kubernetes worker's KubeVirt VMIs, a QEMU rack's
// VMs): the cloud-init user data (UserData), NoCloud meta-data (MetaData)
// and the contract of the agent disk (AgentDisk), the read-only disk that
// brings the agent binary to a stock cloud image.
//
// At boot, cloud-init (any image with it: Ubuntu 22.04/24.04, Debian
// 12/13) reads the user data and
//
//   - enables the image's default user with the spec's SSH keys;
//   - writes the agent's config (AgentConfigPath, 0600), the job's
//     environment (EnvFilePath, 0600) and the agent's systemd unit
//     (AgentUnitPath); with DeliveryDisk also the script that mounts the
//     agent disk (MountScriptPath);
//   - starts the unit once its init stage has ended (a bootcmd queues a
//     transient unit ordered after cloud-init.service: EarlyStart), not
//     after the config and final stages; and in runcmd, as before, runs
//     `systemctl daemon-reload` and `systemctl enable --now
//     cosmicac-agent.service` (a no-op by then).
//
// The unit (Restart=always, RestartSec=2, no start rate limit) runs, with
// DeliveryDisk, MountScriptPath first: it waits up to AgentDiskWait for
// /dev/disk/by-label/COSMICAC, mounts it read-only at /run/cosmicac unless
// mounted, then the unit runs `/run/cosmicac/cosmicac agent
// instance|inference --config /etc/cosmicac/agent.yaml`. With DeliveryImage
// it runs the agent the image carries (Agent.Path) instead.
//
// The package is pure: the standard library, the domain (internal/cosmic)
// and a YAML encoder; no Kubernetes, no other component (a boundary test in
// internal/archtest). Importers: the rack workers that boot VMs
// (internal/k8sworker, a QEMU rack) and tests that check what a VM is told.
package vmboot
