package cosmictest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/s3test"
)

// modelStore starts the real S3 server with the test chat model uploaded
// as models/PREFIX/model.gguf, registered as the team's datastore main.
func modelStore(t testing.TB, e *Env, prefixes ...string) *s3test.Server {
	t.Helper()
	srv := s3test.Start(t)
	srv.MakeBucket(t, "models")
	dir := t.TempDir()
	if _, err := testmodel.Install(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range prefixes {
		if _, err := srv.Client(t).FPutObject(t.Context(), "models", p+"/model.gguf", agentapi.ModelFile(dir, testmodel.ChatModel), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.AddDatastore(srv, "main")
	return srv
}

// TestModelFromADatastore: a llama.cpp job whose model is in the team's
// datastore (inference.modelSource) is served by the real engine from
// the node's cache: its first replica copies the model there, its second
// finds it, and so does the next job naming the same content; each says
// so in its log. The model's name is the model's and the weights are the
// datastore's: no file of the node's model directory is used. An alias
// the team does not have is refused at create, by its field.
func TestModelFromADatastore(t *testing.T) {
	e := NewEnv(t, withLlama(t))
	modelStore(t, e, "chat")
	spec := inference("from-store", cosmic.RuntimeLlamaCPP, "acme/chat", 2, 1)
	spec.Inference.Args = map[string]string{"ctx-size": "512"}
	spec.Inference.ModelSource = &cosmic.DataStoreSource{Alias: "main", Container: "models", Prefix: "chat"}
	j := e.Create(spec)
	e.WaitState(j.ID, cosmic.StateRunning)
	e.waitReplicas(j.ID, 2)
	key, err := e.Client.CreateAPIKey(e.Ctx, "model", "")
	if err != nil {
		t.Fatal(err)
	}
	oa := e.openAI(key.Key)
	resp, err := oa.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{
		Model: "from-store", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")}, MaxTokens: openai.Int(8)})
	if err != nil || len(resp.Choices) == 0 || resp.Usage.CompletionTokens == 0 {
		t.Fatalf("a chat with the model from the datastore: %+v, %v", resp, err)
	}
	modelLines := func(id string, want int) []string {
		var lines []string
		e.records(id, func(rs []client.LogRecord) bool {
			lines = lines[:0]
			for _, r := range rs {
				if r.Step == "model" && strings.Contains(r.Line, "node's cache") && !strings.HasPrefix(r.Line, "taking") {
					lines = append(lines, r.Line)
				}
			}
			return len(lines) >= want
		})
		return lines
	}
	lines := modelLines(j.ID, 2)
	copied, found := 0, 0
	for _, l := range lines {
		switch {
		case strings.Contains(l, "copied into the node's cache"):
			copied++
		case strings.Contains(l, "in the node's cache already"):
			found++
		}
	}
	if copied != 1 || found != 1 {
		t.Errorf("the two replicas' model records: %q; want one copy, and the other found in the cache", lines)
	}
	next := inference("again", cosmic.RuntimeLlamaCPP, "acme/chat", 1, 1)
	next.Inference.ModelSource = spec.Inference.ModelSource
	j2 := e.Create(next)
	e.WaitState(j2.ID, cosmic.StateRunning)
	if l := modelLines(j2.ID, 1); !strings.Contains(l[0], "already") {
		t.Errorf("the next job's model record: %q; want it found in the node's cache", l[0])
	}
	entries, err := os.ReadDir(e.DataDir + "/cache/models")
	if err != nil || len(entries) != 1 {
		t.Errorf("the node's cache holds %d entries (%v), want the one content", len(entries), err)
	}

	bad := inference("nowhere", cosmic.RuntimeLlamaCPP, "acme/chat", 1, 1)
	bad.Inference.ModelSource = &cosmic.DataStoreSource{Alias: "theirs", Container: "models", Prefix: "chat"}
	if _, err := e.Client.CreateJob(e.Ctx, bad); err == nil || !strings.Contains(err.Error(), "inference.modelSource.alias") {
		t.Errorf("a model from a datastore the team does not have: %v, want refused on inference.modelSource.alias", err)
	}
}

// BenchmarkModelStart: create → running of a llama.cpp job with the real
// engine and a model of about 330 MB (a chat model of 8 blocks of 1024),
// three ways in one run: the model from the team's datastore into a cold
// node cache (copied, checked, then loaded), the same model again from
// the warm cache (loaded only), and the baseline, the model in the node's
// model directory, where no copy ever happens. Each round writes a model
// of its own (another general.name: other bytes), so each cold start is
// cold. docs/benchmarks.md, "Data sync".
//
//	COSMICAC_LLAMA_SERVER=$(hack/build-llama.sh --print-dest)/bin/llama-server \
//	COSMICAC_S3_SERVER=$(hack/build-s3.sh --print-dest)/versitygw \
//	  go test -run '^$' -bench ModelStart -benchtime 3x -timeout 20m ./internal/cosmictest
func BenchmarkModelStart(b *testing.B) {
	server := llamaServer(b)
	modelDir := b.TempDir()
	e := NewEnv(b, func(c *platform.Config) { c.LlamaServer, c.ModelDir = server, modelDir })
	srv := modelStore(b, e)
	vocab, err := testmodel.ChatVocab()
	if err != nil {
		b.Fatal(err)
	}
	start := func(name, model string, src *cosmic.DataStoreSource) time.Duration {
		b.Helper()
		s := inference(name, cosmic.RuntimeLlamaCPP, model, 1, 1)
		s.Inference.Args = map[string]string{"ctx-size": "512"}
		s.Inference.ModelSource = src
		t0 := time.Now()
		j := e.Create(s)
		e.WaitStateWithin(j.ID, 10*time.Minute, cosmic.StateRunning)
		d := time.Since(t0)
		if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
			b.Fatal(err)
		}
		e.WaitGone(j.ID)
		return d
	}
	var cold, warm, local time.Duration
	var size int64
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bench-%d", i)
		path := filepath.Join(modelDir, "bench", name+".gguf")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := testmodel.Chat(f, vocab, testmodel.ChatOptions{Name: name, EmbeddingLength: 1024, BlockCount: 8, HeadCount: 8, HeadCountKV: 4, FeedForwardLength: 2816}); err != nil {
			b.Fatal(err)
		}
		f.Close()
		st, _ := os.Stat(path)
		size = st.Size()
		if _, err := srv.Client(b).FPutObject(b.Context(), "models", name+"/model.gguf", path, minio.PutObjectOptions{}); err != nil {
			b.Fatal(err)
		}
		src := &cosmic.DataStoreSource{Alias: "main", Container: "models", Prefix: name}
		// The order turns each round, so that no way always comes first.
		ways := []func(){
			func() {
				cold += start(name+"-cold", "bench/model", src)
				warm += start(name+"-warm", "bench/model", src)
			},
			func() { local += start(name+"-local", "bench/"+name, nil) },
		}
		if i%2 == 1 {
			ways[0], ways[1] = ways[1], ways[0]
		}
		for _, w := range ways {
			w()
		}
	}
	n := float64(b.N)
	b.ReportMetric(cold.Seconds()/n, "cold-s")
	b.ReportMetric(warm.Seconds()/n, "warm-s")
	b.ReportMetric(local.Seconds()/n, "modeldir-s")
	b.ReportMetric(float64(size)/1e6, "model-MB")
	b.ReportMetric(0, "ns/op")
}
