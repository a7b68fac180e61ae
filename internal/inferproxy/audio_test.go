package inferproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
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

// TestSpoolAudioMemory: the proxy copies a 19 MB upload part by part to
// its spool without holding it in memory, dropping the routing "model"
// field and asking for language "multi" (the NIM's automatic detection).
func TestSpoolAudioMemory(t *testing.T) {
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
	model, _, err := spoolAudio(&in, mw.FormDataContentType(), &out)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
		t.Errorf("spooling %d bytes allocated %d bytes", len(audio), alloc)
	}
	if model != cosmic.ParakeetModel || out.n < int64(len(audio)) {
		t.Fatalf("model %q, %d bytes spooled", model, out.n)
	}

	// The rewritten form, on a small upload.
	in.Reset()
	mw = multipart.NewWriter(&in)
	fw, _ = mw.CreateFormFile("file", "a.wav")
	fw.Write(audio[:1000])
	mw.WriteField("model", "asr")
	mw.Close()
	var spool bytes.Buffer
	_, ct, err := spoolAudio(&in, mw.FormDataContentType(), &spool)
	if err != nil {
		t.Fatal(err)
	}
	_, params, _ := mime.ParseMediaType(ct)
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

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
