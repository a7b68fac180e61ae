package components

import (
	"log/slog"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/datadir"
)

// lockDataDir makes the component's data directory private and locks it
// (internal/datadir) before anything touches it: a second process on the
// same directory fails here, naming the first. The lock is held until
// unlock (or the process's end).
func (c *componentFlags) lockDataDir(component string, log *slog.Logger) error {
	if c.DataDir == "" {
		return cli.UsageErrorf("--data-dir is required")
	}
	l, err := datadir.Acquire(c.DataDir, component, log)
	if err != nil {
		return err
	}
	c.lock = l
	return nil
}

// lockAddr names the address the component serves on in its data dir's
// lock, for the message of a refused second process.
func (c *componentFlags) lockAddr(addr string) { _ = c.lock.SetAddr(addr) }

// unlock releases the data directory's lock, if held.
func (c *componentFlags) unlock() {
	c.lock.Close()
	c.lock = nil
}

// unlockIf unlocks if *err is set (deferred by a constructor that locked).
func (c *componentFlags) unlockIf(err *error) {
	if *err != nil {
		c.unlock()
	}
}
