package fabric

import "github.com/cosmicac/cosmicac/internal/version"

func versionString() string { return version.Version }
