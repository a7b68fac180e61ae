package inferproxy

import (
	"bytes"
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
)

// The parakeet runtime is NVIDIA's ASR NIM, whose POST
// /v1/audio/transcriptions takes "file", "language" or "model" (the NIM's
// internal model name), "response_format" json or text, and "temperature"
// (docs.nvidia.com/nim/speech/latest/reference/api-references/asr/http-asr.html).
// The proxy routes on the form's "model" (the served model name), so it
// drops that field and asks for ParakeetLanguage when the client named no
// language; it answers the formats the NIM cannot give (srt, vtt,
// verbose_json) with 400 itself, before anything is forwarded.

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
// in memory, an upload from its spool file.
type reqBody struct {
	at   io.ReaderAt
	size int64
}

func bytesBody(b []byte) reqBody { return reqBody{at: bytes.NewReader(b), size: int64(len(b))} }

// request is an outgoing request carrying the body from its start.
func (b reqBody) request(r *http.Request, url string) *http.Request {
	open := func() io.Reader { return io.NewSectionReader(b.at, 0, b.size) }
	out, _ := http.NewRequestWithContext(r.Context(), r.Method, url, open())
	out.ContentLength = b.size
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }
	return out
}

// spoolAudio reads a multipart transcription upload into f, rewritten for
// the ASR NIM (model dropped, language added when missing), and returns
// the routing model and the new content type. It copies part by part
// through a 32 KiB buffer: memory does not grow with the upload (a
// 10-minute 16 kHz WAV is 19 MB), the spool file does; the file is read
// again for each replica tried.
func spoolAudio(body io.Reader, contentType string, f io.Writer) (model, outType string, err error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", "", &audioError{http.StatusBadRequest, "invalid_multipart", "", "want a multipart/form-data body"}
	}
	mr := multipart.NewReader(body, params["boundary"])
	mw := multipart.NewWriter(f)
	buf := make([]byte, 32<<10)
	hasFile, hasLang := false, false
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", "", readError(err)
		}
		name := part.FormName()
		switch name {
		case "model", "language", "response_format":
			v, err := io.ReadAll(io.LimitReader(part, 1024))
			if err != nil {
				return "", "", readError(err)
			}
			val := strings.TrimSpace(string(v))
			switch name {
			case "model":
				model = val
				continue // routing only: the NIM's model field is its internal name
			case "language":
				hasLang = val != ""
			case "response_format":
				if val != "" && !slices.Contains(audioFormats, val) {
					return "", "", &audioError{http.StatusBadRequest, "unsupported_response_format", "response_format",
						fmt.Sprintf("response_format %q is not supported by the parakeet runtime (NVIDIA's ASR NIM): want json or text", val)}
				}
			}
			if err := mw.WriteField(name, val); err != nil {
				return "", "", err
			}
			continue
		case "file":
			hasFile = true
		}
		h := make(textproto.MIMEHeader, len(part.Header))
		for k, v := range part.Header {
			h[k] = v
		}
		pw, err := mw.CreatePart(h)
		if err != nil {
			return "", "", err
		}
		if _, err := io.CopyBuffer(pw, onlyReader{part}, buf); err != nil {
			return "", "", readError(err)
		}
	}
	if !hasFile {
		return "", "", &audioError{http.StatusBadRequest, "invalid_multipart", "file", "the form has no file field"}
	}
	if !hasLang {
		if err := mw.WriteField("language", parakeetLanguage); err != nil {
			return "", "", err
		}
	}
	if err := mw.Close(); err != nil {
		return "", "", err
	}
	return model, mw.FormDataContentType(), nil
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
	c, ok := p.authenticate(w, r)
	if !ok {
		return
	}
	limit := p.cfg.MaxAudioBytes
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the request body exceeds %d bytes", limit))
		return
	}
	f, err := os.CreateTemp("", "cosmicac-audio-*")
	if err != nil {
		p.log.Error("spool an upload", "err", err)
		writeError(w, http.StatusInternalServerError, "spool_failed", "the upload cannot be stored now; retry")
		return
	}
	os.Remove(f.Name()) // the open file is all there is: nothing is left behind
	defer f.Close()
	model, ct, err := spoolAudio(http.MaxBytesReader(w, r.Body, limit), r.Header.Get("Content-Type"), f)
	if err != nil {
		var ae *audioError
		if !errors.As(err, &ae) {
			p.log.Error("spool an upload", "err", err)
			writeError(w, http.StatusInternalServerError, "spool_failed", "the upload cannot be stored now; retry")
			return
		}
		writeParamError(w, ae.status, ae.code, ae.param, ae.msg)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "spool_failed", "the upload cannot be stored now; retry")
		return
	}
	r.Header.Set("Content-Type", ct)
	p.forward(w, r, c, model, reqBody{at: f, size: size}, false)
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
