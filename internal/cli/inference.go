package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/cosmicac/cosmicac/internal/inferproxy/proxyapi"
	"github.com/spf13/cobra"
)

// envAPIKey is where `cosmicac inference` finds an API key without --api-key.
const envAPIKey = "COSMICAC_API_KEY"

func init() {
	Register((*App).inferenceCommand)
}

// inferCallFlags are the flags of the commands that call /inference/v1.
type inferCallFlags struct {
	url, apiKey, model string
}

func (f *inferCallFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "url", "", "CosmicAC URL (default $"+envURL+", the login config, or "+DefaultURL+")")
	cmd.PersistentFlags().StringVar(&f.apiKey, "api-key", "", "inference API key (default $"+envAPIKey+"; none for models without authorization)")
}

func (a *App) inferenceCommand() *cobra.Command {
	var f inferCallFlags
	cmd := &cobra.Command{
		Use:   "inference",
		Short: "Talk to a managed inference model through /inference/v1 (OpenAI-compatible)",
	}
	f.add(cmd)
	cmd.AddCommand(a.inferenceChatCommand(&f), a.inferenceTranscribeCommand(&f), a.inferenceModelsCommand(&f))
	return cmd
}

// endpoint returns the /inference/v1 base URL and the API key.
func (a *App) endpoint(f *inferCallFlags) (string, string, error) {
	cfg, err := a.clientConfig(&connFlags{url: f.url, token: "-"})
	if err != nil {
		return "", "", err
	}
	key := f.apiKey
	if key == "" {
		key = a.Getenv(envAPIKey)
	}
	return strings.TrimSuffix(strings.TrimRight(cfg.URL, "/"), "/api/v1") + proxyapi.Prefix, key, nil
}

// inferenceError turns an OpenAI-shaped error answer into what the user reads.
// A 401 to a call that sent no key (key "") says how to get one.
func inferenceError(resp *http.Response, key string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct{ Message, Code string }
	}
	var err error
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		err = fmt.Errorf("%s (%d): %s", e.Error.Code, resp.StatusCode, e.Error.Message)
	} else {
		err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if resp.StatusCode == http.StatusUnauthorized && key == "" {
		err = fmt.Errorf("%w\n%s", err, noKeyHint)
	}
	return WithExit(ExitFailure, err)
}

// postInference posts body, of contentType, to path under base (the
// endpoint), with key if there is one. It returns the answer if it is 200
// OK, else the error the answer says (inferenceError).
func postInference(ctx context.Context, base, path, key, contentType string, body io.Reader) (*http.Response, error) {
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, body)
	hr.Header.Set("Content-Type", contentType)
	if key != "" {
		hr.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return nil, WithExit(ExitFailure, fmt.Errorf("cannot reach %s: %w", base, err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, inferenceError(resp, key)
	}
	return resp, nil
}

// noKeyHint says how to get an API key: any member of the model's team
// may make one (docs/permissions.md, "API keys").
const noKeyHint = "no API key was sent: this model needs one of its team's keys. Make one (members of the team may) and use it:\n" +
	"  export " + envAPIKey + "=$(cosmicac api-keys create my-key -q)\n" +
	"or pass --api-key KEY (cosmicac api-keys create --help; add --team TEAM for another of your teams)"

func (a *App) inferenceChatCommand(f *inferCallFlags) *cobra.Command {
	var (
		stream    bool
		maxTokens int
		system    string
	)
	cmd := &cobra.Command{
		Use:   "chat --model M [--stream] [--api-key K] MESSAGE",
		Short: "Send one chat message to a model and print the answer",
		Example: "  cosmicac inference chat --model Qwen/Qwen3-32B 'Why is the sky blue?'\n" +
			"  COSMICAC_API_KEY=sk-cac-… cosmicac inference chat --model qwen --stream 'Tell me a story'",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.model == "" {
				return UsageErrorf("--model is required")
			}
			base, key, err := a.endpoint(f)
			if err != nil {
				return err
			}
			var msgs []map[string]string
			if system != "" {
				msgs = append(msgs, map[string]string{"role": "system", "content": system})
			}
			msgs = append(msgs, map[string]string{"role": "user", "content": strings.Join(args, " ")})
			req := map[string]any{"model": f.model, "messages": msgs, "stream": stream}
			if maxTokens > 0 {
				req["max_tokens"] = maxTokens
			}
			if stream {
				req["stream_options"] = map[string]bool{"include_usage": true}
			}
			body, _ := json.Marshal(req)
			resp, err := postInference(cmd.Context(), base, "/chat/completions", key, "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if !stream {
				var out struct {
					Choices []struct {
						Message struct{ Content string }
					}
				}
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
					return WithExit(ExitFailure, fmt.Errorf("decode the answer: %w", err))
				}
				if len(out.Choices) > 0 {
					fmt.Fprintln(a.Stdout, out.Choices[0].Message.Content)
				}
				return nil
			}
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok && data != "[DONE]" {
					var c struct {
						Choices []struct {
							Delta struct{ Content string }
						}
					}
					if json.Unmarshal([]byte(data), &c) == nil && len(c.Choices) > 0 {
						fmt.Fprint(a.Stdout, c.Choices[0].Delta.Content)
					}
				}
				if err != nil {
					fmt.Fprintln(a.Stdout)
					if err == io.EOF {
						return nil
					}
					return WithExit(ExitFailure, fmt.Errorf("the stream broke: %w", err))
				}
			}
		},
	}
	cmd.Flags().StringVarP(&f.model, "model", "m", "", "the model's served name (see 'cosmicac inference models')")
	cmd.Flags().BoolVar(&stream, "stream", false, "print the answer as it is generated")
	cmd.Flags().IntVar(&maxTokens, "max-tokens", 0, "the most tokens to generate (default: the model's)")
	cmd.Flags().StringVar(&system, "system", "", "a system message sent first")
	return cmd
}

func (a *App) inferenceTranscribeCommand(f *inferCallFlags) *cobra.Command {
	var format, language string
	cmd := &cobra.Command{
		Use:     "transcribe --model M FILE",
		Short:   "Transcribe an audio file (speech to text, e.g. with " + "nvidia/parakeet-tdt-0.6b-v3)",
		Example: "  cosmicac inference transcribe --model nvidia/parakeet-tdt-0.6b-v3 meeting.wav",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.model == "" {
				return UsageErrorf("--model is required")
			}
			audio, err := os.ReadFile(args[0])
			if err != nil {
				return UsageErrorf("%v", err)
			}
			base, key, err := a.endpoint(f)
			if err != nil {
				return err
			}
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			mw.WriteField("model", f.model)
			if format != "" {
				mw.WriteField("response_format", format)
			}
			if language != "" {
				mw.WriteField("language", language)
			}
			fw, _ := mw.CreateFormFile("file", filepath.Base(args[0]))
			fw.Write(audio)
			mw.Close()
			resp, err := postInference(cmd.Context(), base, "/audio/transcriptions", key, mw.FormDataContentType(), &body)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if format != "" && format != "json" {
				_, err := io.Copy(a.Stdout, resp.Body)
				return err
			}
			var out struct{ Text string }
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				return WithExit(ExitFailure, fmt.Errorf("decode the answer: %w", err))
			}
			fmt.Fprintln(a.Stdout, out.Text)
			return nil
		},
	}
	cmd.Flags().StringVarP(&f.model, "model", "m", "", "the model's served name")
	cmd.Flags().StringVar(&format, "format", "", "response_format: json (default: print the text) or text (the parakeet runtime, NVIDIA's ASR NIM, gives no others)")
	cmd.Flags().StringVar(&language, "language", "", "the audio's language as a BCP-47 code (en-US, de-DE, …); default: detected (multi)")
	return cmd
}
