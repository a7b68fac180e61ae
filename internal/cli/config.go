package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// DefaultURL is where the CLI looks for CosmicAC when nothing says otherwise:
// the address `cosmicac up` listens on by default.
const DefaultURL = "http://127.0.0.1:8080"

// Environment variables the user commands read.
const (
	envURL    = "COSMICAC_URL"
	envToken  = "COSMICAC_TOKEN"
	envTeam   = "COSMICAC_TEAM"
	envConfig = "COSMICAC_CONFIG" // the config file, instead of the user's config dir
)

// clientConfig is where the API is and how to authenticate to it. It is
// also the format of the file `cosmicac login` writes.
type clientConfig struct {
	URL   string `json:"url,omitempty"`
	Token string `json:"token,omitempty"`
	// Team is the active team `cosmicac teams use` chose.
	Team string `json:"team,omitempty"`
}

// connFlags are the --url and --token flags of the commands that call the
// API; set ones win over the environment and the config file.
type connFlags struct {
	url, token, team string
}

func (f *connFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "url", "", "CosmicAC API URL (default $"+envURL+", the login config, or "+DefaultURL+")")
	cmd.PersistentFlags().StringVar(&f.token, "token", "", "API token (default $"+envToken+" or the login config)")
	cmd.PersistentFlags().StringVar(&f.team, "team", "", "the team to act in (default $"+envTeam+", the one teams use saved, or your only team)")
}

// configPath is the file `cosmicac login` writes:
// $COSMICAC_CONFIG, else USER_CONFIG_DIR/cosmicac/config.yaml.
func (a *App) configPath() (string, error) {
	if p := a.Getenv(envConfig); p != "" {
		return p, nil
	}
	dir, err := a.userConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "cosmicac", "config.yaml"), nil
}

// userConfigDir is os.UserConfigDir read through the app's getenv, so that
// tests never touch the real home directory.
func (a *App) userConfigDir() (string, error) {
	var dir string
	switch runtime.GOOS {
	case "windows":
		dir = a.Getenv("AppData")
	case "darwin", "ios":
		if h := a.Getenv("HOME"); h != "" {
			dir = filepath.Join(h, "Library", "Application Support")
		}
	case "plan9":
		if h := a.Getenv("home"); h != "" {
			dir = filepath.Join(h, "lib")
		}
	default:
		dir = a.Getenv("XDG_CONFIG_HOME")
		if dir == "" || !filepath.IsAbs(dir) {
			dir = ""
			if h := a.Getenv("HOME"); h != "" {
				dir = filepath.Join(h, ".config")
			}
		}
	}
	if dir == "" {
		return "", errors.New("cannot find the user's config directory (is $HOME set?)")
	}
	return dir, nil
}

// readConfigFile reads the login config; a missing file is an empty config.
func readConfigFile(path string) (clientConfig, error) {
	var c clientConfig
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return c, fmt.Errorf("read config %s: %w", path, err)
	}
	return c, nil
}

// writeConfigFile writes c to path with mode 0600, creating the directory
// (0700). It replaces the file atomically.
func writeConfigFile(path string, c clientConfig) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// clientConfig resolves the URL and the token, each on its own, from (first
// wins) the flags, the environment, the login config file, and the default
// URL. A config file that cannot be found or read is only an error when it
// is needed, that is when neither flags nor environment give a token.
func (a *App) clientConfig(f *connFlags) (clientConfig, error) {
	c := clientConfig{URL: f.url, Token: f.token, Team: f.team}
	if c.URL == "" {
		c.URL = a.Getenv(envURL)
	}
	if c.Token == "" {
		c.Token = a.Getenv(envToken)
	}
	if c.Team == "" {
		c.Team = a.Getenv(envTeam)
	}
	if c.URL == "" || c.Token == "" || c.Team == "" {
		if path, err := a.configPath(); err == nil {
			fc, err := readConfigFile(path)
			if err != nil {
				return c, err
			}
			if c.URL == "" {
				c.URL = fc.URL
			}
			if c.Token == "" {
				c.Token = fc.Token
			}
			if c.Team == "" && f.token == "" && a.Getenv(envToken) == "" {
				// The saved team goes with the saved token only.
				c.Team = fc.Team
			}
		}
	}
	if c.URL == "" {
		c.URL = DefaultURL
	}
	c.URL = strings.TrimRight(c.URL, "/")
	if err := checkAPIURL(c.URL); err != nil {
		return c, err
	}
	return c, nil
}

// checkAPIURL refuses a URL the client could not use, with exit 2: one
// without a scheme (127.0.0.1:8080) is not guessed at, since guessing
// http would send the token in the clear to a host meant for https.
func checkAPIURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return UsageErrorf("the API URL %q must be http:// or https:// and a host, e.g. http://%s", raw, strings.TrimPrefix(raw, "//"))
	}
	return nil
}
