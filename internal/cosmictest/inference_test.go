package cosmictest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/waittest"
	"github.com/cosmicac/cosmicac/internal/wav"
)

// openAI is the official OpenAI SDK pointed at the platform's
// /inference/v1 with key.
func (e *Env) openAI(key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(e.P.URL+inferproxy.Prefix+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// serving creates a managed-inference job of spec and an API key named
// key, and waits until proxy-inference routes to all its replicas; it
// answers the job and the key.
func (e *Env) serving(spec cosmic.Spec, key string) (cosmic.Job, string) {
	e.T.Helper()
	j := e.Create(spec)
	k, err := e.Client.CreateAPIKey(e.Ctx, key, "")
	if err != nil {
		e.T.Fatal(err)
	}
	e.WaitState(j.ID, cosmic.StateRunning)
	e.waitReplicas(j.ID, spec.Inference.Replicas)
	return j, k.Key
}

// waitReplicas waits until proxy-inference routes to n ready replicas of job.
func (e *Env) waitReplicas(jobID string, n int) {
	e.T.Helper()
	e.waitReplicasWithin(jobID, n, 0)
}

// waitReplicasWithin is waitReplicas within d (0: waittest's default):
// for replicas that start while the test loads the machine.
func (e *Env) waitReplicasWithin(jobID string, n int, d time.Duration) {
	e.T.Helper()
	wait := waittest.NoError
	if d > 0 {
		wait = func(t testing.TB, f func() error, format string, args ...any) {
			t.Helper()
			waittest.NoErrorWithin(t, d, f, format, args...)
		}
	}
	wait(e.T, func() error {
		mh, _ := e.P.Proxy.JobHealth(e.Ctx, jobID)
		ready := 0
		for _, r := range mh.Replicas {
			if r.Ready {
				ready++
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d ready: %+v", ready, n, mh)
		}
		return nil
	}, "proxy-inference to route to the replicas of job %s", jobID)
}

// outstanding is the number of requests proxy-inference has sent to each
// replica of job and that have not been answered yet, by replica.
func (e *Env) outstanding(jobID string) map[int]int64 {
	mh, _ := e.P.Proxy.JobHealth(e.Ctx, jobID)
	out := map[int]int64{}
	for _, r := range mh.Replicas {
		out[r.Replica] += r.Outstanding
	}
	return out
}

// wantOpenAIError checks err is an OpenAI-shaped error with status and code.
func wantOpenAIError(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: %v is not an API error", what, err)
	}
	if ae.StatusCode != status || ae.Code != code || ae.Message == "" || ae.Type == "" {
		t.Fatalf("%s: status %d code %q type %q message %q; want %d %q (raw %s)", what, ae.StatusCode, ae.Code, ae.Type, ae.Message, status, code, ae.RawJSON())
	}
}

func inference(name string, rt cosmic.Runtime, model string, replicas, gpus int) cosmic.Spec {
	return cosmic.Spec{Type: cosmic.TypeManagedInference, Name: name, Location: "us",
		Inference: &cosmic.InferenceSpec{Runtime: rt, Model: model, ServedModelName: name, Replicas: replicas, GPUsPerReplica: gpus}}
}

// TestInferenceOpenAI: managed-inference jobs on the simulated rack, API
// keys made through the API, and the official OpenAI SDK against the
// platform's /inference/v1: a chat completion, a streamed one with
// include_usage, the model list, a WAV transcription, a wrong key (401), an
// other team's key (404), each error in OpenAI's shape; model health in
// the job API; listing and revoking keys.
func TestInferenceOpenAI(t *testing.T) {
	e := NewEnv(t)
	qwen := e.Create(inference("qwen", cosmic.RuntimeVLLM, "Qwen/Qwen3-32B", 2, 4))
	asr := e.Create(inference("asr", cosmic.RuntimeParakeet, cosmic.ParakeetModel, 1, 1))
	e.WaitState(qwen.ID, cosmic.StateRunning)
	e.WaitState(asr.ID, cosmic.StateRunning)

	key, err := e.Client.CreateAPIKey(e.Ctx, "sdk", "")
	if err != nil {
		t.Fatal(err)
	}
	if key.Team != "default" || !strings.HasPrefix(key.Key, keyapi.KeyPrefix) || key.ID == "" || !strings.HasPrefix(key.Key, key.Prefix) {
		t.Fatalf("created key %+v", key)
	}
	bob := client.New(e.P.URL, e.AddUser("bob", "team-b", cosmic.RoleAdmin))
	bobKey, err := bob.CreateAPIKey(e.Ctx, "bob", "")
	if err != nil || bobKey.Team != "team-b" {
		t.Fatalf("team-b key %+v %v", bobKey, err)
	}
	if _, err := bob.CreateAPIKey(e.Ctx, "x", "default"); client.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("a key of a team one is not in: %v", err)
	}

	e.waitReplicas(qwen.ID, 2)
	e.waitReplicas(asr.ID, 1)
	a := e.openAI(key.Key)
	cc, err := a.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}, MaxTokens: openai.Int(6)})
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Choices) != 1 || len(strings.Fields(cc.Choices[0].Message.Content)) != 6 || cc.Usage.CompletionTokens != 6 ||
		//lint:ignore SA1019 vLLM still sends system_fingerprint; the test checks that it reaches the client
		cc.SystemFingerprint != simruntime.Fingerprint {
		t.Fatalf("chat completion %+v", cc)
	}

	stream := a.Chat.Completions.NewStreaming(e.Ctx, openai.ChatCompletionNewParams{Model: "qwen",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")},
		MaxTokens:     openai.Int(6),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Usage.CompletionTokens != 6 || acc.Usage.TotalTokens == 0 || acc.Choices[0].Message.Content != cc.Choices[0].Message.Content || chunks < 7 {
		t.Fatalf("stream: %d chunks, usage %+v, text %q (non-streamed %q)", chunks, acc.Usage, acc.Choices[0].Message.Content, cc.Choices[0].Message.Content)
	}

	page, err := a.Models.List(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range page.Data {
		names = append(names, m.ID)
	}
	if strings.Join(names, ",") != "asr,qwen" && strings.Join(names, ",") != "qwen,asr" {
		t.Fatalf("models %v", names)
	}

	tr, err := a.Audio.Transcriptions.New(e.Ctx, openai.AudioTranscriptionNewParams{Model: "asr",
		File: openai.File(bytes.NewReader(wav.Tone(2, 16000)), "hello.wav", "audio/wav")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.Text, "simulated transcript of 2.00 s") {
		t.Fatalf("transcription %q", tr.Text)
	}

	msg := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}
	wrong, other := e.openAI(keyapi.KeyPrefix+"wrong"), e.openAI(bobKey.Key)
	_, err = wrong.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "qwen", Messages: msg})
	wantOpenAIError(t, "wrong key", err, 401, "invalid_api_key")
	_, err = other.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "qwen", Messages: msg})
	wantOpenAIError(t, "another team's model", err, 404, "model_not_found")
	_, err = a.Chat.Completions.New(e.Ctx, openai.ChatCompletionNewParams{Model: "nope", Messages: msg})
	wantOpenAIError(t, "unknown model", err, 404, "model_not_found")

	// proxy-inference's metrics on the platform's /metrics (its metrics
	// listener).
	resp, err := http.Get(e.P.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range []string{`cosmicac_inference_requests_total{code="200",endpoint="chat/completions",model="qwen"} 2`,
		`cosmicac_inference_requests_total{code="401",endpoint="chat/completions",model=""} 1`,
		`cosmicac_inference_requests_total{code="404",endpoint="chat/completions",model=""} 2`,
		`cosmicac_inference_time_to_first_byte_seconds_count{endpoint="chat/completions",model="qwen"} 2`,
		`cosmicac_inference_request_duration_seconds_count{endpoint="audio/transcriptions",model="asr"} 1`,
		`cosmicac_inference_requests_in_flight 0`,
		`cosmicac_inference_replica_outstanding_requests{job="` + qwen.ID + `",model="qwen",replica="0"} 0`} {
		if !strings.Contains(string(body), w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}

	// Model health, apart from the status, in the job API.
	j, err := e.Client.GetJob(e.Ctx, qwen.ID)
	if err != nil || j.Status.ModelHealth != cosmic.ModelHealthy {
		t.Fatalf("model health %q (%v)", j.Status.ModelHealth, err)
	}

	// Keys: each team lists its own; another team's is not found; revoked
	// keys stop working (within the proxy's cache time).
	keys, err := e.Client.ListAPIKeys(e.Ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != key.ID {
		t.Fatalf("keys %+v %v", keys, err)
	}
	if err := bob.RevokeAPIKey(e.Ctx, key.ID); client.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("revoke another team's key: %v", err)
	}
	if err := e.Client.RevokeAPIKey(e.Ctx, bobKey.ID); err != nil { // admins: any
		t.Fatal(err)
	}
	if keys, err := bob.ListAPIKeys(e.Ctx); err != nil || len(keys) != 0 {
		t.Fatalf("team-b keys after revoke: %+v %v", keys, err)
	}
}

// TestInferenceReplicaCrash: a replica of two crashes (simCrash) while
// concurrent streaming requests wait for their first token: they all
// complete on the other replica; the job turns degraded, then running
// after the replica is restarted, and serves on both again.
func TestInferenceReplicaCrash(t *testing.T) {
	// Every stream waits for its first token until the test releases them
	// (at the latest when it ends, before the platform stops).
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	e := NewEnv(t, func(c *platform.Config) {
		c.SimRuntime = simruntime.Config{TTFT: 20 * time.Millisecond, InterTokenDelay: time.Millisecond, Hold: hold}
	})
	t.Cleanup(release)
	j := e.Create(inference("qwen", cosmic.RuntimeVLLM, "Qwen/Qwen3-8B", 2, 4))
	e.WaitState(j.ID, cosmic.StateRunning)
	key, err := e.Client.CreateAPIKey(e.Ctx, "load", "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitReplicas(j.ID, 2)

	const n = 16
	type result struct {
		replica string
		events  int
		done    bool
		err     error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(e.Ctx, 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", e.P.URL+inferproxy.Prefix+"/chat/completions",
				strings.NewReader(`{"model":"qwen","messages":[{"role":"user","content":"tell me"}],"stream":true,"max_tokens":10}`))
			req.Header.Set("Authorization", "Bearer "+key.Key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			r := result{replica: resp.Header.Get("X-CosmicAC-Replica")}
			if resp.StatusCode != 200 {
				r.err = errors.New(resp.Status)
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				l := sc.Text()
				if n, ok := strings.CutPrefix(l, ": replica "); ok && r.events == 0 {
					r.replica = n // failed over after the head went on
				}
				if strings.HasPrefix(l, "data: ") {
					r.events++
					r.done = l == "data: [DONE]"
				}
			}
			if r.err == nil {
				r.err = sc.Err()
			}
			results <- r
		}()
	}
	// None may end while the streams are held: one that does failed.
	endedEarly := func() {
		select {
		case r := <-results:
			t.Fatalf("a request ended while the streams were held: replica %q, %d events, done %v: %v", r.replica, r.events, r.done, r.err)
		default:
		}
	}
	// All of them wait for their first token.
	var before map[int]int64
	waittest.NoError(t, func() error {
		endedEarly()
		if before = e.outstanding(j.ID); before[0]+before[1] != n {
			return fmt.Errorf("outstanding by replica %v, want %d in all", before, n)
		}
		return nil
	}, "the requests to wait for their first token")
	t.Logf("outstanding by replica before the crash: %v", before)
	e.Fault(simapi.MethodCrash, simapi.ReplicaParams{JobID: j.ID, Replica: 0})
	// Those at replica 0 lose it before their first token and go to replica
	// 1, where they wait again; once all are there, they may go on.
	waittest.NoError(t, func() error {
		endedEarly()
		if o := e.outstanding(j.ID); o[1] != n {
			return fmt.Errorf("outstanding by replica %v, want all %d at replica 1", o, n)
		}
		return nil
	}, "the requests to fail over to replica 1")
	release()
	byReplica := map[string]int{}
	for range n {
		r := <-results
		if r.err != nil || !r.done || r.events != 12 {
			t.Fatalf("a request failed: %+v", r)
		}
		byReplica[r.replica]++
	}
	if byReplica["1"] != n {
		t.Fatalf("answers by replica: %v", byReplica)
	}
	d := e.WaitState(j.ID, cosmic.StateDegraded)
	if d.Status.Replicas[0].State != cosmic.StateFailed {
		t.Fatalf("replica 0: %+v", d.Status.Replicas[0])
	}
	if _, err := e.Client.RestartReplica(e.Ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	e.WaitState(j.ID, cosmic.StateRunning)
	e.waitReplicas(j.ID, 2)
	a := e.openAI(key.Key)
	for range 4 {
		if _, err := a.Completions.New(e.Ctx, openai.CompletionNewParams{Model: "qwen",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(2)}); err != nil {
			t.Fatal(err)
		}
	}
}
