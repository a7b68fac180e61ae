package inferagent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/hop"
)

// How the agent passes the proxy's HTTP/1.1 (each agentapi.MethodInferenceHTTP
// stream) to the runtime depends on the runtime.
//
// vLLM and Parakeet keep their connections alive: each stream is relayed
// byte for byte to a connection of its own to the runtime (byteRelay), with
// no HTTP parsing in between, the cheapest hop (docs/benchmarks.md,
// "Inference"). Closing either end closes the other.
//
// llama.cpp's llama-server closes its connection after each streamed
// answer, which relayed byte for byte would cost the proxy a new fabric
// stream per request. For it the agent relays exchanges (serveExchanges):
// it reads each request's head from the stream, sends the request on a
// connection of its own to the runtime (one per request, dialed ahead:
// spare.go; the runtime may close it), and writes the answer back framed by
// itself (an event stream's head at once), each read of the
// runtime's answer written and flushed at once, so SSE events are never
// held back nor joined. The stream outlives the runtime's connections: a
// request costs no new fabric stream. The answer is read and written in
// the stream's own goroutine (no HTTP server, no transport and their
// goroutines in between); one more goroutine watches the stream while the
// answer goes, so that a proxy that closes it (its client left) closes the
// runtime's connection, and the runtime stops generating. Only the hop-by-hop headers
// change on the way (RFC 9110 7.6.1); no X-Forwarded header is added, and
// the body is passed as the runtime wrote it (no compression is asked for
// or undone).

// streamIdle is how long a stream may rest between requests; the proxy
// retires its connections to agents sooner (agentIdleFor there).
const streamIdle = 2 * time.Minute

// relayLinger bounds how long, after the runtime closed a connection (its
// keep-alive timeout), the agent waits for the proxy to close its end.
const relayLinger = 10 * time.Second

var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// openRelay answers an agentapi.MethodInferenceHTTP stream: refused unless
// this VMI is the replica's head and its runtime runs, else relayed
// (byteRelay, or serveExchanges for llama.cpp) until the proxy closes it.
func (a *Agent) openRelay(ctx context.Context, req *fabric.StreamRequest) error {
	if a.cfg.Placement.Role() != agentapi.PlacementHead {
		return fabric.Errorf(fabric.CodeUnavailable, "this VMI is a headless worker; send requests to the replica's head")
	}
	addr := a.runtimeAddr()
	if addr == "" {
		return fabric.Errorf(fabric.CodeUnavailable, "the replica's runtime is not running")
	}
	if a.cfg.Inference.Runtime == cosmic.RuntimeLlamaCPP {
		s, err := req.Accept(nil)
		if err != nil {
			return err
		}
		serveExchanges(ctx, s, a.runtimeAddr, &a.spare)
		return nil
	}
	rc, err := dialRuntime(ctx, addr)
	if err != nil {
		return fabric.Errorf(fabric.CodeUnavailable, "the replica's runtime did not answer: %v", err)
	}
	s, err := req.Accept(nil)
	if err != nil {
		rc.Close()
		return err
	}
	byteRelay(s, rc)
	return nil
}

// badGateway is the body of the agent's answer to a request the runtime
// did not take.
const badGateway = `{"error":{"message":"the replica's runtime did not answer","type":"runtime_unavailable","code":502}}`

// serveExchanges relays the proxy's requests on s to the runtime at addr()
// ("" while none runs), one at a time, each on a connection taken from sp,
// until the proxy closes s, s rests streamIdle, or ctx ends.
func serveExchanges(ctx context.Context, s *fabric.Stream, addr func() string, sp *spare) {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	defer s.Close()
	br, bw := bufio.NewReader(s), bufio.NewWriter(s)
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	for {
		s.SetReadDeadline(time.Now().Add(streamIdle))
		req, err := http.ReadRequest(br)
		if err != nil {
			return // closed, idle, or not HTTP: the proxy opens another
		}
		s.SetReadDeadline(time.Time{})
		if !exchange(ctx, s, br, bw, req, addr(), sp, *bp) {
			return
		}
	}
}

// exchange relays req (read from the stream s through br) to the runtime
// at addr, on a connection taken from sp, and its answer back through bw.
// It answers whether the stream may carry a next request: false when either
// side broke off or the stream ended.
func exchange(ctx context.Context, s *fabric.Stream, br *bufio.Reader, bw *bufio.Writer, req *http.Request, addr string, sp *spare, buf []byte) bool {
	var rc net.Conn
	err := errors.New("the replica's runtime is not running")
	if addr != "" {
		rc, err = sp.take(ctx, addr)
	}
	if err != nil {
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return false
		}
		return writeBadGateway(bw, req) && next(s, br)
	}
	defer rc.Close()
	// The agent ending closes the runtime's connection too, which ends a
	// write to a runtime that stopped reading (the stream's close would
	// not: the watch starts only once the request is whole).
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	h := make(http.Header, len(req.Header))
	hop.CopyHeaders(h, req.Header)
	req.Header = h
	req.Close = true // a connection per request: the runtime may close it anyway
	rw := bufio.NewWriter(rc)
	rc.SetWriteDeadline(time.Now().Add(streamIdle)) // a runtime that stops reading the request
	if err := req.Write(rw); err != nil {
		return false // the stream broke mid-body, or the runtime's connection did
	}
	if err := rw.Flush(); err != nil {
		return false
	}
	rc.SetWriteDeadline(time.Time{})
	// The request is whole: what arrives on the stream now is the next
	// one, or the stream's end. Watch for the end meanwhile: it closes the
	// runtime's connection, which stops the runtime's work on it.
	watched := make(chan error, 1)
	go func() {
		_, err := br.Peek(1)
		if err != nil {
			rc.Close()
		}
		watched <- err
	}()
	if !relayAnswer(rc, bw, req, buf) {
		s.Close() // ends the watch
		<-watched
		return false
	}
	sp.refill(addr) // the next request's connection, dialed now the runtime is done with this one
	// The answer is whole: end the watch, so that the next request wakes
	// the stream's own goroutine (serveExchanges), not the watch and then
	// it: one hand-off fewer on the way to the runtime (docs/benchmarks.md,
	// "Inference on a real engine"). A read deadline in the past ends the
	// watch's read with a timeout and leaves the stream as it was.
	s.SetReadDeadline(time.Now())
	err = <-watched
	var ne net.Error
	return err == nil || errors.As(err, &ne) && ne.Timeout()
}

// next waits for the stream's next request, as long as a stream may rest.
func next(s *fabric.Stream, br *bufio.Reader) bool {
	s.SetReadDeadline(time.Now().Add(streamIdle))
	_, err := br.Peek(1)
	return err == nil
}

// relayAnswer reads the runtime's answer to req from rc and writes it to
// bw: the head with the runtime's end-to-end headers and a framing of the
// agent's own (Content-Length where the runtime gave one, else chunked),
// then each read of the body at once. false: the answer broke off, and the
// stream must close, so that the proxy sees it cut, never complete.
func relayAnswer(rc net.Conn, bw *bufio.Writer, req *http.Request, buf []byte) bool {
	rr := bufio.NewReader(rc)
	resp, err := http.ReadResponse(rr, req)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(rr, req) // informational: the answer follows
	}
	if err != nil || resp.StatusCode == http.StatusSwitchingProtocols { // no upgrade was asked for
		return writeBadGateway(bw, req)
	}
	defer resp.Body.Close()
	h := make(http.Header, len(resp.Header)+1)
	hop.CopyHeaders(h, resp.Header)
	h.Del("Content-Length")
	noBody := req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified
	chunked := false
	switch {
	case noBody:
		if req.Method == http.MethodHead && resp.ContentLength >= 0 {
			h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		}
	case resp.ContentLength >= 0:
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	default:
		h.Set("Transfer-Encoding", "chunked")
		chunked = true
	}
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(resp.Status)
	bw.WriteString("\r\n")
	h.Write(bw)
	bw.WriteString("\r\n")
	// An event stream's head goes at once (the proxy passes it on at once,
	// and the first event then travels alone); any other answer's with its
	// body's first bytes (the proxy holds it back until then anyway): one
	// write fewer.
	if chunked && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && bw.Flush() != nil {
		return false
	}
	for !noBody {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if chunked {
				bw.WriteString(strconv.FormatInt(int64(n), 16))
				bw.WriteString("\r\n")
				bw.Write(buf[:n])
				bw.WriteString("\r\n")
			} else {
				bw.Write(buf[:n])
			}
			if bw.Flush() != nil {
				return false
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false
		}
	}
	if chunked {
		bw.WriteString("0\r\n\r\n")
	}
	return bw.Flush() == nil
}

// writeBadGateway answers req with the agent's 502.
func writeBadGateway(bw *bufio.Writer, req *http.Request) bool {
	bw.WriteString("HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(badGateway)))
	bw.WriteString("\r\n\r\n")
	if req.Method != http.MethodHead {
		bw.WriteString(badGateway)
	}
	return bw.Flush() == nil
}

// byteRelay copies between the proxy's stream s and the runtime's connection
// rc until either ends.
func byteRelay(s *fabric.Stream, rc net.Conn) {
	up := make(chan struct{})
	go func() {
		defer close(up)
		bp := relayBufs.Get().(*[]byte)
		defer relayBufs.Put(bp)
		io.CopyBuffer(struct{ io.Writer }{rc}, s, *bp) // the proxy's requests
		// The proxy closed its end (it retired the connection, or the
		// client left): close the runtime's, which stops its work.
		rc.Close()
	}()
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	_, err := io.CopyBuffer(s, struct{ io.Reader }{rc}, *bp) // the runtime's answers
	select {
	case <-up: // the proxy ended it
		s.Close()
		return
	default:
	}
	if err != nil {
		// The runtime's connection broke: cut the stream, so that the
		// proxy sees an answer end early as an error, never as complete.
		s.Close()
		rc.Close()
		<-up
		return
	}
	// The runtime closed the connection after a complete answer.
	s.CloseWrite()
	t := time.NewTimer(relayLinger)
	defer t.Stop()
	select {
	case <-up:
	case <-t.C:
	}
	s.Close()
	rc.Close()
	<-up
}
