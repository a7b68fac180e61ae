package components

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/k8sworker"
	"github.com/cosmicac/cosmicac/internal/trust"
)

func init() {
	register((*app).wrkServerK8sCommand)
}

// ---- wrk-server-k8s-nvidia

type k8sFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string `json:"ork"`
	Monitor        string `json:"monitor,omitempty"`
	Kubeconfig     string `json:"kubeconfig,omitempty"`
	RackConfig     string `json:"rackConfig,omitempty"`
	Rack           string `json:"rack,omitempty"`
	Location       string `json:"location,omitempty"`
	// The agents' peers (docs/k8s-worker.md, "Agents"): KEY@HOST:PORT each,
	// reachable from the pod network.
	Directory      []string `json:"directory,omitempty"`
	AppNode        []string `json:"appNode,omitempty"`
	ProxyInference []string `json:"proxyInference,omitempty"`
	// AgentAddr is where the VMIs' agents reach this worker (default: the
	// address it listens on).
	AgentAddr []string `json:"agentAddr,omitempty"`
}

// agentPeers turns the --directory, --app-node and --monitor flags into the
// peers of the agents' bootstrap.
func (c k8sFileConfig) agentPeers() ([]k8sworker.Peer, error) {
	var out []k8sworker.Peer
	add := func(flag, role string, vals ...string) error {
		for _, v := range vals {
			k, addrs, err := cli.ParsePeerFlag(flag, v)
			if err != nil {
				return err
			}
			out = append(out, k8sworker.Peer{Role: role, Key: k.String(), Addrs: addrs})
		}
		return nil
	}
	if err := add("directory", agentapi.RoleDirectory, c.Directory...); err != nil {
		return nil, err
	}
	if err := add("app-node", agentapi.RoleAppNode, c.AppNode...); err != nil {
		return nil, err
	}
	if err := add("proxy-inference", agentapi.RoleProxy, c.ProxyInference...); err != nil {
		return nil, err
	}
	if c.Monitor != "" {
		if err := add("monitor", agentapi.RoleMonitor, c.Monitor); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// loadRackConfig reads the rack config file (or takes the defaults), puts
// the --rack and --location overrides over it and validates it. Every
// problem is a usage error (exit 2), naming the file and the field.
func loadRackConfig(path, rack, location string) (k8sworker.RackConfig, error) {
	cfg := k8sworker.DefaultRackConfig()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, cli.UsageErrorf("--rack-config: %v", err)
		}
		if cfg, err = k8sworker.ParseRackConfig(data); err != nil {
			return cfg, cli.UsageErrorf("--rack-config %s: %v", path, err)
		}
	}
	if rack != "" {
		cfg.Rack = rack
	}
	if location != "" {
		cfg.Location = location
	}
	if err := cfg.Validate(); err != nil {
		return cfg, cli.UsageErrorf("rack config: %v", err)
	}
	return cfg, nil
}

// loadKubeconfig reads a kubeconfig file; without one, the in-cluster
// config (the worker running as a pod).
func loadKubeconfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, cli.UsageErrorf("--kubeconfig FILE is required outside a cluster (%v)", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, cli.UsageErrorf("--kubeconfig %s: %v", path, err)
	}
	return c, nil
}

func (a *app) wrkServerK8sCommand() *cobra.Command {
	var cfg k8sFileConfig
	var configFile string
	cmd := &cobra.Command{
		Use:   "wrk-server-k8s-nvidia",
		Short: "Run a rack worker that runs jobs as KubeVirt GPU VMs on a Kubernetes cluster",
		Long: "Runs cosmicac-wrk-server-k8s-nvidia: the rack's jobs become KubeVirt VMIs with GPUs passed\n" +
			"through, on the cluster --kubeconfig points at (in a pod: the in-cluster config). The rack\n" +
			"config (--rack-config, YAML; see docs/k8s-worker.md) names the rack, its location, GPU\n" +
			"resources, namespace, storage class and networks; a bad one is refused at start (exit 2).\n" +
			"Register it with `cosmicac racks register --worker-key KEY --worker-addr HOST:PORT`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			rack, err := loadRackConfig(cfg.RackConfig, cfg.Rack, cfg.Location)
			if err != nil {
				return err
			}
			peers, err := cfg.agentPeers()
			if err != nil {
				return err
			}
			rack.Peers = append(rack.Peers, peers...)
			if err := rack.Validate(); err != nil {
				return cli.UsageErrorf("rack config: %v", err)
			}
			restCfg, err := loadKubeconfig(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			log := a.componentLogger(cfg.Verbose)
			ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
			klog.SetSlogLogger(log) // client-go logs through klog: into the component's log too
			wn, err := cfg.workerNode("wrk-server-k8s-nvidia", rack.Rack, cfg.Ork, cfg.Monitor, log)
			if err != nil {
				return err
			}
			w, err := k8sworker.New(rack, restCfg, wn.reporter, wn.logs, log.With("component", "wrk-server-k8s-nvidia"))
			if err != nil {
				wn.close()
				return cli.UsageErrorf("%v", err)
			}
			// The worker binds its agents' keys in the keyring as it issues them.
			if err := w.ServeAgents(k8sworker.AgentOptions{Node: wn.node, Keys: wn.ring, Addrs: cfg.AgentAddr}); err != nil {
				wn.close()
				return err
			}
			a.printNode(wn.node)
			fmt.Fprintf(a.Stdout, "rack %s (%s) on %s, namespace %s\n", rack.Rack, rack.Location, restCfg.Host, rack.Namespace)
			return wn.run(cmd.Context(), w, func(ctx context.Context) error {
				if w.WaitSynced(ctx) == nil {
					fmt.Fprintf(a.Stdout, "synced rack %s with the apiserver\n", rack.Rack)
				}
				return nil
			})
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7424", trust.Worker, trust.Ork, trust.Monitor)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork: "+orkAddrs)
	f.StringVar(&cfg.Monitor, "monitor", "", "wrk-monitor, to send job log records to (also given to the VMIs' agents): KEY@HOST:PORT")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "the cluster's kubeconfig (default: the in-cluster config)")
	f.StringVar(&cfg.RackConfig, "rack-config", "", "the rack config, YAML (default: the defaults of docs/k8s-worker.md)")
	f.StringVar(&cfg.Rack, "rack", "", "the rack's ID (overrides the rack config's)")
	f.StringVar(&cfg.Location, "location", "", "the rack's location (overrides the rack config's)")
	f.StringSliceVar(&cfg.Directory, "directory", nil, "the agents' directory, where the VMIs' agents announce themselves: KEY@HOST:PORT reachable from the pods (repeatable)")
	f.StringSliceVar(&cfg.AppNode, "app-node", nil, "an app-node that relays shells to the VMIs' agents: KEY@HOST:PORT reachable from the pods (repeatable)")
	f.StringSliceVar(&cfg.ProxyInference, "proxy-inference", nil, "a proxy-inference the VMIs' inference agents serve: KEY@HOST:PORT reachable from the pods (repeatable)")
	f.StringSliceVar(&cfg.AgentAddr, "agent-addr", nil, "HOST:PORT at which the VMIs' agents reach this worker (default: --listen's address, which must then be routable from the pods)")
	return cmd
}
