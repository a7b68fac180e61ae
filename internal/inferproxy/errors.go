package inferproxy

import (
	"errors"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

func isNotFound(err error) bool { return errors.Is(err, cosmic.ErrNotFound) }
