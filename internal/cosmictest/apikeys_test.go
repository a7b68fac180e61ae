package cosmictest

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// refusedSoon polls until a chat with secret is answered 401 and returns
// how long that took. The deadline is the harness's (generous, for a busy
// machine); the bound itself (1 s) is checked in fake time by
// internal/inferproxy's TestRevokedKeyRefusedWithinASecond.
func (e *Env) refusedSoon(what, secret string) time.Duration {
	e.T.Helper()
	start := time.Now()
	e.waitStatus(what, secret, 401)
	took := time.Since(start)
	e.T.Logf("%s: refused %v after the change", what, took.Round(time.Millisecond))
	return took
}

// waitStatus polls until a chat completion of qwen with secret ("": none)
// answers status (200: it succeeds).
func (e *Env) waitStatus(what, secret string, status int) {
	e.T.Helper()
	e.waitStatusOf(what, "qwen", secret, status)
}

// waitStatusOf is waitStatus for model.
func (e *Env) waitStatusOf(what, model, secret string, status int) {
	e.T.Helper()
	waittest.NoError(e.T, func() error {
		c := e.openAI(secret)
		_, err := c.Chat.Completions.New(e.Ctx, chat(model))
		switch {
		case status == 200 && err == nil:
			return nil
		case status == 200:
			return err
		case err == nil:
			return fmt.Errorf("answered, want %d", status)
		}
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != status {
			return fmt.Errorf("%v, want %d", err, status)
		}
		return nil
	}, "%s: a chat completion answered %d", what, status)
}

// chat is a one-token chat completion of model.
func chat(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(1),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
}

// TestAPIKeyLimitsRotationRevocation: through the platform's API and the
// official OpenAI SDK: a key limited to one model reaches it and gets 404
// for another; a key with an expiry shows it; a rotated key's old secret
// works during its grace next to the new one; a second rotation without
// grace ends the replaced secret, a revoked key is refused, both quickly;
// and "require authorization" turned off and on on the running job is
// followed by proxy-inference.
func TestAPIKeyLimitsRotationRevocation(t *testing.T) {
	e := NewEnv(t)
	qwen := e.Create(inference("qwen", cosmic.RuntimeVLLM, "Qwen/Qwen3-32B", 1, 1))
	e.WaitState(qwen.ID, cosmic.StateRunning)
	e.waitReplicas(qwen.ID, 1)

	limited, err := e.Client.CreateAPIKeyWith(e.Ctx, apiv1.CreateAPIKey{Name: "qwen-only", Models: []string{"qwen"}, ExpiresIn: "720h"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(limited.Models, []string{"qwen"}) || time.Until(limited.ExpiresAt) < 719*time.Hour {
		t.Fatalf("created key %+v: want models [qwen], expiring in 720h", limited.APIKey)
	}
	other, err := e.Client.CreateAPIKeyWith(e.Ctx, apiv1.CreateAPIKey{Name: "llama-only", Models: []string{"llama"}})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStatus("a key for qwen", limited.Key, 200)
	oc := e.openAI(other.Key)
	_, err = oc.Chat.Completions.New(e.Ctx, chat("qwen"))
	wantOpenAIError(t, "a key for llama only, asking qwen", err, 404, "model_not_found")
	if page, err := oc.Models.List(e.Ctx); err != nil || len(page.Data) != 0 {
		t.Fatalf("models of a key for llama only: %+v %v, want none", page, err)
	}

	// Rotation: both secrets work during the grace.
	key, err := e.Client.CreateAPIKey(e.Ctx, "rotating", "")
	if err != nil {
		t.Fatal(err)
	}
	first := key.Key
	e.waitStatus("a new key", first, 200)
	rot, err := e.Client.RotateAPIKey(e.Ctx, key.ID, "1h")
	if err != nil {
		t.Fatal(err)
	}
	second := rot.Key
	if second == first || rot.ID != key.ID || rot.RotatedAt.IsZero() || time.Until(rot.PreviousExpiresAt) < 59*time.Minute {
		t.Fatalf("rotated key %+v: want a new secret, the same ID, the old one kept an hour", rot.APIKey)
	}
	for name, s := range map[string]string{"the old secret in its grace": first, "the new secret": second} {
		c := e.openAI(s)
		for range 5 {
			if _, err := c.Chat.Completions.New(e.Ctx, chat("qwen")); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	keys, err := e.Client.ListAPIKeys(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(keys, func(k apiv1.APIKey) bool { return k.ID == key.ID }); i < 0 || keys[i].PreviousExpiresAt.IsZero() || keys[i].Prefix != rot.Prefix {
		t.Fatalf("listed keys %+v: want %s with its new prefix and the old secret's end", keys, key.ID)
	}

	// Rotated again without grace: the secret it replaces stops, and the
	// one before it too (only one previous secret is kept).
	third, err := e.Client.RotateAPIKey(e.Ctx, key.ID, "0s")
	if err != nil {
		t.Fatal(err)
	}
	e.refusedSoon("the replaced secret, no grace", second)
	e.refusedSoon("the first secret, rotated twice", first)
	e.waitStatus("the third secret", third.Key, 200)

	// Revoked: refused quickly.
	if err := e.Client.RevokeAPIKey(e.Ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	e.refusedSoon("the revoked key", third.Key)

	// "Require authorization" off, then on, while the job runs.
	if j, err := e.Client.SetRequireAuth(e.Ctx, qwen.ID, false); err != nil || j.Spec.Inference.AuthRequired() || j.Status.State != cosmic.StateRunning {
		t.Fatalf("require-auth off: %v (%+v)", err, j.Spec.Inference)
	}
	open := "@" + qwen.Team + "/qwen" // an open model's full name (docs/inference.md, "Model names")
	e.waitStatusOf("no key, require-auth off", open, "", 200)
	e.waitStatusOf("no key, require-auth off, the bare name", "qwen", "", 401)
	if _, err := e.Client.SetRequireAuth(e.Ctx, qwen.ID, true); err != nil {
		t.Fatal(err)
	}
	e.waitStatusOf("no key, require-auth on again", open, "", 401)
	gpu := e.Create(Container("box", 1))
	if _, err := e.Client.SetRequireAuth(e.Ctx, gpu.ID, false); client.StatusOf(err) != http.StatusConflict {
		t.Fatalf("require-auth of a gpu-container job: %v, want 409", err)
	}
}
