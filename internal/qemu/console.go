package qemu

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"
)

// MaxConsoleLine is the longest console line FollowConsole hands on whole:
// a longer one is cut there (the rest comes as the next line).
const MaxConsoleLine = 4096

// FollowConsole calls line with each line of the serial console of the VM
// in dir (ConsoleFile, which Start makes anew for each boot), in order,
// from the boot's first, reading what QEMU wrote every poll, until line
// returns false or done is closed; then it reads once more, so that the
// lines written before the VM ended are not lost, and hands on a last line
// that had no newline. Line ends (\r\n, \r\r\n) are taken off. It returns
// when it stops: run it in a goroutine of its own, done being the VM's
// Done.
func FollowConsole(done <-chan struct{}, dir string, poll time.Duration, line func(string) bool) {
	path := filepath.Join(dir, ConsoleFile)
	var (
		f       *os.File
		off     int64
		partial []byte
		buf     = make([]byte, 32<<10)
	)
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	// read hands on the complete lines written since the last read, false
	// when line said to stop.
	read := func() bool {
		if f == nil {
			var err error
			if f, err = os.Open(path); err != nil {
				return true // QEMU has not made it yet
			}
		}
		if st, err := f.Stat(); err == nil && st.Size() < off {
			off, partial = 0, nil // truncated: a new QEMU opened it
		}
		for {
			n, err := f.ReadAt(buf, off)
			off += int64(n)
			rest := append(partial, buf[:n]...)
			for {
				i := bytes.IndexByte(rest, '\n')
				if i < 0 && len(rest) < MaxConsoleLine {
					break
				}
				cut := i
				if i < 0 || i > MaxConsoleLine {
					cut, i = MaxConsoleLine, MaxConsoleLine-1
				}
				if !line(string(bytes.TrimRight(rest[:cut], "\r"))) {
					return false
				}
				rest = rest[i+1:]
			}
			partial = append(partial[:0:0], rest...)
			if n < len(buf) || errors.Is(err, io.EOF) || err != nil {
				return true
			}
		}
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if !read() {
			return
		}
		select {
		case <-done:
			if read() && len(partial) > 0 {
				line(string(bytes.TrimRight(partial, "\r")))
			}
			return
		case <-t.C:
		}
	}
}
