package inferproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/simruntime"
	"github.com/cosmicac/cosmicac/internal/wav"
)

// TestOpenAISDKBeyondChat drives, with the official OpenAI Go SDK through
// the proxy, agents and simulated runtimes, what issue 32 found ignored
// or missing: embeddings in base64 (the SDKs' default) and in floats, n
// choices (streamed too), tools with tool_choice as vLLM answers them
// (auto needs the job's --enable-auto-tool-choice and --tool-call-parser),
// the Responses API (streamed too) and audio translations.
func TestOpenAISDKBeyondChat(t *testing.T) {
	h := newHarness(t, Config{LookupTTL: config.Duration(100 * time.Millisecond), KeyTTL: config.Duration(100 * time.Millisecond)})
	on := true
	h.addJob("job-qwen", "team-a", "qwen", cosmic.RuntimeVLLM, 1, 1, true, simruntime.Config{})
	h.addJobSpec("job-tools", "team-a", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "Qwen/Qwen3-8B", ServedModelName: "qwen-tools",
		RequireAuth: &on, Args: map[string]string{"enable-auto-tool-choice": "true", "tool-call-parser": "hermes"}}, 1, 1, simruntime.Config{})
	h.addJobSpec("job-emb", "team-a", cosmic.InferenceSpec{Runtime: cosmic.RuntimeVLLM, Model: "BAAI/bge-m3", ServedModelName: "bge",
		RequireAuth: &on, Args: map[string]string{"runner": "pooling"}}, 1, 1, simruntime.Config{})
	h.addJob("job-asr", "team-a", cosmic.ParakeetModel, cosmic.RuntimeParakeet, 1, 1, true, simruntime.Config{})
	for _, j := range []string{"job-qwen", "job-tools", "job-emb", "job-asr"} {
		h.waitReady(j, 1)
	}
	ctx := context.Background()
	a := sdk(h, h.keys["team-a"])

	t.Run("embeddings", func(t *testing.T) {
		want := simruntime.Embedding("the sky is blue")
		for _, f := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatBase64, openai.EmbeddingNewParamsEncodingFormatFloat} {
			res, err := a.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "bge", EncodingFormat: f,
				Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("the sky is blue")}})
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			got := res.Data[0].Embedding
			if len(got) != simruntime.EmbeddingDims {
				t.Fatalf("%s: %d dimensions, want %d", f, len(got), simruntime.EmbeddingDims)
			}
			for i := range got {
				if float32(got[i]) != want[i] {
					t.Fatalf("%s: embedding %v, want %v", f, got, want)
				}
			}
		}
	})

	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")}
	t.Run("n", func(t *testing.T) {
		cc, err := a.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen", Messages: msgs, N: openai.Int(3), MaxTokens: openai.Int(4)})
		if err != nil {
			t.Fatal(err)
		}
		if len(cc.Choices) != 3 || cc.Usage.CompletionTokens != 12 || cc.Choices[2].Index != 2 || cc.Choices[0].Message.Content == cc.Choices[1].Message.Content {
			t.Fatalf("n=3: %+v", cc)
		}
		stream := a.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "qwen", Messages: msgs, N: openai.Int(3), MaxTokens: openai.Int(4)})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 3 {
			t.Fatalf("streamed n=3: %d choices", len(acc.Choices))
		}
		for i, c := range acc.Choices {
			if c.Message.Content != cc.Choices[i].Message.Content || c.FinishReason != "length" {
				t.Fatalf("streamed choice %d %q (%s), non-streamed %q", i, c.Message.Content, c.FinishReason, cc.Choices[i].Message.Content)
			}
		}
	})

	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}})}
	t.Run("tools", func(t *testing.T) {
		// vLLM without --enable-auto-tool-choice: tools default to "auto", a 400.
		_, err := a.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen", Messages: msgs, Tools: tools})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "--enable-auto-tool-choice") {
			t.Fatalf("tools on a job without auto tool choice: %v, want vLLM's 400", err)
		}
		for _, model := range []string{"qwen-tools", "qwen"} {
			p := openai.ChatCompletionNewParams{Model: model, Messages: msgs, Tools: tools}
			if model == "qwen" { // "required" needs no flag
				p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
			}
			cc, err := a.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatalf("%s: %v", model, err)
			}
			c := cc.Choices[0]
			var args struct{ City string }
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" ||
				json.Unmarshal([]byte(c.Message.ToolCalls[0].Function.Arguments), &args) != nil || args.City == "" {
				t.Fatalf("%s: choice %+v", model, c)
			}
			stream := a.Chat.Completions.NewStreaming(ctx, p)
			var acc openai.ChatCompletionAccumulator
			var finished []openai.FinishedChatCompletionToolCall
			for stream.Next() {
				acc.AddChunk(stream.Current())
				if tc, ok := acc.JustFinishedToolCall(); ok {
					finished = append(finished, tc)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(finished) != 1 || finished[0].Name != "get_weather" || finished[0].Arguments != c.Message.ToolCalls[0].Function.Arguments {
				t.Fatalf("%s: streamed tool calls %+v, want %+v", model, finished, c.Message.ToolCalls[0])
			}
		}
	})

	t.Run("responses", func(t *testing.T) {
		p := responses.ResponseNewParams{Model: "qwen", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")},
			MaxOutputTokens: openai.Int(5)}
		res, err := a.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		text := res.OutputText()
		if res.Object != "response" || len(strings.Fields(text)) != 5 || res.Usage.OutputTokens != 5 || res.Status != "incomplete" || res.IncompleteDetails.Reason != "max_output_tokens" {
			t.Fatalf("response %s", res.RawJSON())
		}
		stream := a.Responses.NewStreaming(ctx, p)
		var deltas strings.Builder
		var types []string
		var done responses.Response
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			switch ev.Type {
			case "response.output_text.delta":
				deltas.WriteString(ev.Delta)
			case "response.completed":
				done = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		want := "response.created response.in_progress response.output_item.added response.content_part.added " +
			strings.Repeat("response.output_text.delta ", 5) +
			"response.output_text.done response.content_part.done response.output_item.done response.completed"
		if strings.Join(types, " ") != want || deltas.String() != text || done.OutputText() != text {
			t.Fatalf("streamed events %v, text %q (completed %q), want %q", types, deltas.String(), done.OutputText(), text)
		}
		// vLLM keeps no responses: previous_response_id names nothing.
		_, err = a.Responses.New(ctx, responses.ResponseNewParams{Model: "qwen", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("again")},
			PreviousResponseID: openai.String(res.ID)})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound {
			t.Fatalf("previous_response_id: %v, want 404", err)
		}
	})

	t.Run("translations", func(t *testing.T) {
		//lint:ignore SA1019 OpenAI deprecates its own translations for realtime ones; vLLM and the NIM serve this route, which the SDK still calls
		tr, err := a.Audio.Translations.New(ctx, openai.AudioTranslationNewParams{Model: cosmic.ParakeetModel,
			File: openai.File(bytes.NewReader(wav.Tone(2, 16000)), "hallo.wav", "audio/wav")})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(tr.Text, "simulated translation into English of 2.00 s") {
			t.Fatalf("translation %q", tr.Text)
		}
		//lint:ignore SA1019 as above
		_, err = a.Audio.Translations.New(ctx, openai.AudioTranslationNewParams{Model: "qwen",
			File: openai.File(bytes.NewReader(wav.Tone(1, 16000)), "hallo.wav", "audio/wav")})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode/100 != 4 {
			t.Fatalf("translation by a chat model: %v, want a 4xx", err)
		}
	})
}
