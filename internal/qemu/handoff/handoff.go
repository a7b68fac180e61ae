// Package handoff is the program a QEMU rack's VM runs for each guest
// connection to a forwarded port (`cosmicac qemu-relay SOCKET GUEST-ADDR`,
// libslirp's guestfwd=…-cmd:): it passes its standard input, the guest's
// socket, to the worker on the VM's relay socket (internal/qemu's relays)
// and exits, and the worker relays the connection.
//
// libslirp starts one such process for each guest connection, so its
// start must cost little: the whole binary's initialization takes about
// 200 ms and 28 MiB of its own. This package runs the command from its
// init and exits before the rest of the binary initializes: Go initializes
// a package once its imports are, in import path order among those ready
// (the specification's "Package initialization"), and this one imports
// only a few low-level packages of the standard library. It imports no
// net, so it speaks to the socket with system calls.
//
// Importers: internal/cli/components (blank, for the init), internal/qemu's tests.
package handoff

import (
	"errors"
	"os"
	"strconv"
	"syscall"
)

// Command is the CLI's subcommand.
const Command = "qemu-relay"

func init() {
	if len(os.Args) != 4 || os.Args[1] != Command {
		return // the CLI's own command says what is wrong
	}
	if err := Send(os.Args[2], os.Args[3], 0); err != nil {
		os.Stderr.WriteString("error: qemu relay: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// Send passes fd (a guest's connection) to the unix socket at path, with
// guest, the forward's guest address, as the message. It gives up after
// 5 seconds.
func Send(path, guest string, fd int) error {
	s, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(s)
	tv := syscall.Timeval{Sec: 5} // bounds connect (a full backlog) and sendmsg
	if err := syscall.SetsockoptTimeval(s, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		return err
	}
	err = WithShortPath(path, func(p string) error {
		return syscall.Connect(s, &syscall.SockaddrUnix{Name: p})
	})
	if err != nil {
		return errors.New("connect " + path + ": " + err.Error())
	}
	if err := syscall.Sendmsg(s, []byte(guest), syscall.UnixRights(fd), nil, 0); err != nil {
		return errors.New("send to " + path + ": " + err.Error())
	}
	return nil
}

// WithShortPath calls f with a name for the unix socket at path that fits
// a socket address (108 bytes): path itself, or for a longer one its
// directory named through /proc/self/fd.
func WithShortPath(path string, f func(string) error) error {
	if len(path) < 100 {
		return f(path)
	}
	dir, base := ".", path
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			dir, base = path[:max(i, 1)], path[i+1:]
			break
		}
	}
	d, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(d)
	return f("/proc/self/fd/" + strconv.Itoa(d) + "/" + base)
}
