package inferproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// The parakeet runtime is NVIDIA's ASR NIM, whose POST
// /v1/audio/transcriptions takes "file", "language" or "model" (the NIM's
// internal model name), "response_format" json or text, and "temperature"
// (docs.nvidia.com/nim/speech/latest/reference/api-references/asr/http-asr.html).
// The proxy routes on the form's "model" (the served model name), so it
// drops that field and asks for ParakeetLanguage when the client named no
// language; it answers the formats the NIM cannot give (srt, vtt,
// verbose_json) with 400 itself.
//
// An upload is forwarded as it arrives: the runtime reads the audio while
// the client is still sending it, and the proxy's memory does not grow
// with it. Routing needs the model before the file, and clients differ:
// the Python SDK (httpx) writes the form's fields before its files, the Go
// and JavaScript SDKs write "file" first. So, when the file part begins:
//
//   - a model already named routes it (streamed);
//   - else, if the caller can reach exactly one transcription model, the
//     upload goes to it at once and the form's "model", when it comes, must
//     name it; another name stops the upload before the runtime has the
//     whole form, and is answered as that name would be (404, or 400 with
//     no model);
//   - else the form is read to its end first (spooled), then routed.
//
// Either way the rewritten form is kept in an unlinked temporary file as it
// passes, so that a replica that fails before answering is replaced by
// another that gets the upload again from its start.
//
// POST /v1/audio/translations is the same form (the NIM's HTTP API lists
// it beside transcriptions; OpenAI's translates into English and takes no
// language) and goes the same way.

// audioFormats are the response formats of the ASR NIM.
var audioFormats = []string{"json", "text"}

// parakeetLanguage is the language asked for when the client names none:
// Parakeet TDT v3's automatic detection.
const parakeetLanguage = "multi"

// audioError is an upload the proxy refuses: status, code, param.
type audioError struct {
	status      int
	code, param string
	msg         string
}

func (e *audioError) Error() string { return e.msg }

// reqBody is a request body, read again for each replica tried: the JSON
// in memory, an upload from its spool while it is still arriving.
type reqBody struct {
	open func(ctx context.Context) io.Reader
	size int64 // -1: not known yet (sent chunked)
	// failed, if set, says why the body could not be read to its end
	// (the client's upload was refused or cut), so that the request is
	// answered with that and no replica is blamed.
	failed func() error
}

func bytesBody(b []byte) reqBody {
	return reqBody{open: func(context.Context) io.Reader { return bytes.NewReader(b) }, size: int64(len(b))}
}

// request is an outgoing request carrying the body from its start.
func (b reqBody) request(r *http.Request, url string) *http.Request {
	ctx := r.Context()
	out, _ := http.NewRequestWithContext(ctx, r.Method, url, b.open(ctx))
	out.ContentLength = b.size
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(b.open(ctx)), nil }
	return out
}

// spool is an upload's rewritten form in an unlinked file, written once
// as the client's body is read and read from its start by each attempt;
// a reader that has caught up waits for more.
type spool struct {
	f    *os.File
	mu   sync.Mutex
	n    int64         // bytes in f
	end  bool          // the form is complete, or failed
	err  error         // why it failed
	grew chan struct{} // closed (and replaced) when n or end changes
}

func newSpool() (*spool, error) {
	f, err := os.CreateTemp("", "cosmicac-audio-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // the open file is all there is: nothing is left behind
	return &spool{f: f, grew: make(chan struct{})}, nil
}

// Write appends p; only the form's writer calls it.
func (s *spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	at := s.n
	s.mu.Unlock()
	n, err := s.f.WriteAt(p, at)
	s.mu.Lock()
	s.n += int64(n)
	close(s.grew)
	s.grew = make(chan struct{})
	s.mu.Unlock()
	return n, err
}

// finish marks the form complete (err nil) or failed.
func (s *spool) finish(err error) {
	s.mu.Lock()
	s.end, s.err = true, err
	close(s.grew)
	s.grew = make(chan struct{})
	s.mu.Unlock()
}

// failure is why the form failed, nil while it is complete or arriving.
func (s *spool) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// size is the form's size once complete, else -1.
func (s *spool) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end && s.err == nil {
		return s.n
	}
	return -1
}

func (s *spool) body() reqBody {
	return reqBody{open: func(ctx context.Context) io.Reader { return &spoolReader{s: s, ctx: ctx} }, size: s.size(), failed: s.failure}
}

// spoolReader reads a spool from its start, waiting for the bytes not
// written yet until ctx ends.
type spoolReader struct {
	s   *spool
	ctx context.Context
	off int64
}

func (r *spoolReader) Read(p []byte) (int, error) {
	for {
		s := r.s
		s.mu.Lock()
		n, end, err, grew := s.n, s.end, s.err, s.grew
		s.mu.Unlock()
		if r.off < n {
			m, rerr := s.f.ReadAt(p[:min(int64(len(p)), n-r.off)], r.off)
			r.off += int64(m)
			if rerr == io.EOF {
				rerr = nil
			}
			return m, rerr
		}
		if end {
			if err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		select {
		case <-grew:
		case <-r.ctx.Done():
			return 0, context.Cause(r.ctx)
		}
	}
}

// rewriteAudio reads a multipart transcription upload and writes it to mw
// rewritten for the ASR NIM (model dropped, language added when missing),
// and returns the routing model. When the file part begins it calls route
// with the model named so far ("" if none) and goes on; route returns the
// model the upload was sent to meanwhile ("" if none), which the form's
// model must then be. It copies part by part through a 32 KiB buffer:
// memory does not grow with the upload (a 10-minute 16 kHz WAV is 19 MB).
func rewriteAudio(body io.Reader, contentType string, mw *multipart.Writer, route func(model string) string) (model string, err error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", &audioError{http.StatusBadRequest, "invalid_multipart", "", "want a multipart/form-data body"}
	}
	mr := multipart.NewReader(body, params["boundary"])
	buf := make([]byte, 32<<10)
	hasFile, hasLang := false, false
	sentTo := ""
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", readError(err)
		}
		name := part.FormName()
		switch name {
		case "model", "language", "response_format":
			v, err := io.ReadAll(io.LimitReader(part, 1024))
			if err != nil {
				return "", readError(err)
			}
			val := strings.TrimSpace(string(v))
			switch name {
			case "model":
				if sentTo != "" && val != sentTo {
					return "", &wrongModel{model: val}
				}
				model = val
				continue // routing only: the NIM's model field is its internal name
			case "language":
				hasLang = val != ""
			case "response_format":
				if val != "" && !slices.Contains(audioFormats, val) {
					return "", &audioError{http.StatusBadRequest, "unsupported_response_format", "response_format",
						fmt.Sprintf("response_format %q is not supported by the parakeet runtime (NVIDIA's ASR NIM): want json or text", val)}
				}
			}
			if err := mw.WriteField(name, val); err != nil {
				return "", err
			}
			continue
		case "file":
			if !hasFile && route != nil {
				sentTo = route(model)
			}
			hasFile = true
		}
		h := make(textproto.MIMEHeader, len(part.Header))
		for k, v := range part.Header {
			h[k] = v
		}
		pw, err := mw.CreatePart(h)
		if err != nil {
			return "", err
		}
		if _, err := io.CopyBuffer(pw, onlyReader{part}, buf); err != nil {
			return "", readError(err)
		}
	}
	if !hasFile {
		return "", &audioError{http.StatusBadRequest, "invalid_multipart", "file", "the form has no file field"}
	}
	if sentTo != "" && model != sentTo {
		return "", &wrongModel{model: model}
	}
	if !hasLang {
		if err := mw.WriteField("language", parakeetLanguage); err != nil {
			return "", err
		}
	}
	if err := mw.Close(); err != nil {
		return "", err
	}
	return model, nil
}

// wrongModel is a form whose model is not the one its upload was sent to
// before the model came.
type wrongModel struct{ model string }

func (e *wrongModel) Error() string {
	return fmt.Sprintf("the form's model %q is not the one routed to", e.model)
}

// onlyReader hides a reader's WriterTo, so CopyBuffer uses the buffer.
type onlyReader struct{ io.Reader }

// readError maps an error reading the upload to the answer.
func readError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &audioError{http.StatusRequestEntityTooLarge, "request_too_large", "", fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded): // the server's body limit
		return &audioError{http.StatusRequestTimeout, "request_timeout", "", "the request body did not arrive in time"}
	}
	return &audioError{http.StatusBadRequest, "invalid_multipart", "", "read the multipart body: " + err.Error()}
}

func (p *Proxy) forwardAudio(w http.ResponseWriter, r *http.Request) {
	c, limit, release, ok := p.admitBody(w, r, p.cfg.MaxAudioBytes, p.cfg.MaxAnonymousAudioBytes)
	if !ok {
		return
	}
	defer release()
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the request body exceeds %d bytes", limit))
		return
	}
	sp, err := newSpool()
	if err != nil {
		p.log.Error("spool an upload", "err", err)
		writeError(w, http.StatusInternalServerError, "spool_failed", "the upload cannot be stored now; retry")
		return
	}
	defer sp.f.Close()
	mw := multipart.NewWriter(sp)
	ct := r.Header.Get("Content-Type")
	r.Header.Set("Content-Type", mw.FormDataContentType())

	// The form is read by its own goroutine, which says where the file
	// begins (routed) and waits for the answer (sentTo); the handler
	// stops it (a read deadline now) and waits for it before returning.
	routed, sentTo := make(chan string, 1), make(chan string, 1)
	type result struct {
		model string
		err   error
	}
	read := make(chan result, 1)
	quit := make(chan struct{})
	body := http.MaxBytesReader(w, r.Body, limit)
	go func() {
		model, err := rewriteAudio(body, ct, mw, func(model string) string {
			routed <- model
			select {
			case m := <-sentTo:
				return m
			case <-quit:
				return ""
			}
		})
		sp.finish(err)
		read <- result{model, err}
	}()
	var res *result
	defer func() {
		close(quit)
		if res == nil {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			<-read
		}
	}()
	answerFailed := func(err error) {
		var ae *audioError
		var wm *wrongModel
		switch {
		case errors.As(err, &wm):
			// The upload went to the one transcription model the caller
			// reaches, and the form names another: answer as that name is.
			jobs, adapter, ok := p.route(w, r, c, wm.model)
			if ok && adapter != "" {
				writeError(w, http.StatusBadRequest, "unsupported_endpoint", fmt.Sprintf("`%s` is a LoRA adapter: adapters serve text endpoints, not audio", wm.model))
				return
			}
			switch {
			case !ok:
			case jobs[0].Runtime != cosmic.RuntimeParakeet:
				writeParamError(w, http.StatusBadRequest, "unsupported_endpoint", "model",
					fmt.Sprintf("the model `%s` serves no %s", wm.model, strings.TrimPrefix(r.URL.Path, Prefix+"/")))
			default: // a transcription model that appeared meanwhile
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, "models_changed", "the transcription models changed during the upload; retry")
			}
		case errors.As(err, &ae):
			writeParamError(w, ae.status, ae.code, ae.param, ae.msg)
		default:
			p.log.Error("spool an upload", "err", err)
			writeError(w, http.StatusInternalServerError, "spool_failed", "the upload cannot be stored now; retry")
		}
	}
	select {
	case got := <-read:
		res = &got
		if got.err != nil {
			answerFailed(got.err)
			return
		}
		p.metrics.uploads.WithLabelValues("spooled").Inc()
		p.routeForward(w, r, c, got.model, sp.body())
		return
	case model := <-routed:
		if model == "" {
			model = p.onlyTranscriptionModel(r.Context(), c)
		}
		sentTo <- model
		if model == "" {
			got := <-read // several candidates: the form's model decides, at its end
			res = &got
			if got.err != nil {
				answerFailed(got.err)
				return
			}
			p.metrics.uploads.WithLabelValues("spooled").Inc()
			p.routeForward(w, r, c, got.model, sp.body())
			return
		}
		p.metrics.uploads.WithLabelValues("streamed").Inc()
		if !p.routeForward(w, r, c, model, sp.body()) {
			select {
			case got := <-read: // the answer came after the whole form
				res = &got
			default: // answered before reading it all (404, 429, 503)
			}
			return
		}
		// The upload failed on its way (forward answered nothing): say
		// why; the replica is not to blame.
		got := <-read
		res = &got
		answerFailed(got.err)
	}
}

// onlyTranscriptionModel is the served name of the one transcription
// (parakeet) model the caller can reach, or "" when there are none or
// several.
func (p *Proxy) onlyTranscriptionModel(ctx context.Context, c caller) string {
	if c.team == "" {
		return ""
	}
	ms, err := p.catalog.Models(ctx)
	if err != nil {
		return ""
	}
	name := ""
	for _, n := range callable(ms, c) {
		if n.model.Runtime != cosmic.RuntimeParakeet || !c.allows(n.model) {
			continue
		}
		if name != "" && n.name != name {
			return ""
		}
		name = n.name
	}
	return name
}

// writeParamError is writeError naming the request field at fault.
func writeParamError(w http.ResponseWriter, status int, code, param, msg string) {
	if param == "" {
		writeError(w, status, code, msg)
		return
	}
	b := fmt.Appendf(nil, `{"error":{"message":%q,"type":%q,"code":%q,"param":%q}}`, msg, openAIType(status), code, param)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// routeForward routes an upload (whose form names the model only for
// routing: it is dropped on the way) and forwards it; it answers forward's
// bodyFailed.
func (p *Proxy) routeForward(w http.ResponseWriter, r *http.Request, c caller, model string, body reqBody) (bodyFailed bool) {
	jobs, adapter, ok := p.route(w, r, c, model)
	if ok && adapter != "" {
		writeError(w, http.StatusBadRequest, "unsupported_endpoint", fmt.Sprintf("`%s` is a LoRA adapter: adapters serve text endpoints, not audio", model))
		return false
	}
	if !ok {
		return false
	}
	return p.forward(w, r, c, model, jobs, body, false, nil, false) // an audio file has no prefix to share
}
