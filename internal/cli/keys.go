package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

func init() { Register((*App).keysCommand) }

func (a *App) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Show or generate fabric identity keys",
		Long: "Every CosmicAC component has an ed25519 key pair in its data directory; its public key is its\n" +
			"address on the fabric and what other components put on their allow-lists.",
	}
	var dataDir, keyFile string
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the public key of a data directory or key file (64 hex characters)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := keyFile
			switch {
			case path == "" && dataDir == "":
				return UsageErrorf("give --data-dir DIR or --key-file FILE")
			case path == "":
				path = filepath.Join(dataDir, fabric.IdentityFile)
			}
			id, err := fabric.ReadIdentityFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, id.PublicKey())
			return nil
		},
	}
	show.Flags().StringVar(&dataDir, "data-dir", "", "a component's data directory")
	show.Flags().StringVar(&keyFile, "key-file", "", "a key file")

	var out string
	gen := &cobra.Command{
		Use:   "generate",
		Short: "Make a new key pair in FILE (mode 0600) and print its public key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return UsageErrorf("give --out FILE")
			}
			id, err := fabric.GenerateIdentity()
			if err != nil {
				return err
			}
			if err := fabric.WriteIdentityFile(out, id); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("%s exists; refusing to overwrite a key", out)
				}
				return err
			}
			fmt.Fprintln(a.Stdout, id.PublicKey())
			return nil
		},
	}
	gen.Flags().StringVar(&out, "out", "", "where to write the private key (refuses to overwrite)")
	cmd.AddCommand(show, gen)
	return cmd
}
