package cli

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
)

// qemuRack is `up --rack qemu`'s rack: the catalogue from --image (or the
// images hack/vm-image.sh built, by their image.json name), the agent
// binary (this one unless given) and the VMs' directory in the data
// directory.
func (a *app) qemuRack(ctx context.Context, rc qemuworker.Config, images []string, agentBinary, dataDir string) (*platform.QEMUConfig, error) {
	cat := qemu.Catalogue{}
	for _, v := range images {
		name, path, err := qemu.ParseImageFlag(v)
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		im, err := qemu.LoadImage(ctx, name, path)
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		cat[name] = im
	}
	if len(images) == 0 {
		dir := filepath.Join(a.cacheDir(), "images")
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), qemu.ImageFile))
			if err != nil {
				continue
			}
			var desc struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(b, &desc) != nil || desc.Name == "" {
				continue
			}
			im, err := qemu.LoadImage(ctx, desc.Name, filepath.Join(dir, e.Name()))
			if err == nil {
				cat[desc.Name] = im
			}
		}
		if len(cat) == 0 {
			return nil, usageErrorf("--rack qemu: no image in %s: build one with hack/vm-image.sh, or give --image NAME=PATH", dir)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if agentBinary == "" {
		agentBinary = self
	}
	if dyn, err := dynamic(agentBinary); err != nil {
		return nil, usageErrorf("--agent-binary %s: %v", agentBinary, err)
	} else if dyn {
		fmt.Fprintf(a.stderr, "warning: the agent %s is dynamically linked; a VM image whose C library is older than this host's cannot run it (build one with CGO_ENABLED=0 and give --agent-binary)\n", agentBinary)
	}
	rc.Dir = filepath.Join(dataDir, "vms")
	return &platform.QEMUConfig{Rack: rc, Images: cat, AgentBinary: agentBinary, Relay: []string{self, "qemu-relay"}}, nil
}

// dynamic reports whether an ELF executable needs a dynamic loader.
func dynamic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// cacheDir is where the project's tools keep what they build
// ($COSMICAC_CACHE, default ~/.cache/cosmicac).
func (a *app) cacheDir() string {
	if d := a.getenv("COSMICAC_CACHE"); d != "" {
		return d
	}
	return filepath.Join(a.getenv("HOME"), ".cache", "cosmicac")
}

func init() { register((*app).qemuRelayCommand) }

// qemuRelayCommand is what a QEMU rack's VM runs for each connection to a
// forwarded platform port (qemu.Forward): standard input and output are
// the guest's socket, copied to and from the host address.
func (a *app) qemuRelayCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "qemu-relay HOST:PORT",
		Short:  "Relay a VM's forwarded connection (standard input and output) to HOST:PORT (run by QEMU)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return qemu.Relay(cmd.Context(), a.stdin, a.stdout, args[0])
		},
	}
}
