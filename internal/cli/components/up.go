package components

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/gateway"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/qemuworker"
	"github.com/cosmicac/cosmicac/internal/store/database"
)

func init() { register((*app).upCommand) }

// defaultDataDir is where `cosmicac up` keeps its state: the user's data
// directory ($XDG_DATA_HOME/cosmicac, else ~/.local/share/cosmicac).
func defaultDataDir(getenv func(string) string) string {
	if d := getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "cosmicac")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "cosmicac")
	}
	return "cosmicac-data"
}

// simulatedRackNote says, in the banner, what the simulated rack is not:
// someone trying CosmicAC would otherwise take a shell in a job for a shell
// in its VM, and run there what they would only run in one.
func simulatedRackNote(user string, hostShells bool) string {
	if !hostShells {
		return "The simulated rack runs no VM and pulls no image: a job's image is only a name. Its shells\n" +
			"(`cosmicac jobs shell`, the web Terminal, `cosmicac jobs ssh`) are turned off\n" +
			"(--sim-host-shells=false), as they would run on this machine (docs/simulated-rack.md).\n\n"
	}
	return "The simulated rack runs no VM and pulls no image: a job's image is only a name, and\n" +
		"`cosmicac jobs shell` opens a shell on this machine as " + user + ", not in a VM, with no\n" +
		"isolation; `cosmicac jobs ssh` reaches CosmicAC's simulated SSH server (simsshd), which runs\n" +
		"its sessions there too (docs/simulated-rack.md). Each session says so; --sim-host-shells=false\n" +
		"turns them off.\n\n"
}

// SimImage is the image the README and the banner give a job on the
// simulated rack, which takes any name: the web form's default, and the
// name QEMU's catalogue would give Ubuntu 24.04.
const SimImage = "ubuntu-24.04"

// tryJob is the location and image of the banner's example job: ones the
// rack `up` runs has (its first image, for a rack with a catalogue).
func tryJob(cfg platform.Config) (location, image string) {
	switch {
	case cfg.Kube != nil:
		return cfg.Kube.Rack.Location, "quay.io/containerdisks/ubuntu:24.04"
	case cfg.QEMU != nil:
		image = SimImage
		if names := cfg.QEMU.Images.Names(); len(names) > 0 {
			image = names[0]
		}
		return cfg.QEMU.Rack.Location, image
	}
	return cfg.Sim.Location, SimImage
}

// currentUser names the user the platform runs as, whose shells the
// simulated rack's jobs get.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "user " + u.Username
	}
	return "this process's user"
}

func (a *app) upCommand() *cobra.Command {
	cfg := platform.DefaultConfig("")
	var (
		kubeconfig, rackConfig, location, domain string
		verbose                                  bool
		rack                                     = platform.RackSim
		images                                   []string
		qc                                       = qemuworker.Config{Rack: "qemu-1", Location: "local", GPUModel: "VIRTUAL_GPU", Nodes: 1, GPUsPerNode: 2}
		agentBinary                              string
		jobCreates                               int
		hostShells                               = true
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole platform in one process, with a simulated rack",
		Long: "Runs every CosmicAC component in this process (wrk-ork, a rack worker, the app-node and its\n" +
			"HTTP API), each on its own fabric node. With no cluster given, the rack is simulated: jobs move\n" +
			"through the real statuses on simulated GPUs, but no VM runs and no image is pulled, so\n" +
			"`cosmicac jobs shell` opens a shell on this machine as the user running up, not in a VM\n" +
			"(docs/simulated-rack.md). Ctrl-C stops it cleanly; starting it again keeps every job and\n" +
			"reservation.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.JobCreatesPerMinute = jobCreates
			cfg.Sim.NoHostShells = !hostShells
			if jobCreates <= 0 {
				cfg.JobCreatesPerMinute = -1 // no bound
			}
			if kubeconfig != "" && !cmd.Flags().Changed("rack") {
				rack = platform.RackKube // --kubeconfig alone: the older spelling of --rack k8s
			}
			if rack == platform.RackKube && kubeconfig == "" {
				return cli.UsageErrorf("--rack k8s: give the cluster's --kubeconfig")
			}
			if rack != platform.RackKube && kubeconfig != "" {
				return cli.UsageErrorf("--rack %s and --kubeconfig are two racks: give one", rack)
			}
			if kubeconfig != "" {
				rc := k8sworker.DefaultRackConfig()
				if rackConfig != "" {
					b, err := os.ReadFile(rackConfig)
					if err != nil {
						return cli.UsageErrorf("--rack-config: %v", err)
					}
					if rc, err = k8sworker.ParseRackConfig(b); err != nil {
						return cli.UsageErrorf("--rack-config %s: %v", rackConfig, err)
					}
				}
				if location != "" {
					rc.Location = location
				}
				if err := rc.Validate(); err != nil {
					return cli.UsageErrorf("rack config: %v", err)
				}
				cfg.Kube = &platform.KubeConfig{Kubeconfig: kubeconfig, Rack: rc}
			} else if rackConfig != "" || location != "" {
				return cli.UsageErrorf("--rack-config and --location go with --rack k8s (the simulated rack takes --sim-location)")
			}
			if cfg.DataDir == "" {
				cfg.DataDir = defaultDataDir(a.Getenv)
			}
			if cmd.Flags().Changed("database") {
				if err := database.Check(cfg.Database); err != nil {
					return cli.UsageErrorf("--database: %v", err)
				}
			}
			switch rack {
			case platform.RackSim, platform.RackKube:
				if len(images) > 0 || agentBinary != "" {
					return cli.UsageErrorf("--image and --agent-binary go with --rack qemu")
				}
			case platform.RackQEMU:
				q, err := a.qemuRack(cmd.Context(), qc, images, agentBinary, cfg.DataDir)
				if err != nil {
					return err
				}
				cfg.QEMU = q
			default:
				return cli.UsageErrorf("--rack %q: want one of %s", rack, strings.Join(platform.RackKinds(), ", "))
			}
			if rack != platform.RackKube {
				var err error
				if cfg.LlamaServer, cfg.ModelDir, err = a.llamaEngine(cfg.LlamaServer, cfg.ModelDir, cfg.DataDir, cmd.Flags().Changed("llama-server")); err != nil {
					return err
				}
			} else if cmd.Flags().Changed("llama-server") || cmd.Flags().Changed("model-dir") {
				return cli.UsageErrorf("--llama-server and --model-dir go with --rack sim or qemu (a Kubernetes rack's engine is in its image)")
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			cfg.Logger = slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: level}))
			cliID, err := a.LoadCLIIdentity("")
			if err != nil {
				return fmt.Errorf("load this CLI's fabric key: %w", err)
			}
			cfg.OperatorKeys = []fabric.PublicKey{cliID.PublicKey()}
			gcfg := gateway.Config{Listen: cfg.Listen, Domain: domain, HTTP: cfg.HTTP}
			if domain != "" && !cmd.Flags().Changed("listen") {
				gcfg.Listen = "" // :443
			}
			if err := (gateway.Config{Listen: gcfg.Listen, Domain: domain, AppNode: "http://x", Inference: "http://x", Monitor: "http://x"}).Validate(); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			cfg.Front = func(u platform.Upstreams) (platform.Front, error) { return startGateway(gcfg, u, cfg.DataDir) }
			ctx := cmd.Context()
			p, err := platform.Start(ctx, cfg)
			if err != nil {
				return err
			}
			if p.QEMU != nil {
				defer func() { // after p.Close: the worker has left its VMs then
					if n := p.QEMU.LeftRunning(); n > 0 {
						what := "1 VM of rack %s runs on (in %s): `cosmicac up` again adopts it; delete its job to stop it, or give --qemu-stop-vms-on-exit\n"
						if n > 1 {
							what = fmt.Sprint(n) + " VMs of rack %s run on (in %s): `cosmicac up` again adopts them; delete their jobs to stop them, or give --qemu-stop-vms-on-exit\n"
						}
						fmt.Fprintf(a.Stderr, what, cfg.QEMU.Rack.Rack, p.QEMU.Dir())
					}
				}()
			}
			defer p.Close()
			fmt.Fprintf(a.Stdout, "CosmicAC is up.\n\n")
			fmt.Fprintf(a.Stdout, "  web          %s/  (sign in with the admin token, or a user's password)\n", p.URL)
			fmt.Fprintf(a.Stdout, "  API          %s/api/v1  (OpenAPI: %s/api/v1/openapi.json)\n", p.URL, p.URL)
			fmt.Fprintf(a.Stdout, "  gateway log  %s  (Caddy's JSON access log)\n", filepath.Join(cfg.DataDir, gatewayLog))
			if p.MetricsURL != "" {
				fmt.Fprintf(a.Stdout, "  metrics      %s/metrics  (wrk-monitor's: %s/monitor/metrics)\n", p.MetricsURL, p.MetricsURL)
			}
			fmt.Fprintf(a.Stdout, "  admin token  %s\n", p.TokenFile)
			fmt.Fprintf(a.Stdout, "  data         %s\n", cfg.DataDir)
			if cfg.Database != "" {
				fmt.Fprintf(a.Stdout, "  database     %s\n", database.Kind(cfg.Database))
			}
			switch cfg.RackKind() {
			case platform.RackKube:
				k := cfg.Kube
				fmt.Fprintf(a.Stdout, "  rack         %s in %s: the cluster of %s, namespace %s\n\n", k.Rack.Rack, k.Rack.Location, k.Kubeconfig, k.Rack.Namespace)
			case platform.RackQEMU:
				q := cfg.QEMU
				gpus := "declared for placement only: the VMs get no GPU"
				if len(q.Rack.VFIO) > 0 {
					gpus = fmt.Sprintf("passed through: %s", strings.Join(q.Rack.VFIO, ", "))
				}
				fmt.Fprintf(a.Stdout, "  rack         %s: %d nodes × %d %s in %s, real VMs under QEMU (%s); GPUs %s\n",
					q.Rack.Rack, q.Rack.Nodes, q.Rack.GPUsPerNode, q.Rack.GPUModel, q.Rack.Location, p.QEMU.Accel(), gpus)
				fmt.Fprintf(a.Stdout, "  images       %s\n  VMs          %s\n", strings.Join(q.Images.Names(), ", "), q.Rack.Dir)
				a.printLlama(cfg)
			default:
				fmt.Fprintf(a.Stdout, "  rack         %s: %d nodes × %d %s in %s (simulated, %v a step)\n",
					cfg.Sim.Rack, cfg.Sim.Nodes, cfg.Sim.GPUsPerNode, cfg.Sim.GPUModel, cfg.Sim.Location, cfg.Sim.Step)
				a.printLlama(cfg)
				fmt.Fprint(a.Stdout, simulatedRackNote(currentUser(), !cfg.Sim.NoHostShells))
			}
			fmt.Fprintf(a.Stdout, "Fabric (for `cosmicac rpc`; this CLI's key %s is admitted):\n", cliID.PublicKey().Short())
			fmt.Fprintf(a.Stdout, "  wrk-ork         %s@%s\n", p.OrkNode.PublicKey(), p.OrkNode.Addr())
			w := p.WorkerNode()
			fmt.Fprintf(a.Stdout, "  %-15s %s@%s\n", map[string]string{platform.RackSim: "simulated rack", platform.RackQEMU: "wrk-server-qemu",
				platform.RackKube: "wrk-server-k8s"}[cfg.RackKind()], w.PublicKey(), w.Addr())
			fmt.Fprintf(a.Stdout, "  app-node        %s@%s\n", p.AppNode.PublicKey(), p.AppNode.Addr())
			fmt.Fprintf(a.Stdout, "  wrk-monitor     %s@%s\n", p.MonitorNode.PublicKey(), p.MonitorNode.Addr())
			fmt.Fprintf(a.Stdout, "  wrk-directory   %s@%s\n", p.DirectoryNode.PublicKey(), p.DirectoryNode.Addr())
			fmt.Fprintf(a.Stdout, "  proxy-inference %s@%s\n\n", p.ProxyNode.PublicKey(), p.ProxyNode.Addr())
			tryLocation, tryImage := tryJob(cfg)
			fmt.Fprintf(a.Stdout, "Try:\n  cosmicac login --url %s --token-file %s\n  cosmicac jobs create --name hello --gpus 1 --image %s --location %s --wait\n\nCtrl-C to stop.\n",
				p.URL, p.TokenFile, tryImage, tryLocation)
			select {
			case <-ctx.Done():
				fmt.Fprintln(a.Stderr, "stopping…")
				return nil
			case err := <-p.Err():
				return err
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "where state is kept (default $XDG_DATA_HOME/cosmicac or ~/.local/share/cosmicac)")
	f.StringVar(&cfg.Database, "database", "", "the database: a SQLite file, or postgres://… for PostgreSQL (default DATA_DIR/cosmicac.db)")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "the gateway's address: the web interface, /api, /inference and /monitor (with --domain, default :443)")
	f.StringVar(&domain, "domain", "", "serve HTTPS for this domain with a certificate Caddy obtains and renews (ACME), HTTP on :80 redirected to it")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "the address of the Prometheus metrics (/metrics, /monitor/metrics), apart from the API; \"\" serves none")
	f.StringVar(&cfg.FabricHost, "fabric-host", cfg.FabricHost, "the host (an IP) every component's fabric node listens on; with --kubeconfig the VMIs' agents dial it, so it must be reachable from the pods (the default loopback is only good for tests)")
	f.StringVar(&cfg.Sim.Location, "sim-location", cfg.Sim.Location, "the simulated rack's location")
	f.StringVar(&cfg.Sim.Rack, "sim-rack", cfg.Sim.Rack, "the simulated rack's ID")
	f.IntVar(&cfg.Sim.Nodes, "sim-nodes", cfg.Sim.Nodes, "nodes of the simulated rack")
	f.IntVar(&cfg.Sim.GPUsPerNode, "sim-gpus-per-node", cfg.Sim.GPUsPerNode, "GPUs per simulated node")
	f.IntVar(&cfg.Sim.CPUsPerNode, "sim-cpus-per-node", 0, "vCPUs of each simulated node for jobs (default 28 per GPU, a DGX H100's share)")
	f.IntVar(&cfg.Sim.MemoryGiBPerNode, "sim-memory-per-node", 0, "GiB of memory of each simulated node for jobs (default 256 per GPU)")
	f.StringVar(&cfg.Sim.GPUModel, "sim-gpu-model", cfg.Sim.GPUModel, "the simulated GPUs' model")
	f.Var(&cfg.Sim.Step, "sim-step", "time per simulated lifecycle step")
	f.StringVar(&cfg.LlamaServer, "llama-server", "", "the llama-server llama.cpp jobs run with: on the simulated rack a real process on this machine per replica, on the QEMU rack inside each replica's VM (default: hack/build-llama.sh's build, else llama-server on PATH; \"\": the runtime is off)")
	f.StringVar(&cfg.ModelDir, "model-dir", "", "the GGUF models of llama.cpp jobs (the model ORG/NAME is ORG/NAME.gguf there; default DATA_DIR/models, where the test models are installed)")
	f.BoolVar(&hostShells, "sim-host-shells", true, "let the simulated rack's jobs open shells (jobs shell, the web Terminal, jobs ssh), which run on this machine as its user, not in a VM; false refuses them")
	f.Var(&cfg.Ork.Heartbeat, "heartbeat", "how often the ork checks each worker")
	f.IntVar(&jobCreates, "job-creates-per-minute", appnode.DefaultConfig().JobCreatesPerMinute, "the jobs one team may create a minute (a burst of that many, refilled at that rate); 0 or negative: no bound")
	f.StringVar(&cfg.Ork.PlacementPolicy, "placement-policy", "", placementPolicyUsage)
	f.StringVar(&kubeconfig, "kubeconfig", "", "with --rack k8s (which it implies): the cluster's kubeconfig")
	f.StringVar(&rackConfig, "rack-config", "", "with --rack k8s: the rack's YAML config (docs/k8s-worker.md)")
	f.StringVar(&location, "location", "", "with --rack k8s: the rack's location (overrides the rack config)")
	f.StringVar(&cfg.Monitor.Loki.URL, "loki-url", "", "forward job logs to this Loki (e.g. http://127.0.0.1:3100)")
	f.StringVar(&cfg.Monitor.Loki.TenantID, "loki-tenant", "", "the Loki tenant (X-Scope-OrgID)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log each component's events")
	f.StringVar(&rack, "rack", rack, "the rack: sim (simulated, no VM), qemu (real VMs on this machine, docs/qemu-rack.md) or k8s (a cluster with KubeVirt and CDI, --kubeconfig; docs/k8s-worker.md)")
	f.StringArrayVar(&images, "image", nil, "with --rack qemu: an image of the catalogue, NAME=PATH (a qcow2/raw cloud image, or a directory of hack/vm-image.sh); repeatable (default: the images hack/vm-image.sh built)")
	f.StringVar(&agentBinary, "agent-binary", "", "with --rack qemu: the agent put on each VM's agent disk, a static linux/amd64 cosmicac-agent (default: cosmicac-agent beside this binary, else this binary)")
	f.StringVar(&qc.Rack, "qemu-rack", qc.Rack, "with --rack qemu: the rack's ID")
	f.StringVar(&qc.Location, "qemu-location", qc.Location, "with --rack qemu: the rack's location")
	f.StringVar(&qc.GPUModel, "qemu-gpu-model", qc.GPUModel, "with --rack qemu: the GPU model the rack declares")
	f.IntVar(&qc.Nodes, "qemu-nodes", qc.Nodes, "with --rack qemu: nodes the rack declares")
	f.IntVar(&qc.GPUsPerNode, "qemu-gpus-per-node", qc.GPUsPerNode, "with --rack qemu: GPUs per node")
	f.StringSliceVar(&qc.VFIO, "qemu-vfio", nil, "with --rack qemu: host PCI addresses of the GPUs to pass through (nodes × GPUs of them)")
	f.StringVar(&qc.Accel, "qemu-accel", "", "with --rack qemu: kvm or tcg (default: kvm where the host has hardware virtualization)")
	f.IntVar(&qc.MaxCPUs, "qemu-max-cpus", 0, "with --rack qemu: the most vCPUs a VM gets (default 1 under TCG, 4 under KVM)")
	f.BoolVar(&qc.StopVMsOnExit, "qemu-stop-vms-on-exit", false, "with --rack qemu: stop the VMs when up stops (default: they run on, and the next up adopts them)")
	f.StringSliceVar(&qc.Egress, "qemu-egress", nil, "with --rack qemu: the datastores' endpoints the VMs may reach for their volumes, http(s)://HOST[:PORT] (repeatable; default: none, docs/data.md)")
	f.BoolVar(&qc.DebugSSH, "qemu-debug-ssh", false, "with --rack qemu: forward a loopback port to each VM's port 22 (named in the job's log), to debug an image")
	f.IntVar(&qc.MaxMemoryMiB, "qemu-max-memory", 0, "with --rack qemu: the most memory a VM gets, MiB (default 512 under TCG, 8192 under KVM)")
	f.IntVar(&qc.CPUsPerNode, "qemu-cpus-per-node", 0, "with --rack qemu: vCPUs each node declares for placement (default 8 per GPU + 2)")
	f.IntVar(&qc.MemoryGiBPerNode, "qemu-memory-per-node", 0, "with --rack qemu: GiB each node declares for placement (default 64 per GPU + 2)")
	return cmd
}

// gatewayLog is the file in the data directory that takes the gateway's
// logs (Caddy's JSON access log).
const gatewayLog = "gateway.log"

// upGateway is the embedded Caddy in front of `up`'s components, and the
// log file it writes.
type upGateway struct {
	*gateway.Gateway
	log *os.File
}

func (g upGateway) Close() error {
	err := g.Gateway.Close()
	g.log.Close()
	return err
}

// startGateway starts Caddy routing to u, logging to the data directory's
// gateway.log.
func startGateway(c gateway.Config, u platform.Upstreams, dataDir string) (platform.Front, error) {
	c.AppNode, c.Inference, c.Monitor, c.UI = u.API, u.Inference, u.Monitor, u.WebUI
	f, err := os.OpenFile(filepath.Join(dataDir, gatewayLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	g, err := gateway.Start(c, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return upGateway{Gateway: g, log: f}, nil
}

// llamaEngine finds the rack's llama-server (server as given; else
// hack/build-llama.sh's build in the cache, the newest; else llama-server
// on PATH; else none: the llama.cpp runtime is off) and installs the test
// models into its model directory (modelDir, default DATA_DIR/models).
func (a *app) llamaEngine(server, modelDir, dataDir string, given bool) (string, string, error) {
	if modelDir == "" {
		modelDir = filepath.Join(dataDir, "models")
	}
	if given {
		if server == "" {
			return "", modelDir, nil // --llama-server "": off
		}
		p, err := exec.LookPath(server)
		if err != nil {
			return "", "", cli.UsageErrorf("--llama-server: %v", err)
		}
		server = p
	} else {
		builds, _ := filepath.Glob(filepath.Join(a.cacheDir(), "llama", "*", "bin", "llama-server"))
		slices.Sort(builds)
		if len(builds) > 0 {
			server = builds[len(builds)-1]
		} else if p, err := exec.LookPath("llama-server"); err == nil {
			server = p
		} else {
			return "", modelDir, nil
		}
	}
	if _, err := testmodel.Install(modelDir); err != nil {
		return "", "", fmt.Errorf("install the test models: %w", err)
	}
	return server, modelDir, nil
}

// printLlama says in up's banner whether the rack serves llama.cpp, with
// which engine and models.
func (a *app) printLlama(cfg platform.Config) {
	if cfg.LlamaServer != "" {
		fmt.Fprintf(a.Stdout, "  llama.cpp    %s, models in %s (test models %s, %s)\n\n", cfg.LlamaServer, cfg.ModelDir, testmodel.ChatModel, testmodel.EmbedModel)
		return
	}
	fmt.Fprintf(a.Stdout, "  llama.cpp    off: no llama-server (build it with hack/build-llama.sh, or give --llama-server)\n\n")
}
