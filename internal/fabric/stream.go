package fabric

import (
	"encoding/json"
	"errors"
	"time"
)

// Stream is a long-lived bidirectional byte stream to a peer. Read and Write
// may be used from two goroutines at once. CloseWrite ends the outgoing half;
// Close ends both.
type Stream struct {
	s         rawStream
	peer      PublicKey
	method    string
	reply     json.RawMessage
	transport string
}

// Peer is the key at the other end.
func (s *Stream) Peer() PublicKey { return s.peer }

// Transport is what the stream travels on: TransportQUIC, TransportTCP
// (yamux over TCP+TLS) or TransportTCPDirect (OpenDirectStream).
func (s *Stream) Transport() string { return s.transport }

// Method is the method the stream was opened with.
func (s *Stream) Method() string { return s.method }

// Reply is the JSON the server sent when it accepted the stream (may be nil).
func (s *Stream) Reply() json.RawMessage { return s.reply }

func (s *Stream) Read(p []byte) (int, error)  { return s.s.Read(p) }
func (s *Stream) Write(p []byte) (int, error) { return s.s.Write(p) }

// CloseWrite sends end-of-stream to the peer; reading continues.
func (s *Stream) CloseWrite() error { return s.s.closeWrite() }

// Shutdown ends the stream gracefully: what was written is still
// delivered, then the peer reads end-of-stream; what the peer sends from now
// on is discarded. End a stream that carried a complete exchange with it
// (an HTTP/1.1 connection closed after its last answer); Close aborts.
func (s *Stream) Shutdown() { s.s.shutdown() }

// Close ends both directions at once: on QUIC and direct streams a reset,
// and data not yet delivered may be lost (see Shutdown).
func (s *Stream) Close() error {
	err := s.s.closeWrite()
	s.s.abort()
	return err
}

// SetReadDeadline sets the read deadline.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.s.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline.
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.s.SetWriteDeadline(t) }

// StreamRequest is an incoming stream waiting to be accepted.
type StreamRequest struct {
	Peer   PublicKey
	Access Access
	Method string
	Params json.RawMessage

	s         rawStream
	transport string
	accepted  bool
}

// Decode unmarshals the params into v, as a bad_request Error on failure.
func (r *StreamRequest) Decode(v any) error {
	rq := Request{Method: r.Method, Params: r.Params}
	return rq.Decode(v)
}

// Accept answers the opener with reply (JSON-encoded; nil for none) and
// returns the stream.
func (r *StreamRequest) Accept(reply any) (*Stream, error) {
	if r.accepted {
		return nil, errors.New("fabric: stream already accepted")
	}
	var payload []byte
	if reply != nil {
		b, err := json.Marshal(reply)
		if err != nil {
			return nil, err
		}
		payload = b
	}
	r.accepted = true
	if _, err := r.s.Write(appendResponse(nil, statusOK, payload)); err != nil {
		return nil, err
	}
	return &Stream{s: r.s, peer: r.Peer, method: r.Method, transport: r.transport}, nil
}
