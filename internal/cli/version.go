package cli

import (
	"runtime"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/version"
)

func init() { Register((*App).versionCommand) }

// versionInfo is what cosmicac version -o json|yaml prints.
type versionInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func (a *App) versionCommand() *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, the Go release it was built with and its platform",
		Long: "Print this binary's version: the one stamped at link time (-ldflags -X), else the module's\n" +
			"version (go install …@v0.1.0), else dev and the VCS revision it was built from, with\n" +
			"\"modified\" if the work tree had uncommitted changes. --version prints the same.",
		Example: "  cosmicac version\n  cosmicac --version\n  cosmicac version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.printResult(&out, versionInfo{Version: version.Version, Revision: version.Revision, Modified: version.Modified,
				GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}, "%s", version.Long())
		},
	}, &out)
}
