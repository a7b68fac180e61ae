package components

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/gateway"
)

func init() { register((*app).gatewayCommand) }

// ---- gateway

type gatewayFileConfig struct {
	gateway.Config
}

// validateFile checks what only a config file sets: the http limits.
func (c *gatewayFileConfig) validateFile() error {
	if err := c.HTTP.Validate(); err != nil {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// gatewayCommand is the gateway as its own process, for a split
// deployment: the embedded Caddy in front of the standalone app-node,
// proxy-inference and wrk-monitor. It holds no key and opens no data
// directory: it speaks only HTTP to the components.
func (a *app) gatewayCommand() *cobra.Command {
	def := gateway.DefaultConfig()
	cfg := gatewayFileConfig{Config: def}
	cfg.Listen = ""
	var configFile string
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the gateway: Caddy routing /api, /inference, /monitor and the web interface",
		Long: "Runs Caddy, embedded, on --listen: /api to the app-node (--app-node), /inference to\n" +
			"proxy-inference (--inference), /monitor to wrk-monitor (--monitor) and every other path to\n" +
			"the web interface (--ui; by default the app-node, which serves it). Plain HTTP on 127.0.0.1:8080 by\n" +
			"default; with --domain, HTTPS on :443 with a certificate Caddy obtains and renews (ACME) and\n" +
			"HTTP on :80 redirected to it. Streams (server-sent events, WebSocket, uploads) pass\n" +
			"unbuffered. Caddy's JSON logs (an access log line per request) go to standard error.\n" +
			"docs/gateway.md has the routes and deploy/Caddyfile the same for an operator's own Caddy.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loadConfigFile(cmd, configFile, &cfg); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			g, err := gateway.Start(cfg.Config, a.Stderr)
			if err != nil {
				return err
			}
			scheme := "http"
			if cfg.Domain != "" {
				scheme = "https"
			}
			fmt.Fprintf(a.Stdout, "gateway %s://%s\n", scheme, g.Addr())
			<-cmd.Context().Done()
			return g.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file (flags override it)")
	f.StringVar(&cfg.Listen, "listen", "", "the address to serve on (default "+gateway.DefaultListen+"; with --domain, :443)")
	f.StringVar(&cfg.Domain, "domain", "", "the site's domain: serve HTTPS with an ACME certificate, only for this host")
	f.StringVar(&cfg.AppNode, "app-node", def.AppNode, "the app-node's API, `URL` (scheme://host:port): /api")
	f.StringVar(&cfg.Inference, "inference", def.Inference, "proxy-inference's HTTP server, `URL`: /inference")
	f.StringVar(&cfg.Monitor, "monitor", def.Monitor, "wrk-monitor's HTTP server, `URL`: /monitor")
	f.StringVar(&cfg.UI, "ui", "", "every other path, `URL` (default: --app-node)")
	f.StringVar(&cfg.Storage, "storage", "", "the `DIR` of Caddy's certificates (default: Caddy's, $XDG_DATA_HOME/caddy)")
	return cmd
}
