// Package version holds the build's version string. It is set at link time:
//
//	go build -ldflags "-X github.com/cosmicac/cosmicac/internal/version.Version=v0.1.0"
//
// Any package may import it.
package version

// Version is the CosmicAC release; "dev" for builds without link-time stamping.
var Version = "dev"
