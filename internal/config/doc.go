// Package config holds the types that CosmicAC's config files share. So far
// that is Duration: a time.Duration written as a Go duration string ("30s",
// "1m30s") instead of a count of nanoseconds.
//
// Any package may import it; it imports only the standard library. The
// components keep time.Duration in their Go APIs: the file formats (the
// `--config` structs of internal/cli/components) carry Duration and convert where the
// component is built.
package config
