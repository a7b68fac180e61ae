// Package shellproto is the wire format of a shell session on the fabric:
// the parameters of the `shell.open` stream, the agent's reply, and the
// framed messages both sides exchange on the stream once it is accepted.
//
// A frame is
//
//	type:byte length:uint32be payload[length]
//
// with length at most MaxPayload. Client to agent: Stdin, StdinEOF, Resize,
// Signal. Agent to client: Stdout, Stderr, Exit (the last frame the agent
// sends; it then closes its half of the stream). Unknown types are an error:
// both sides come from one release and a new type needs a new stream method.
//
// The package imports only the standard library, so a relay (the app-node)
// can splice the stream without decoding it, and the CLI and the agent share
// the one definition.
package shellproto

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Method is the fabric stream method that opens a shell session.
const Method = "shell.open"

// OpenParams are the parameters of Method.
type OpenParams struct {
	// Argv is the command to run; empty runs the login shell.
	Argv []string `json:"argv,omitempty"`
	// TTY asks for a pseudo-terminal (stdout and stderr merged, as on a
	// terminal); without it stdin, stdout and stderr are separate pipes.
	TTY bool `json:"tty,omitempty"`
	// Rows and Cols are the terminal's size (TTY only; 0: 24x80).
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Term is the TERM of the session (TTY only; default xterm-256color).
	Term string `json:"term,omitempty"`
	// Env is added to the session's environment, NAME=value each.
	Env []string `json:"env,omitempty"`
	// User is the platform user the session is opened for, as the platform
	// (the app-node relaying the stream) vouches for it; it is recorded in
	// the job's log. The agent trusts it because it admits only platform
	// keys.
	User string `json:"user,omitempty"`
}

// OpenReply is the agent's answer on accepting the stream.
type OpenReply struct {
	Session string `json:"session"`
	PID     int    `json:"pid"`
}

// Frame types.
const (
	TypeStdin    byte = 'i' // client -> agent: bytes for the process's stdin (or the terminal)
	TypeStdinEOF byte = 'z' // client -> agent: no more stdin (closes the pipe; sends ^D on a TTY)
	TypeResize   byte = 'r' // client -> agent: rows:uint16be cols:uint16be
	TypeSignal   byte = 's' // client -> agent: a signal name ("INT", "TERM", "HUP", "KILL", "QUIT")
	TypeStdout   byte = 'o' // agent -> client
	TypeStderr   byte = 'e' // agent -> client (pipe mode only)
	TypeExit     byte = 'x' // agent -> client: ExitStatus as JSON; the last frame
)

// MaxPayload bounds a frame's payload. Data is sent in chunks of at most
// ChunkSize, well below it.
const (
	MaxPayload = 1 << 20
	ChunkSize  = 32 << 10
)

// ExitStatus is the payload of an Exit frame.
type ExitStatus struct {
	// Code is the exit code; a process killed by a signal gets 128+signo,
	// as shells report it.
	Code int `json:"code"`
	// Signal names the signal that ended the process, if one did.
	Signal string `json:"signal,omitempty"`
	// Error is set when the session could not run the command at all.
	Error string `json:"error,omitempty"`
}

// Frame is one decoded message.
type Frame struct {
	Type    byte
	Payload []byte
}

// Errors of the decoder.
var (
	ErrTooLarge    = errors.New("shellproto: frame too large")
	ErrUnknownType = errors.New("shellproto: unknown frame type")
	ErrBadPayload  = errors.New("shellproto: bad payload")
)

func knownType(t byte) bool {
	switch t {
	case TypeStdin, TypeStdinEOF, TypeResize, TypeSignal, TypeStdout, TypeStderr, TypeExit:
		return true
	}
	return false
}

// AppendFrame appends one encoded frame to dst.
func AppendFrame(dst []byte, typ byte, payload []byte) []byte {
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// Reader decodes frames from a stream.
type Reader struct {
	r   *bufio.Reader
	buf []byte
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next frame. Its payload is valid until the next call.
// It returns io.EOF at a clean end between frames and io.ErrUnexpectedEOF
// inside one.
func (r *Reader) Next() (Frame, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return Frame{}, err
	}
	t, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
	if !knownType(t) {
		return Frame{}, fmt.Errorf("%w %#x", ErrUnknownType, t)
	}
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, n, MaxPayload)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	p := r.buf[:n]
	if _, err := io.ReadFull(r.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	f := Frame{Type: t, Payload: p}
	if err := f.check(); err != nil {
		return Frame{}, err
	}
	return f, nil
}

// check validates the payload of fixed-shape frames.
func (f Frame) check() error {
	switch f.Type {
	case TypeStdinEOF:
		if len(f.Payload) != 0 {
			return fmt.Errorf("%w: stdin-eof carries %d bytes", ErrBadPayload, len(f.Payload))
		}
	case TypeResize:
		if len(f.Payload) != 4 {
			return fmt.Errorf("%w: resize carries %d bytes, want 4", ErrBadPayload, len(f.Payload))
		}
	case TypeSignal:
		if len(f.Payload) == 0 || len(f.Payload) > 16 {
			return fmt.Errorf("%w: signal name of %d bytes", ErrBadPayload, len(f.Payload))
		}
	case TypeExit:
		var es ExitStatus
		if err := json.Unmarshal(f.Payload, &es); err != nil {
			return fmt.Errorf("%w: exit: %v", ErrBadPayload, err)
		}
	}
	return nil
}

// Resize decodes a Resize frame's payload.
func (f Frame) Resize() (rows, cols uint16) {
	return binary.BigEndian.Uint16(f.Payload), binary.BigEndian.Uint16(f.Payload[2:])
}

// Exit decodes an Exit frame's payload.
func (f Frame) Exit() ExitStatus {
	var es ExitStatus
	json.Unmarshal(f.Payload, &es) // checked by Next
	return es
}

// ResizePayload encodes a Resize frame's payload.
func ResizePayload(rows, cols uint16) []byte {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:], rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return b[:]
}

// Writer encodes frames onto a stream; it is safe for concurrent use, each
// frame going out whole.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter writes frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Frame writes one frame.
func (w *Writer) Frame(typ byte, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = AppendFrame(w.buf[:0], typ, payload)
	_, err := w.w.Write(w.buf)
	if cap(w.buf) > 2*ChunkSize+16 {
		w.buf = nil
	}
	return err
}

// Data writes p as frames of type typ, in chunks of at most ChunkSize.
func (w *Writer) Data(typ byte, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), ChunkSize)
		if err := w.Frame(typ, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// Exit writes the Exit frame.
func (w *Writer) Exit(es ExitStatus) error {
	b, _ := json.Marshal(es)
	return w.Frame(TypeExit, b)
}

// DataWriter is an io.Writer that sends what is written as frames of one
// type.
type DataWriter struct {
	W    *Writer
	Type byte
}

func (d DataWriter) Write(p []byte) (int, error) {
	if err := d.W.Data(d.Type, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
