package testmodel

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cosmicac/cosmicac/internal/gguf"
)

// The vocabularies Install builds on: llama.cpp's models/ggml-vocab-*.gguf
// (MIT, testdata/LICENSE-llama.cpp), tokenizers without weights.
var (
	//go:embed testdata/ggml-vocab-llama-spm.gguf
	llamaSPM []byte
	//go:embed testdata/ggml-vocab-bert-bge.gguf
	bertBGE []byte
)

// The test models Install writes, by the name a llama.cpp job gives as
// inference.model: the file NAME.gguf of a model directory.
const (
	// ChatModel is Chat on the llama-spm vocab (SentencePiece, 32000
	// tokens), ChatML template: /v1/chat/completions, /v1/completions.
	ChatModel = "cosmicac/test-chat"
	// EmbedModel is Embedding on the bert-bge vocab (WordPiece, 30522
	// tokens): /v1/embeddings (llama-server --embeddings).
	EmbedModel = "cosmicac/test-embed"
	// ChatLoRAAdapter is ChatLoRA of ChatModel: a LoRA adapter a
	// llama.cpp job of ChatModel declares in inference.adapters.
	ChatLoRAAdapter = "cosmicac/test-chat-lora"
)

// Install writes the test models (ChatModel, EmbedModel) and the adapter
// ChatLoRAAdapter into the model
// directory dir, each as dir/NAME.gguf, unless a file of that name is
// there: they are deterministic, so one written before is the same. Each
// is written to a temporary file and renamed, so a model file is whole or
// absent. It answers the files' paths, by model name.
func Install(dir string) (map[string]string, error) {
	paths := map[string]string{}
	for _, m := range []struct {
		name  string
		vocab []byte
		write func(*bytes.Buffer, *gguf.File) error
	}{
		{ChatModel, llamaSPM, func(b *bytes.Buffer, v *gguf.File) error { return Chat(b, v, ChatOptions{}) }},
		{EmbedModel, bertBGE, func(b *bytes.Buffer, v *gguf.File) error { return Embedding(b, v, EmbeddingOptions{}) }},
		{ChatLoRAAdapter, llamaSPM, func(b *bytes.Buffer, _ *gguf.File) error { return ChatLoRA(b, ChatOptions{}, LoRAOptions{}) }},
	} {
		path := filepath.Join(dir, filepath.FromSlash(m.name)+".gguf")
		paths[m.name] = path
		if _, err := os.Stat(path); err == nil {
			continue
		}
		vocab, err := gguf.Read(bytes.NewReader(m.vocab), int64(len(m.vocab)))
		if err != nil {
			return nil, fmt.Errorf("test model %s: its vocab: %w", m.name, err)
		}
		var b bytes.Buffer
		if err := m.write(&b, vocab); err != nil {
			return nil, fmt.Errorf("test model %s: %w", m.name, err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		tmp, err := os.CreateTemp(filepath.Dir(path), ".model-*")
		if err != nil {
			return nil, err
		}
		_, err = tmp.Write(b.Bytes())
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("write test model %s: %w", path, err)
		}
	}
	return paths, nil
}

// ChatVocab is the vocabulary ChatModel is built on (llama-spm), for a
// chat model of other dimensions (Chat with other ChatOptions).
func ChatVocab() (*gguf.File, error) {
	return gguf.Read(bytes.NewReader(llamaSPM), int64(len(llamaSPM)))
}
