package vms

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/gguf/testmodel"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/platform"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/testenv"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestQEMURackServesLlamaCPP: a managed-inference job of the llama.cpp
// runtime on the QEMU rack boots a real VM whose inference agent runs
// llama-server from the engine disk, on the project's test chat model;
// proxy-inference reaches it over the fabric (the agent dials out through
// the VM's forwards), and the official OpenAI SDK gets a streamed chat of
// real tokens. Under TCG: one boot, then the model loads in the VM.
func TestQEMURackServesLlamaCPP(t *testing.T) {
	t.Parallel() // minutes of emulated boot: beside the others
	needAMD64Host(t)
	im, _ := vmImage(t)
	server := os.Getenv("COSMICAC_LLAMA_SERVER")
	_, err := os.Stat(server)
	testenv.Require(t, server != "" && err == nil, "COSMICAC_LLAMA_SERVER is not a llama-server (%q): hack/build-llama.sh builds one, hack/test.sh sets it", server)
	models := t.TempDir()
	if _, err := testmodel.Install(models); err != nil {
		t.Fatal(err)
	}
	e, vms := qemuPlatform(t, "debian-12", im, 1, func(c *platform.Config) { c.LlamaServer, c.ModelDir = server, models })
	start := time.Now()
	j := e.Create(cosmic.Spec{Type: cosmic.TypeManagedInference, Name: "vm-llama", Location: "local",
		Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: testmodel.ChatModel, ServedModelName: "vm-chat",
			Replicas: 1, GPUsPerReplica: 1, Args: map[string]string{"ctx-size": "512", "parallel": "1"},
			Adapters: []cosmic.Adapter{{Name: "noise", Source: testmodel.ChatLoRAAdapter}}}})
	key, err := e.Client.CreateAPIKey(e.Ctx, "vm", "")
	if err != nil {
		t.Fatal(err)
	}
	e.WaitStateWithin(j.ID, 8*time.Minute, cosmic.StateRunning)
	running := time.Since(start)
	oa := openai.NewClient(option.WithBaseURL(e.P.URL+inferproxy.Prefix+"/"), option.WithAPIKey(key.Key), option.WithMaxRetries(0))
	var (
		text  strings.Builder
		first time.Duration
		usage openai.CompletionUsage
		hdr   *http.Response
	)
	waittest.NoErrorWithin(t, 3*time.Minute, func() error {
		text.Reset()
		ctx, cancel := context.WithTimeout(e.Ctx, time.Minute)
		defer cancel()
		s := oa.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "vm-chat",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
			MaxTokens:     openai.Int(16),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}, option.WithResponseInto(&hdr))
		for s.Next() {
			c := s.Current()
			for _, ch := range c.Choices {
				if ch.Delta.Content != "" && first == 0 {
					first = time.Since(start)
				}
				text.WriteString(ch.Delta.Content)
			}
			if c.Usage.TotalTokens > 0 {
				usage = c.Usage
			}
		}
		if err := s.Err(); err != nil {
			return err
		}
		if usage.CompletionTokens == 0 || text.Len() == 0 {
			return errors.New("no tokens")
		}
		return nil
	}, "a streamed chat from the VM's llama-server")
	if hdr != nil && hdr.Header.Get(simruntime.HeaderSimulated) != "" {
		t.Errorf("the VM's answer says it is simulated")
	}
	// The adapter came on the engine disk: the VM's engine answers for it,
	// not as the base model does.
	complete := func(model string) string {
		c, err := oa.Completions.New(e.Ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model), MaxTokens: openai.Int(8), Temperature: openai.Float(0),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}})
		if err != nil || len(c.Choices) != 1 {
			t.Fatalf("%s: %v", model, err)
		}
		return c.Choices[0].Text
	}
	if base, adapted := complete("vm-chat"), complete("vm-chat:noise"); base == adapted {
		t.Errorf("the adapter changed nothing in the VM: %q", base)
	}
	t.Logf("llama.cpp on the QEMU rack (%s): create → running %v, create → first token %v; %d tokens: %q",
		e.P.QEMU.Accel(), running.Round(time.Second), first.Round(time.Second), usage.CompletionTokens, text.String())
	if _, err := e.Client.DeleteJob(e.Ctx, j.ID, true); err != nil {
		t.Fatal(err)
	}
	e.WaitGone(j.ID)
	waitNoQEMU(t, vms)
}
