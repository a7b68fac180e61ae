package components

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/qemu/handoff"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/vmboot"
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
			return nil, cli.UsageErrorf("%v", err)
		}
		im, err := qemu.LoadImage(ctx, name, path)
		if err != nil {
			return nil, cli.UsageErrorf("%v", err)
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
			return nil, cli.UsageErrorf("--rack qemu: no image in %s: build one with hack/vm-image.sh, or give --image NAME=PATH", dir)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if agentBinary == "" {
		agentBinary = defaultAgent(self)
	}
	if dyn, err := dynamic(agentBinary); err != nil {
		return nil, cli.UsageErrorf("--agent-binary %s: %v", agentBinary, err)
	} else if dyn {
		fmt.Fprintf(a.Stderr, "warning: the agent %s is dynamically linked; a VM image whose C library is older than this host's cannot run it (build one with CGO_ENABLED=0 and give --agent-binary)\n", agentBinary)
	}
	rc.Dir = filepath.Join(dataDir, "vms")
	return &platform.QEMUConfig{Rack: rc, Images: cat, AgentBinary: agentBinary, Relay: []string{self, "qemu-relay"}}, nil
}

// defaultAgent is the agent a VM gets when none is given: cosmicac-agent
// beside this binary (cmd/cosmicac-agent, the agents alone), else this
// binary, which serves the same `agent instance|inference` command lines
// with all of the platform's components beside them.
func defaultAgent(self string) string {
	if p := filepath.Join(filepath.Dir(self), "cosmicac-agent"); fileExists(p) {
		return p
	}
	return self
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
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
	if d := a.Getenv("COSMICAC_CACHE"); d != "" {
		return d
	}
	return filepath.Join(a.Getenv("HOME"), ".cache", "cosmicac")
}

func init() { register((*app).qemuRelayCommand) }

// qemuRelayCommand is what a QEMU rack's VM runs for each connection to a
// forwarded platform port (qemu.Forward): it hands its standard input, the
// guest's socket, to the worker on the VM's relay socket and exits
// (internal/qemu/handoff, whose init runs it before the other packages';
// this command is its usage); the worker relays the connection.
func (a *app) qemuRelayCommand() *cobra.Command {
	return &cobra.Command{
		Use:    handoff.Command + " SOCKET GUEST-ADDR",
		Short:  "Hand a VM's forwarded connection (standard input) to its worker's relay socket (run by QEMU)",
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return handoff.Send(args[0], args[1], 0)
		},
	}
}

// ---- wrk-server-qemu

type qemuFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string `json:"ork"`
	Monitor        string `json:"monitor,omitempty"`
	// The agents' peers: KEY@HOST:PORT each, on this host (each port is
	// forwarded into the VMs).
	Directory      []string `json:"directory,omitempty"`
	AppNode        []string `json:"appNode,omitempty"`
	ProxyInference []string `json:"proxyInference,omitempty"`
	// LlamaServer and ModelDir: the llama.cpp runtime (up's flags).
	LlamaServer string            `json:"llamaServer,omitempty"`
	ModelDir    string            `json:"modelDir,omitempty"`
	Rack        qemuworker.Config `json:"rack"`
	Images      []string          `json:"images,omitempty"`
	AgentBinary string            `json:"agentBinary,omitempty"`
}

func init() { register((*app).wrkServerQEMUCommand) }

func (a *app) wrkServerQEMUCommand() *cobra.Command {
	cfg := qemuFileConfig{Rack: qemuworker.Config{Rack: "qemu-1", Location: "local", GPUModel: "VIRTUAL_GPU", Nodes: 1, GPUsPerNode: 2}}
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-server-qemu",
		Short: "Run a rack worker that runs jobs as real QEMU VMs on this machine",
		Long: "Runs cosmicac-wrk-server-qemu: each replica of a GPU Container Job is a QEMU VM on this\n" +
			"machine (KVM where the host has it, software emulation otherwise), booted from an image of\n" +
			"the catalogue (--image NAME=PATH) with the agent on a read-only disk; the VMs reach only the\n" +
			"platform's peers given here (docs/qemu-rack.md). Register it with\n" +
			"`cosmicac racks register --worker-key KEY --worker-addr HOST:PORT --agent-deadline 10m`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			if cfg.DataDir == "" {
				return cli.UsageErrorf("--data-dir is required: the VMs' disks live there")
			}
			q, err := a.qemuRack(cmd.Context(), cfg.Rack, cfg.Images, cfg.AgentBinary, cfg.DataDir)
			if err != nil {
				return err
			}
			llama, models, err := a.llamaEngine(cfg.LlamaServer, cfg.ModelDir, cfg.DataDir, cmd.Flags().Changed("llama-server") || cfg.LlamaServer != "")
			if err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			wn, err := cfg.workerNode("wrk-server-qemu", q.Rack.Rack, cfg.Ork, cfg.Monitor, log)
			if err != nil {
				return err
			}
			// The agents dial the directory, the app-nodes and the monitor,
			// each forwarded into the VMs; the worker adds itself.
			var peers []vmboot.Peer
			add := func(flag, role string, vals ...string) error {
				for _, v := range vals {
					k, addrs, err := cli.ParsePeerFlag(flag, v)
					if err != nil {
						return err
					}
					peers = append(peers, vmboot.Peer{Role: role, Key: k.String(), Addrs: addrs})
				}
				return nil
			}
			if err := errors.Join(add("directory", agentapi.RoleDirectory, cfg.Directory...), add("app-node", agentapi.RoleAppNode, cfg.AppNode...),
				add("proxy-inference", agentapi.RoleProxy, cfg.ProxyInference...)); err != nil {
				wn.close()
				return err
			}
			if cfg.Monitor != "" {
				peers = append(peers, vmboot.Peer{Role: agentapi.RoleMonitor, Key: wn.monitor.String(), Addrs: wn.monitorAddrs})
			}
			w, err := qemuworker.New(q.Rack, qemuworker.Options{Images: q.Images, AgentBinary: q.AgentBinary, Relay: q.Relay,
				Node: wn.node, Keys: wn.ring, Peers: peers, Reporter: wn.reporter, Logs: wn.logs,
				Log: log.With("component", "wrk-server-qemu"), LlamaServer: llama, ModelDir: models})
			if err != nil {
				wn.close()
				return cli.UsageErrorf("%v", err)
			}
			a.printNode(wn.node)
			fmt.Fprintf(a.Stdout, "rack %s (%s): VMs under QEMU (%s) in %s; images %v\n", q.Rack.Rack, q.Rack.Location, w.Accel(), q.Rack.Dir, q.Images.Names())
			if llama != "" {
				fmt.Fprintf(a.Stdout, "llama.cpp: %s, models in %s\n", llama, models)
			}
			return wn.run(cmd.Context(), w)
		},
	}
	cfg.bind(cmd.Flags(), "127.0.0.1:7425", trust.Worker, trust.Ork, trust.Monitor)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork: "+orkAddrs)
	f.StringVar(&cfg.Monitor, "monitor", "", "wrk-monitor, to send job log records to (also given to the VMs' agents): KEY@HOST:PORT")
	f.StringSliceVar(&cfg.Directory, "directory", nil, "the agents' directory: KEY@HOST:PORT (repeatable)")
	f.StringSliceVar(&cfg.AppNode, "app-node", nil, "an app-node that relays shells to the VMs' agents: KEY@HOST:PORT (repeatable)")
	f.StringSliceVar(&cfg.ProxyInference, "proxy-inference", nil, "proxy-inference, which the inference agents serve: KEY@HOST:PORT (repeatable)")
	f.StringVar(&cfg.LlamaServer, "llama-server", "", "the llama-server llama.cpp jobs run with, inside each replica's VM (default: hack/build-llama.sh's build, else llama-server on PATH; \"\": the runtime is off)")
	f.StringVar(&cfg.ModelDir, "model-dir", "", "the GGUF models of llama.cpp jobs (ORG/NAME.gguf; default DATA_DIR/models, where the test models are installed)")
	f.StringArrayVar(&cfg.Images, "image", nil, "an image of the catalogue, NAME=PATH (repeatable; default: the images hack/vm-image.sh built)")
	f.StringVar(&cfg.AgentBinary, "agent-binary", "", "the agent put on each VM's agent disk, a static linux/amd64 cosmicac-agent (default: cosmicac-agent beside this binary, else this binary)")
	f.StringVar(&cfg.Rack.Rack, "rack", cfg.Rack.Rack, "the rack's ID")
	f.StringVar(&cfg.Rack.Location, "location", cfg.Rack.Location, "the rack's location")
	f.StringVar(&cfg.Rack.GPUModel, "gpu-model", cfg.Rack.GPUModel, "the GPU model the rack declares")
	f.IntVar(&cfg.Rack.Nodes, "nodes", cfg.Rack.Nodes, "nodes the rack declares")
	f.IntVar(&cfg.Rack.GPUsPerNode, "gpus-per-node", cfg.Rack.GPUsPerNode, "GPUs per node")
	f.StringSliceVar(&cfg.Rack.VFIO, "vfio", nil, "host PCI addresses of the GPUs to pass through (nodes × GPUs of them)")
	f.StringVar(&cfg.Rack.Accel, "accel", "", "kvm or tcg (default: kvm where the host has hardware virtualization)")
	f.StringSliceVar(&cfg.Rack.Egress, "egress", nil, "the datastores' endpoints the VMs may reach for their volumes, http(s)://HOST[:PORT] (repeatable; default: none, docs/data.md)")
	f.BoolVar(&cfg.Rack.StopVMsOnExit, "stop-vms-on-exit", false, "stop the VMs when the worker stops (default: they run on, and the worker started again adopts them)")
	return cmd
}
