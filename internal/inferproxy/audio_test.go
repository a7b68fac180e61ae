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
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/wav"
)

// tenMinutes is what a user sends: 10 minutes of 16 kHz mono 16-bit WAV,
// about 19 MB.
func tenMinutes() []byte { return wav.Tone(600, 16000) }

// TestTranscriptionTenMinutes: the OpenAI Go SDK uploads a 10-minute WAV
// through the proxy and an agent to the parakeet runtime (the simulated
// ASR NIM), and gets its transcript; the formats the NIM cannot give are
// refused by the proxy with 400 naming response_format.
func TestTranscriptionTenMinutes(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), KeyTTL: config.Duration(100 * time.Millisecond)})
	h.addJob("job-asr", "team-a", cosmic.ParakeetModel, cosmic.RuntimeParakeet, 1, 1, true, simruntime.Config{})
	h.waitReady("job-asr", 1)
	a := sdk(h, h.keys["team-a"])
	ctx := context.Background()
	audio := tenMinutes()
	if len(audio) < 19_000_000 {
		t.Fatalf("the WAV is %d bytes", len(audio))
	}
	tr, err := a.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: cosmic.ParakeetModel,
		File: openai.File(bytes.NewReader(audio), "meeting.wav", "audio/wav")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.Text, "simulated transcript of 600.00 s") {
		t.Fatalf("transcription %q", tr.Text)
	}
	// The Go SDK writes "file" before "model"; the key reaches one
	// transcription model, so the upload went through as it came.
	if got := uploadsByMode(t, h.proxy); got["streamed"] != 1 || len(got) != 1 {
		t.Errorf("uploads by mode %v, want streamed 1", got)
	}
	for _, f := range []openai.AudioResponseFormat{openai.AudioResponseFormatVerboseJSON, openai.AudioResponseFormatSRT, openai.AudioResponseFormatVTT} {
		_, err := a.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: cosmic.ParakeetModel, ResponseFormat: f,
			File: openai.File(bytes.NewReader(audio[:32000]), "a.wav", "audio/wav")})
		wantAPIError(t, string(f), err, 400, "unsupported_response_format")
		var ae *openai.Error
		if errors.As(err, &ae) && ae.Param != "response_format" {
			t.Errorf("%s: param %q", f, ae.Param)
		}
	}
}

// TestRewriteAudioMemory: the proxy rewrites a 19 MB upload part by part
// without holding it in memory, dropping the routing "model" field and
// asking for language "multi" (the NIM's automatic detection).
func TestRewriteAudioMemory(t *testing.T) {
	audio := tenMinutes()
	var in bytes.Buffer
	mw := multipart.NewWriter(&in)
	fw, _ := mw.CreateFormFile("file", "meeting.wav")
	fw.Write(audio)
	mw.WriteField("model", cosmic.ParakeetModel)
	mw.WriteField("response_format", "json")
	mw.Close()
	var out countWriter
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	model, err := rewriteAudio(&in, mw.FormDataContentType(), multipart.NewWriter(&out), nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
		t.Errorf("rewriting %d bytes allocated %d bytes", len(audio), alloc)
	}
	if model != cosmic.ParakeetModel || out.n < int64(len(audio)) {
		t.Fatalf("model %q, %d bytes written", model, out.n)
	}

	// The rewritten form, on a small upload.
	in.Reset()
	mw = multipart.NewWriter(&in)
	fw, _ = mw.CreateFormFile("file", "a.wav")
	fw.Write(audio[:1000])
	mw.WriteField("model", "asr")
	mw.Close()
	var spool bytes.Buffer
	ow := multipart.NewWriter(&spool)
	if _, err := rewriteAudio(&in, mw.FormDataContentType(), ow, nil); err != nil {
		t.Fatal(err)
	}
	_, params, _ := mime.ParseMediaType(ow.FormDataContentType())
	mr := multipart.NewReader(&spool, params["boundary"])
	var fields []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		v, _ := io.ReadAll(p)
		if p.FormName() == "file" {
			v = []byte("…")
		}
		fields = append(fields, p.FormName()+"="+string(v))
	}
	if got := strings.Join(fields, " "); got != "file=… language=multi" {
		t.Errorf("forwarded form %q", got)
	}
}

// TestRewriteAudioRoutes: the rewrite asks for a route where the file
// begins, with the model named before it (if any), and holds a model
// named after it to the route taken.
func TestRewriteAudioRoutes(t *testing.T) {
	form := func(fields ...string) (*bytes.Buffer, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for _, f := range fields {
			if f == "file" {
				fw, _ := mw.CreateFormFile("file", "a.wav")
				fw.Write([]byte("RIFF"))
				continue
			}
			k, v, _ := strings.Cut(f, "=")
			mw.WriteField(k, v)
		}
		mw.Close()
		return &b, mw.FormDataContentType()
	}
	for _, tc := range []struct {
		name      string
		fields    []string
		route     string // what the route answers
		wantAsked string // the model route was asked with
		wantModel string
		wantWrong string // the model of a wrongModel error
	}{
		{"model first", []string{"model=asr", "file"}, "asr", "asr", "asr", ""},
		{"file first, sent to it", []string{"file", "model=asr"}, "asr", "", "asr", ""},
		{"file first, sent elsewhere", []string{"file", "model=other"}, "asr", "", "", "other"},
		{"file first, no model", []string{"file"}, "asr", "", "", ""},
		{"file first, not sent", []string{"file", "model=other"}, "", "", "other", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, ct := form(tc.fields...)
			asked := "unasked"
			model, err := rewriteAudio(in, ct, multipart.NewWriter(io.Discard), func(m string) string { asked = m; return tc.route })
			if asked != tc.wantAsked {
				t.Errorf("route asked with %q, want %q", asked, tc.wantAsked)
			}
			var wm *wrongModel
			switch {
			case tc.wantWrong != "" || tc.name == "file first, no model":
				if !errors.As(err, &wm) || wm.model != tc.wantWrong {
					t.Fatalf("err %v, want the wrong model %q", err, tc.wantWrong)
				}
			case err != nil:
				t.Fatal(err)
			case model != tc.wantModel:
				t.Errorf("model %q, want %q", model, tc.wantModel)
			}
		})
	}
}

// TestTranscriptionStreamsThrough: an upload reaches the runtime while the
// client is still sending it, whether the form names its model first (the
// Python SDK's order) or after the file (the Go and JavaScript SDKs'),
// and is spooled to its end first only when the model comes after the file
// and the caller reaches several transcription models. Sent to the one
// model before its name came, a form naming another is answered as that
// name is, and the runtime never gets it whole.
func TestTranscriptionStreamsThrough(t *testing.T) {
	audio := wav.Tone(120, 16000) // 3.8 MB
	for _, tc := range []struct {
		name       string
		modelFirst bool
		models     int
		streamed   bool
	}{
		{"model first", true, 1, true},
		{"file first, one transcription model", false, 1, true},
		{"model first, two transcription models", true, 2, true},
		{"file first, two transcription models", false, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), KeyTTL: config.Duration(100 * time.Millisecond)})
			var seen, whole atomic.Int64
			sim := simruntime.Config{OnUpload: func(n int64, done bool) {
				if n > 1<<20 {
					seen.Store(n)
					if done {
						whole.Add(1)
					}
				}
			}}
			h.addJob("job-asr", "team-a", "asr", cosmic.RuntimeParakeet, 1, 1, true, sim)
			if tc.models == 2 {
				h.addJob("job-asr2", "team-a", "asr2", cosmic.RuntimeParakeet, 1, 1, true, simruntime.Config{})
				h.waitReady("job-asr2", 1)
			}
			h.waitReady("job-asr", 1)

			pr, pw := io.Pipe()
			t.Cleanup(func() { pw.CloseWithError(errors.New("the test ended")) }) // before the harness's
			mw := multipart.NewWriter(pw)
			req, _ := http.NewRequest("POST", h.srv.URL+Prefix+"/audio/transcriptions", pr)
			req.Header.Set("Authorization", "Bearer "+h.keys["team-a"])
			req.Header.Set("Content-Type", mw.FormDataContentType())
			type answer struct {
				status int
				body   string
				err    error
			}
			answered := make(chan answer, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answered <- answer{err: err}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answered <- answer{status: resp.StatusCode, body: string(b)}
			}()
			if tc.modelFirst {
				mw.WriteField("model", "asr")
			}
			fw, _ := mw.CreateFormFile("file", "talk.wav")
			half := len(audio) / 2
			fw.Write(audio[:half])
			if tc.streamed {
				// The runtime reads the first half before the client sends the rest.
				waittest.NoError(t, func() error {
					if seen.Load() < int64(half)/2 {
						return fmt.Errorf("the runtime has read %d bytes of the upload's first %d: the proxy holds it back", seen.Load(), half)
					}
					return nil
				}, "the runtime to read the upload's first half")
			}
			fw.Write(audio[half:])
			if !tc.modelFirst {
				mw.WriteField("model", "asr")
			}
			mw.Close()
			pw.Close()
			a := <-answered
			if a.err != nil || a.status != 200 || !strings.Contains(a.body, "simulated transcript of 120.00 s") {
				t.Fatalf("answer %d %q %v", a.status, a.body, a.err)
			}
			mode := "spooled"
			if tc.streamed {
				mode = "streamed"
			}
			if got := uploadsByMode(t, h.proxy); got[mode] != 1 || len(got) != 1 {
				t.Errorf("uploads by mode %v, want %s 1", got, mode)
			}

			if tc.models != 1 || tc.modelFirst {
				return
			}
			// Sent to "asr" at once; the form then names another model.
			before := whole.Load()
			cl := sdk(h, h.keys["team-a"])
			for _, m := range []string{"nope", ""} {
				_, err := cl.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{Model: m,
					File: openai.File(bytes.NewReader(audio), "talk.wav", "audio/wav")})
				if m == "" {
					wantAPIError(t, "no model", err, 400, "model_required")
				} else {
					wantAPIError(t, "another model", err, 404, "model_not_found")
				}
			}
			if whole.Load() != before {
				t.Errorf("the runtime answered a form that named another model")
			}
		})
	}
}

// TestStreamedUploadFailsOver: a streamed upload that a replica refuses
// (503) goes again, from its start, to the other replica, and the
// transcript is of the whole audio. (Which replica is tried first is
// random: uploads go until one met the refusing replica first.)
func TestStreamedUploadFailsOver(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), KeyTTL: config.Duration(100 * time.Millisecond)})
	h.baseCfg.ProbeInterval = time.Hour // the agents' probes must not meet the fault
	h.addJob("job-asr", "team-a", "asr", cosmic.RuntimeParakeet, 2, 1, true, simruntime.Config{})
	h.waitReady("job-asr", 2)
	h.agents["job-asr"][0].sim.Runtime().SetFaults(simruntime.Faults{FailRate: 1, Status: http.StatusServiceUnavailable})
	cl := sdk(h, h.keys["team-a"])
	audio := wav.Tone(60, 16000)
	retries := func() float64 { return counterSum(t, h.proxy, "cosmicac_inference_retries_total") }
	for i := 1; retries() == 0; i++ {
		if i > 30 {
			t.Fatal("30 uploads, and none was tried on the refusing replica first")
		}
		tr, err := cl.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{Model: "asr",
			File: openai.File(bytes.NewReader(audio), "talk.wav", "audio/wav")})
		if err != nil {
			var ae *openai.Error
			if errors.As(err, &ae) {
				t.Fatalf("upload %d: %v: %s", i, err, ae.RawJSON())
			}
			t.Fatalf("upload %d: %v", i, err)
		}
		if !strings.Contains(tr.Text, "simulated transcript of 60.00 s") {
			t.Fatalf("upload %d: transcription %q", i, tr.Text)
		}
		if got := uploadsByMode(t, h.proxy); got["streamed"] != float64(i) {
			t.Fatalf("uploads by mode %v, want streamed %d", got, i)
		}
	}
}

// uploadsByMode reads cosmicac_inference_uploads_total.
func uploadsByMode(t *testing.T, p *Proxy) map[string]float64 {
	return countersByLabel(t, p, "cosmicac_inference_uploads_total")
}

// countersByLabel sums the counter name of p's metrics by its first
// label's value.
func countersByLabel(t *testing.T, p *Proxy, name string) map[string]float64 {
	t.Helper()
	mfs, err := gatherer(p).Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return got
}

// counterSum is the counter name of p's metrics, summed over its labels.
func counterSum(t *testing.T, p *Proxy, name string) float64 {
	t.Helper()
	n := 0.0
	for _, v := range countersByLabel(t, p, name) {
		n += v
	}
	return n
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
