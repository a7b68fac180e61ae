package fabric

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// The wire format of one fabric stream. Every stream starts with a request
// frame from the side that opened it:
//
//	frame    = length:uint32be body
//	request  = kind:byte timeout:uvarint(µs, 0 = none) methodLen:uvarint method params:JSON
//	response = status:byte payload:JSON  (status 0: result, 1: Error)
//
// A call is answered by one response frame, after which the stream may carry
// the caller's next call (call streams are reused). An event gets no answer. A
// stream is answered by one response frame and then carries raw bytes in both
// directions until each side closes its half.

type kind byte

const (
	kindCall   kind = 1
	kindEvent  kind = 2
	kindStream kind = 3
)

func (k kind) String() string {
	switch k {
	case kindCall:
		return "call"
	case kindEvent:
		return "event"
	case kindStream:
		return "stream"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

const (
	statusOK    byte = 0
	statusError byte = 1

	maxMethodLen = 128
	// DefaultMaxMessage bounds a request or response frame.
	DefaultMaxMessage = 16 << 20
)

var errFrameTooLarge = errors.New("fabric: frame too large")

// request is a decoded request frame.
type request struct {
	kind    kind
	timeout time.Duration
	method  string
	params  json.RawMessage
}

// appendRequest encodes a request frame, length prefix included.
func appendRequest(dst []byte, r request) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(r.kind))
	dst = binary.AppendUvarint(dst, uint64(r.timeout/time.Microsecond))
	dst = binary.AppendUvarint(dst, uint64(len(r.method)))
	dst = append(dst, r.method...)
	dst = append(dst, r.params...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// decodeRequest parses a request frame body.
func decodeRequest(b []byte) (request, error) {
	var r request
	if len(b) < 1 {
		return r, errors.New("fabric: empty request")
	}
	r.kind = kind(b[0])
	if r.kind < kindCall || r.kind > kindStream {
		return r, fmt.Errorf("fabric: unknown request kind %d", b[0])
	}
	b = b[1:]
	t, n := binary.Uvarint(b)
	if n <= 0 || t > uint64(365*24*time.Hour/time.Microsecond) {
		return r, errors.New("fabric: bad request timeout")
	}
	r.timeout = time.Duration(t) * time.Microsecond
	b = b[n:]
	ml, n := binary.Uvarint(b)
	if n <= 0 || ml == 0 || ml > maxMethodLen || ml > uint64(len(b)-n) {
		return r, errors.New("fabric: bad request method length")
	}
	b = b[n:]
	m := b[:ml]
	for _, c := range m {
		if c <= ' ' || c > '~' {
			return r, errors.New("fabric: method name must be printable ASCII without spaces")
		}
	}
	r.method = string(m)
	if rest := b[ml:]; len(rest) > 0 {
		r.params = json.RawMessage(rest)
	}
	return r, nil
}

// appendResponse encodes a response frame, length prefix included.
func appendResponse(dst []byte, status byte, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, status)
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// decodeResponse parses a response frame body into its result or its Error.
func decodeResponse(b []byte) (json.RawMessage, *Error, error) {
	if len(b) < 1 {
		return nil, nil, errors.New("fabric: empty response")
	}
	switch b[0] {
	case statusOK:
		if len(b) == 1 {
			return nil, nil, nil
		}
		return json.RawMessage(b[1:]), nil, nil
	case statusError:
		var e Error
		if err := json.Unmarshal(b[1:], &e); err != nil {
			return nil, nil, fmt.Errorf("fabric: decode error response: %w", err)
		}
		if e.Code == "" {
			return nil, nil, errors.New("fabric: error response without code")
		}
		e.remote = true
		return nil, &e, nil
	default:
		return nil, nil, fmt.Errorf("fabric: unknown response status %d", b[0])
	}
}

// readFrame reads one frame body of at most max bytes into buf (grown as
// needed) and returns it.
func readFrame(r io.Reader, max int, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", errFrameTooLarge, n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}
