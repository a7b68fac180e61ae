package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func termios(f *os.File) (*unix.Termios, error) {
	return unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
}

func newFakeShellless(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}
