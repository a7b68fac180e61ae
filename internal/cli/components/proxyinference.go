package components

import (
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/metrics"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
)

func init() { register((*app).proxyInferenceCommand) }

// ---- proxy-inference

type proxyInferenceFileConfig struct {
	componentFlags `json:",inline"`
	Ork            string `json:"ork"`
	// Directories are the agents' directories (wrk-directory), where the
	// inference agents announce their replicas.
	Directories []string `json:"directories"`
	// AppNode answers API key lookups (inference.apiKeyByHash).
	AppNode    string            `json:"appNode"`
	HTTPListen string            `json:"httpListen"`
	Proxy      inferproxy.Config `json:"proxy"`
}

// proxyInferenceCommand is proxy-inference as its own process: the
// OpenAI-compatible /inference/v1 on its own HTTP address, with the model
// list from the ork (listJobs), the replicas from the agents' directories
// and the API keys from the app-node (inference.apiKeyByHash): it opens no
// database.
func (a *app) proxyInferenceCommand() *cobra.Command {
	cfg := proxyInferenceFileConfig{HTTPListen: "0.0.0.0:8083"}
	var configFile string
	cmd := &cobra.Command{
		Use:   "proxy-inference",
		Short: "Run cosmicac-proxy-inference: the OpenAI-compatible /inference/v1 of managed-inference jobs",
		Long: "Serves /inference/v1 (and /inference/health) on --http-listen. It reads the managed-inference\n" +
			"jobs from the ork, finds their replicas in the agents' directories (--directory) and checks\n" +
			"API keys with the app-node (--app-node); each must be given this proxy's key\n" +
			"(--proxy-inference-key). The inference agents dial it (name it to the rack workers as their\n" +
			"agents' proxy-inference peer): it admits an agent's key once the ork binds it to a job, and\n" +
			"routes a job's requests only to the keys bound as that job's replicas' heads.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			var dialled peers
			orkKey, err := dialled.one("ork", trust.Ork, cfg.Ork)
			if err != nil {
				return err
			}
			appKey, err := dialled.one("app-node", trust.AppNode, cfg.AppNode)
			if err != nil {
				return err
			}
			if len(cfg.Directories) == 0 {
				return cli.UsageErrorf("--directory KEY@HOST:PORT is required (the agents' directory)")
			}
			log := a.componentLogger(cfg.Verbose)
			dirs, err := dialled.add("directory", trust.Directory, cfg.Directories...)
			if err != nil {
				return err
			}
			n, ring, err := cfg.dialNode("proxy-inference", dialled, log)
			if err != nil {
				return err
			}
			defer cfg.unlock() // after the node: the data dir is free once all is closed
			defer n.Close()
			pcfg := cfg.Proxy
			pcfg.HTTP = cfg.HTTP
			if err := pcfg.Validate(); err != nil {
				return cli.UsageErrorf("proxy: %v", err)
			}
			if pcfg.KeyTTL == 0 {
				// With FabricKeys' 0.5 s, a revoked key stops working within
				// 1 s, as with `cosmicac up`.
				pcfg.KeyTTL = config.Duration(500 * time.Millisecond)
			}
			p, err := inferproxy.New(pcfg, inferproxy.Deps{Node: n, Directories: dirs, Catalog: inferproxy.OrkCatalog{Ork: orkapi.NewClient(n, orkKey)}, Load: orkapi.NewClient(n, orkKey),
				Keys: inferproxy.NewFabricKeys(n, appKey, 500*time.Millisecond), Usage: inferproxy.FabricUsage{Node: n, AppNode: appKey},
				Agents: ring, Log: log.With("component", "proxy-inference")})
			if err != nil {
				return cli.UsageErrorf("%v", err)
			}
			ln, err := net.Listen("tcp", cfg.HTTPListen)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			a.printNode(n)
			fmt.Fprintf(a.Stdout, "inference http://%s%s\n", ln.Addr(), inferproxy.Prefix)
			serveMetrics, err := cfg.listenMetrics(metrics.NewRegistry(p.Collector()))
			if err != nil {
				return err
			}
			g, ctx := errgroup.WithContext(cmd.Context())
			g.Go(func() error {
				ring.Follow(ctx, orkapi.NewClient(n, orkKey), log.With("component", "trust"))
				return nil
			})
			g.Go(func() error { return serveMetrics(ctx) })
			g.Go(func() error { return p.Run(ctx, ln) })
			return waitAll(g)
		},
	}
	cfg.bind(cmd.Flags(), "0.0.0.0:7425", trust.Proxy, trust.Ork, trust.AppNode, trust.Directory)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Ork, "ork", "", "the ork, whose job list names the models: "+orkAddrs)
	f.StringSliceVar(&cfg.Directories, "directory", nil, "the agents' directory (wrk-directory), KEY@HOST:PORT (repeatable)")
	f.StringVar(&cfg.AppNode, "app-node", "", "the app-node, which checks API keys: KEY@HOST:PORT")
	f.StringVar(&cfg.HTTPListen, "http-listen", cfg.HTTPListen, "the address of /inference/v1")
	f.IntVar(&cfg.Proxy.MaxConcurrentPerKey, "max-concurrent-per-key", 0, "requests in flight per API key (0: 64; negative: no limit)")
	f.IntVar(&cfg.Proxy.RequestsPerMinute, "requests-per-minute", 0, "requests per minute per API key (0: 600; negative: no limit)")
	return cmd
}
