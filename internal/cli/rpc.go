package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

func init() { Register((*App).rpcCommand) }

// cliIdentityPath is where the CLI keeps its own fabric key.
func cliIdentityPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "cosmicac", fabric.IdentityFile), nil
}

func (a *App) rpcCommand() *cobra.Command {
	var (
		peer, method, data, keyFile, transport string
		timeout                                time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rpc --peer KEY[@HOST:PORT] --method M [--data JSON]",
		Short: "Call any method on any component over the fabric and print the JSON reply",
		Long: "Calls METHOD on the component holding KEY and prints its JSON reply. The CLI's own key\n" +
			"(--key-file, default in the user's config directory, created on first use) must be one of the\n" +
			"component's operators (--operator KEY; `cosmicac up` admits it). On refusal or error it prints\n" +
			"the error and exits 1.",
		Example: "  cosmicac rpc --peer 6b1e…@127.0.0.1:7420 --method ping\n" +
			"  cosmicac rpc --peer $SIM@127.0.0.1:7423 --method simCrash --data '{\"jobId\":\"…\",\"replica\":0}'",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if peer == "" || method == "" {
				return UsageErrorf("--peer and --method are required")
			}
			key, addrs, err := fabric.ParsePeer(peer)
			if err != nil {
				return UsageErrorf("--peer: %v", err)
			}
			if len(addrs) == 0 {
				return UsageErrorf("--peer: give an address, KEY@HOST:PORT")
			}
			var params json.RawMessage
			if data != "" {
				if !json.Valid([]byte(data)) {
					return UsageErrorf("--data is not valid JSON")
				}
				params = json.RawMessage(data)
			}
			id, err := a.LoadCLIIdentity(keyFile)
			if err != nil {
				return err
			}
			cfg := fabric.Config{Component: "cli", Identity: id, Policy: fabric.NewAllowList(key)}
			if transport != "" {
				cfg.Transports = []string{transport}
			}
			n, err := fabric.New(cfg)
			if err != nil {
				return err
			}
			defer n.Close()
			n.AddAddrs(key, addrs...)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := n.CallRaw(ctx, key, method, params)
			if err != nil {
				var fe *fabric.Error
				if errors.As(err, &fe) && len(fe.Details) > 0 {
					return fmt.Errorf("%w\ndetails: %s", err, fe.Details)
				}
				if errors.Is(err, fabric.ErrRefused) {
					return fmt.Errorf("%w\nhint: give the component this CLI's key as an operator: --operator %s", err, id.PublicKey())
				}
				return err
			}
			var out bytes.Buffer
			if len(res) == 0 {
				res = json.RawMessage("null")
			}
			if err := json.Indent(&out, res, "", "  "); err != nil {
				out.Reset()
				out.Write(res)
			}
			fmt.Fprintln(a.Stdout, out.String())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&peer, "peer", "", "the component: KEY@HOST:PORT")
	f.StringVar(&method, "method", "", "the method to call (e.g. ping)")
	f.StringVar(&data, "data", "", "the params, as JSON")
	f.StringVar(&keyFile, "key-file", "", "the CLI's key file (default: ~/.config/cosmicac/identity.key)")
	f.StringVar(&transport, "transport", "", "force a transport: quic or tcp (default: quic, falling back to tcp)")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the reply")
	return cmd
}

// LoadCLIIdentity reads the CLI's key, creating the default one on first use.
func (a *App) LoadCLIIdentity(keyFile string) (*fabric.Identity, error) {
	if keyFile != "" {
		return fabric.ReadIdentityFile(keyFile)
	}
	path, err := cliIdentityPath()
	if err != nil {
		return nil, err
	}
	id, err := fabric.LoadOrCreateIdentity(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	return id, nil
}

// ParsePeerFlag parses a KEY@HOST:PORT flag value.
func ParsePeerFlag(name, v string) (fabric.PublicKey, []string, error) {
	if v == "" {
		return fabric.PublicKey{}, nil, UsageErrorf("--%s KEY@HOST:PORT is required", name)
	}
	k, addrs, err := fabric.ParsePeer(v)
	if err != nil {
		return k, nil, UsageErrorf("--%s: %v", name, err)
	}
	if len(addrs) == 0 {
		return k, nil, UsageErrorf("--%s: give an address, KEY@HOST:PORT", name)
	}
	return k, addrs, nil
}
