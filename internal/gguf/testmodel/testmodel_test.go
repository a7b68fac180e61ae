package testmodel

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/gguf"
)

const (
	llamaVocab = "testdata/ggml-vocab-llama-spm.gguf"
	bertVocab  = "testdata/ggml-vocab-bert-bge.gguf"
)

func readVocab(t *testing.T, path string) *gguf.File {
	t.Helper()
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// build writes a model with write and parses it back.
func build(t *testing.T, write func(*bytes.Buffer) error) (*gguf.File, int) {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatalf("reading the model back: %v", err)
	}
	return f, buf.Len()
}

// u32 returns the uint32 value of key, failing the test if it has another.
func u32(t *testing.T, f *gguf.File, key string) uint64 {
	t.Helper()
	v, ok := f.Lookup(key)
	n, isU32 := v.(uint32)
	if !ok || !isU32 {
		t.Fatalf("%s = %v (%T), want a uint32", key, v, v)
	}
	return uint64(n)
}

// checkTokenizer checks that model has every tokenizer.* key of vocab,
// with the same value and type, in the same order, and returns the
// number of tokens.
func checkTokenizer(t *testing.T, vocab, model *gguf.File) uint64 {
	t.Helper()
	var want, got []string
	for _, kv := range vocab.KVs {
		if !strings.HasPrefix(kv.Key, "tokenizer.") {
			continue
		}
		want = append(want, kv.Key)
		v, ok := model.Lookup(kv.Key)
		if !ok || !reflect.DeepEqual(v, kv.Value) {
			t.Errorf("%s differs from the vocab's (%T)", kv.Key, kv.Value)
		}
	}
	for _, kv := range model.KVs {
		if _, inVocab := vocab.Lookup(kv.Key); inVocab && strings.HasPrefix(kv.Key, "tokenizer.") {
			got = append(got, kv.Key)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the vocab's keys in the model: %v, want %v", got, want)
	}
	tokens, _ := vocab.Lookup("tokenizer.ggml.tokens")
	return uint64(len(tokens.([]string)))
}

// checkTensors checks the model's tensors, in order, against want.
func checkTensors(t *testing.T, f *gguf.File, want []gguf.TensorInfo) {
	t.Helper()
	if len(f.Tensors) != len(want) {
		t.Errorf("%d tensors, want %d", len(f.Tensors), len(want))
	}
	for i, w := range want {
		if i >= len(f.Tensors) {
			break
		}
		g := f.Tensors[i]
		if g.Name != w.Name || !reflect.DeepEqual(g.Dims, w.Dims) || g.Type != w.Type {
			t.Errorf("tensor %d = %s %v %v, want %s %v %v", i, g.Name, g.Dims, g.Type, w.Name, w.Dims, w.Type)
		}
	}
}

// values decodes a tensor.
func values(t *testing.T, f *gguf.File, name string) []float32 {
	t.Helper()
	ti, _ := f.Tensor(name)
	b, err := f.TensorData(name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := gguf.Floats(ti.Type, b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkFill checks that a tensor is all c, or (c NaN) looks like N(0, 0.02²).
func checkFill(t *testing.T, f *gguf.File, name string, c float64) {
	t.Helper()
	v := values(t, f, name)
	if !math.IsNaN(c) {
		for i, x := range v {
			if float64(x) != c {
				t.Fatalf("%s[%d] = %v, want %v", name, i, x, c)
			}
		}
		return
	}
	var sum, sq float64
	for _, x := range v {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	mean := sum / float64(len(v))
	sd := math.Sqrt(sq/float64(len(v)) - mean*mean)
	if math.Abs(mean) > 0.02*4/math.Sqrt(float64(len(v))) || math.Abs(sd-0.02) > 0.001 {
		t.Errorf("%s: mean %v, sd %v over %d values, want about 0 and 0.02", name, mean, sd, len(v))
	}
}

func TestChat(t *testing.T) {
	vocab := readVocab(t, llamaVocab)
	f, size := build(t, func(b *bytes.Buffer) error { return Chat(b, vocab, ChatOptions{}) })
	t.Logf("default chat model with %s: %d bytes", llamaVocab, size)

	nVocab := checkTokenizer(t, vocab, f)
	for key, want := range map[string]any{
		"general.architecture":                   "llama",
		"general.type":                           "model",
		"general.name":                           "cosmicac-test-chat",
		"general.file_type":                      uint32(1),
		"llama.rope.freq_base":                   float32(10000),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"tokenizer.chat_template":                ChatMLTemplate,
	} {
		if got, _ := f.Lookup(key); got != want {
			t.Errorf("%s = %#v, want %#v", key, got, want)
		}
	}
	// The hyperparameters, read back, agree with the shapes (and with the
	// defaults the documentation gives).
	embd, blocks, heads, headsKV := u32(t, f, "llama.embedding_length"), u32(t, f, "llama.block_count"),
		u32(t, f, "llama.attention.head_count"), u32(t, f, "llama.attention.head_count_kv")
	ff, ctx, rot := u32(t, f, "llama.feed_forward_length"), u32(t, f, "llama.context_length"), u32(t, f, "llama.rope.dimension_count")
	if got := []uint64{embd, blocks, heads, headsKV, ff, ctx}; !reflect.DeepEqual(got, []uint64{256, 4, 4, 2, 512, 4096}) {
		t.Errorf("n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx = %v", got)
	}
	if v := u32(t, f, "llama.vocab_size"); v != nVocab || v != 32000 {
		t.Errorf("llama.vocab_size = %d, the vocab has %d tokens", v, nVocab)
	}
	if rot != embd/heads {
		t.Errorf("rope dimension %d, head size %d", rot, embd/heads)
	}
	checkTensors(t, f, chatTensors(embd, blocks, embd/heads*headsKV, ff, nVocab, gguf.TypeF16, true))

	checkFill(t, f, "output_norm.weight", 1)
	checkFill(t, f, "blk.3.ffn_norm.weight", 1)
	checkFill(t, f, "token_embd.weight", math.NaN())
	checkFill(t, f, "blk.0.attn_k.weight", math.NaN())
	if bytes.Equal(mustData(t, f, "blk.0.attn_q.weight"), mustData(t, f, "blk.1.attn_q.weight")) {
		t.Error("two blocks have the same weights")
	}
}

func mustData(t *testing.T, f *gguf.File, name string) []byte {
	t.Helper()
	b, err := f.TensorData(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chatTensors lists the tensors of LLM_ARCH_LLAMA (src/models/llama.cpp).
func chatTensors(embd, blocks, embdKV, ff, vocab uint64, mat gguf.GGMLType, output bool) []gguf.TensorInfo {
	f32 := gguf.TypeF32
	ts := []gguf.TensorInfo{{Name: "token_embd.weight", Dims: []uint64{embd, vocab}, Type: mat}}
	for i := range blocks {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			gguf.TensorInfo{Name: p + "attn_norm.weight", Dims: []uint64{embd}, Type: f32},
			gguf.TensorInfo{Name: p + "attn_q.weight", Dims: []uint64{embd, embd}, Type: mat},
			gguf.TensorInfo{Name: p + "attn_k.weight", Dims: []uint64{embd, embdKV}, Type: mat},
			gguf.TensorInfo{Name: p + "attn_v.weight", Dims: []uint64{embd, embdKV}, Type: mat},
			gguf.TensorInfo{Name: p + "attn_output.weight", Dims: []uint64{embd, embd}, Type: mat},
			gguf.TensorInfo{Name: p + "ffn_norm.weight", Dims: []uint64{embd}, Type: f32},
			gguf.TensorInfo{Name: p + "ffn_gate.weight", Dims: []uint64{embd, ff}, Type: mat},
			gguf.TensorInfo{Name: p + "ffn_up.weight", Dims: []uint64{embd, ff}, Type: mat},
			gguf.TensorInfo{Name: p + "ffn_down.weight", Dims: []uint64{ff, embd}, Type: mat},
		)
	}
	ts = append(ts, gguf.TensorInfo{Name: "output_norm.weight", Dims: []uint64{embd}, Type: f32})
	if output {
		ts = append(ts, gguf.TensorInfo{Name: "output.weight", Dims: []uint64{embd, vocab}, Type: mat})
	}
	return ts
}

func TestChatOptions(t *testing.T) {
	vocab := readVocab(t, llamaVocab)
	opts := ChatOptions{Name: "small", EmbeddingLength: 64, BlockCount: 2, HeadCount: 8, HeadCountKV: 1, FeedForwardLength: 96,
		ContextLength: 256, RopeFreqBase: 5e5, F32: true, TiedEmbeddings: true, ChatTemplate: "{{ messages }}"}
	f, size := build(t, func(b *bytes.Buffer) error { return Chat(b, vocab, opts) })
	t.Logf("%+v: %d bytes", opts, size)
	checkTokenizer(t, vocab, f)
	checkTensors(t, f, chatTensors(64, 2, 8, 96, 32000, gguf.TypeF32, false))
	for key, want := range map[string]any{
		"general.name": "small", "general.file_type": uint32(0), "llama.rope.freq_base": float32(5e5),
		"llama.rope.dimension_count": uint32(8), "llama.context_length": uint32(256), "tokenizer.chat_template": "{{ messages }}",
	} {
		if got, _ := f.Lookup(key); got != want {
			t.Errorf("%s = %#v, want %#v", key, got, want)
		}
	}
	checkFill(t, f, "blk.1.ffn_down.weight", math.NaN())

	for _, bad := range []ChatOptions{
		{EmbeddingLength: 100, HeadCount: 3},
		{EmbeddingLength: 96, HeadCount: 32}, // head size 3: odd
		{HeadCount: 4, HeadCountKV: 3},
		{BlockCount: -1},
	} {
		if err := Chat(&bytes.Buffer{}, vocab, bad); err == nil {
			t.Errorf("Chat(%+v): no error", bad)
		}
	}
}

// TestChatKeepsTheVocabsTemplate: a vocab's own chat template stays.
func TestChatKeepsTheVocabsTemplate(t *testing.T) {
	vocab := readVocab(t, llamaVocab)
	withTemplate := *vocab
	withTemplate.KVs = append(append([]gguf.KV(nil), vocab.KVs...), gguf.KV{Key: "tokenizer.chat_template", Value: "mine"})
	small := ChatOptions{EmbeddingLength: 32, BlockCount: 1, HeadCount: 2, HeadCountKV: 1, FeedForwardLength: 32}
	f, _ := build(t, func(b *bytes.Buffer) error { return Chat(b, &withTemplate, small) })
	if got, _ := f.Lookup("tokenizer.chat_template"); got != "mine" {
		t.Errorf("tokenizer.chat_template = %q, want the vocab's", got)
	}
	checkTokenizer(t, &withTemplate, f)
}

func TestEmbedding(t *testing.T) {
	vocab := readVocab(t, bertVocab)
	f, size := build(t, func(b *bytes.Buffer) error { return Embedding(b, vocab, EmbeddingOptions{}) })
	t.Logf("default embedding model with %s: %d bytes", bertVocab, size)

	nVocab := checkTokenizer(t, vocab, f)
	for key, want := range map[string]any{
		"general.architecture":              "bert",
		"general.type":                      "model",
		"general.file_type":                 uint32(1),
		"bert.attention.causal":             false,
		"bert.pooling_type":                 uint32(1),
		"bert.attention.layer_norm_epsilon": float32(1e-12),
	} {
		if got, _ := f.Lookup(key); got != want {
			t.Errorf("%s = %#v, want %#v", key, got, want)
		}
	}
	embd, blocks, heads := u32(t, f, "bert.embedding_length"), u32(t, f, "bert.block_count"), u32(t, f, "bert.attention.head_count")
	ff, ctx, types := u32(t, f, "bert.feed_forward_length"), u32(t, f, "bert.context_length"), u32(t, f, "tokenizer.ggml.token_type_count")
	if got := []uint64{embd, blocks, heads, ff, ctx, types, nVocab}; !reflect.DeepEqual(got, []uint64{128, 2, 2, 512, 512, 2, 30522}) {
		t.Errorf("n_embd, n_layer, n_head, n_ff, n_ctx, n_token_types, n_vocab = %v", got)
	}
	checkTensors(t, f, bertTensors(embd, blocks, ff, ctx, types, nVocab))
	checkFill(t, f, "token_embd_norm.weight", 1)
	checkFill(t, f, "blk.1.layer_output_norm.bias", 0)
	checkFill(t, f, "blk.0.ffn_up.bias", 0)
	checkFill(t, f, "position_embd.weight", math.NaN())
	checkFill(t, f, "blk.1.attn_v.weight", math.NaN())
}

// bertTensors lists the tensors of LLM_ARCH_BERT (src/models/bert.cpp).
func bertTensors(embd, blocks, ff, ctx, types, vocab uint64) []gguf.TensorInfo {
	f16, f32 := gguf.TypeF16, gguf.TypeF32
	ts := []gguf.TensorInfo{
		{Name: "token_embd.weight", Dims: []uint64{embd, vocab}, Type: f16},
		{Name: "token_types.weight", Dims: []uint64{embd, types}, Type: f32},
		{Name: "position_embd.weight", Dims: []uint64{embd, ctx}, Type: f32},
		{Name: "token_embd_norm.weight", Dims: []uint64{embd}, Type: f32},
		{Name: "token_embd_norm.bias", Dims: []uint64{embd}, Type: f32},
	}
	for i := range blocks {
		p := fmt.Sprintf("blk.%d.", i)
		for _, m := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			ts = append(ts,
				gguf.TensorInfo{Name: p + m + ".weight", Dims: []uint64{embd, embd}, Type: f16},
				gguf.TensorInfo{Name: p + m + ".bias", Dims: []uint64{embd}, Type: f32})
		}
		ts = append(ts,
			gguf.TensorInfo{Name: p + "attn_output_norm.weight", Dims: []uint64{embd}, Type: f32},
			gguf.TensorInfo{Name: p + "attn_output_norm.bias", Dims: []uint64{embd}, Type: f32},
			gguf.TensorInfo{Name: p + "ffn_up.weight", Dims: []uint64{embd, ff}, Type: f16},
			gguf.TensorInfo{Name: p + "ffn_up.bias", Dims: []uint64{ff}, Type: f32},
			gguf.TensorInfo{Name: p + "ffn_down.weight", Dims: []uint64{ff, embd}, Type: f16},
			gguf.TensorInfo{Name: p + "ffn_down.bias", Dims: []uint64{embd}, Type: f32},
			gguf.TensorInfo{Name: p + "layer_output_norm.weight", Dims: []uint64{embd}, Type: f32},
			gguf.TensorInfo{Name: p + "layer_output_norm.bias", Dims: []uint64{embd}, Type: f32},
		)
	}
	return ts
}

// TestEmbeddingAddsTokenTypeCount: a vocab without
// tokenizer.ggml.token_type_count gets one, after its own keys.
func TestEmbeddingAddsTokenTypeCount(t *testing.T) {
	vocab := readVocab(t, llamaVocab)
	opts := EmbeddingOptions{EmbeddingLength: 64, BlockCount: 1, HeadCount: 1, FeedForwardLength: 64, ContextLength: 32, PoolingType: 2}
	f, _ := build(t, func(b *bytes.Buffer) error { return Embedding(b, vocab, opts) })
	checkTokenizer(t, vocab, f)
	if last := f.KVs[len(f.KVs)-1]; last.Key != "tokenizer.ggml.token_type_count" || last.Value != uint32(2) {
		t.Errorf("last key/value = %v", last)
	}
	if got := u32(t, f, "bert.pooling_type"); got != 2 {
		t.Errorf("bert.pooling_type = %d", got)
	}
	checkTensors(t, f, bertTensors(64, 1, 64, 32, 2, 32000))
	if err := Embedding(&bytes.Buffer{}, vocab, EmbeddingOptions{EmbeddingLength: 64, HeadCount: 3}); err == nil {
		t.Error("3 heads for 64: no error")
	}
}

func TestBadVocab(t *testing.T) {
	noTokens := &gguf.File{KVs: []gguf.KV{{Key: "tokenizer.ggml.model", Value: "llama"}}}
	noModel := &gguf.File{KVs: []gguf.KV{{Key: "tokenizer.ggml.tokens", Value: []string{"a"}}}}
	badTypes := &gguf.File{KVs: []gguf.KV{{Key: "tokenizer.ggml.model", Value: "bert"}, {Key: "tokenizer.ggml.tokens", Value: []string{"a"}},
		{Key: "tokenizer.ggml.token_type_count", Value: int32(2)}}}
	for name, v := range map[string]*gguf.File{"nil": nil, "no tokens": noTokens, "no model": noModel} {
		if err := Chat(&bytes.Buffer{}, v, ChatOptions{}); err == nil {
			t.Errorf("Chat with %s vocab: no error", name)
		}
		if err := Embedding(&bytes.Buffer{}, v, EmbeddingOptions{}); err == nil {
			t.Errorf("Embedding with %s vocab: no error", name)
		}
	}
	if err := Embedding(&bytes.Buffer{}, badTypes, EmbeddingOptions{}); err == nil {
		t.Error("Embedding with an int32 token type count: no error")
	}
}

// TestDeterministic: the same options write the same bytes (compared by
// hash, run to run, not against a golden hash); another seed writes other
// weights.
func TestDeterministic(t *testing.T) {
	llama, bert := readVocab(t, llamaVocab), readVocab(t, bertVocab)
	sum := func(write func(io.Writer) error) [32]byte {
		h := sha256.New()
		if err := write(h); err != nil {
			t.Fatal(err)
		}
		return [32]byte(h.Sum(nil))
	}
	small := ChatOptions{EmbeddingLength: 32, BlockCount: 2, HeadCount: 2, HeadCountKV: 1, FeedForwardLength: 32}
	for name, write := range map[string]func(seed uint64) func(io.Writer) error{
		"chat": func(seed uint64) func(io.Writer) error {
			return func(w io.Writer) error { return Chat(w, llama, ChatOptions{Seed: seed}) }
		},
		"small chat": func(seed uint64) func(io.Writer) error {
			o := small
			o.Seed = seed
			return func(w io.Writer) error { return Chat(w, llama, o) }
		},
		"embedding": func(seed uint64) func(io.Writer) error {
			return func(w io.Writer) error { return Embedding(w, bert, EmbeddingOptions{Seed: seed}) }
		},
	} {
		first, second := sum(write(7)), sum(write(7))
		if first != second {
			t.Errorf("%s: two writes differ: %x, %x", name, first, second)
		}
		if name != "chat" && first == sum(write(8)) {
			t.Errorf("%s: seeds 7 and 8 write the same file", name)
		}
	}
}

// TestInstall writes both test models once: a second Install leaves the
// files as they are, and each is the model its function writes.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	paths, err := Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ChatModel, EmbedModel, ChatLoRAAdapter} {
		f, err := gguf.ReadFile(paths[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if paths[name] != filepath.Join(dir, name+".gguf") {
			t.Errorf("%s at %s", name, paths[name])
		}
		arch, _ := f.Lookup("general.architecture")
		if want := map[string]string{ChatModel: "llama", EmbedModel: "bert", ChatLoRAAdapter: "llama"}[name]; arch != want {
			t.Errorf("%s: architecture %q, want %q", name, arch, want)
		}
	}
	st, _ := os.Stat(paths[ChatModel])
	again, err := Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(again[ChatModel]); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("a second Install wrote the chat model again")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "cosmicac", ".model-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestChatLoRA: the adapter has a lora_a {in, rank} and lora_b {rank, out}
// pair for every matrix of the chat model's blocks, each pair's outer sizes
// the base tensor's (as llama.cpp checks them), and the keys llama.cpp's
// adapter loader requires.
func TestChatLoRA(t *testing.T) {
	vocab := readVocab(t, "testdata/ggml-vocab-llama-spm.gguf")
	base, _ := build(t, func(b *bytes.Buffer) error { return Chat(b, vocab, ChatOptions{}) })
	lora, _ := build(t, func(b *bytes.Buffer) error { return ChatLoRA(b, ChatOptions{}, LoRAOptions{Rank: 4}) })
	for k, want := range map[string]any{"general.type": "adapter", "general.architecture": "llama", "adapter.type": "lora", "adapter.lora.alpha": float32(16)} {
		if v, _ := lora.Lookup(k); v != want {
			t.Errorf("%s = %v, want %v", k, v, want)
		}
	}
	dims := map[string][]uint64{}
	for _, ti := range base.Tensors {
		dims[ti.Name] = ti.Dims
	}
	pairs := 0
	for _, ti := range lora.Tensors {
		name, ok := strings.CutSuffix(ti.Name, ".lora_a")
		if !ok {
			if _, ok := strings.CutSuffix(ti.Name, ".lora_b"); !ok {
				t.Errorf("tensor %s is neither lora_a nor lora_b", ti.Name)
			}
			continue
		}
		pairs++
		bd, ok := dims[name]
		if !ok {
			t.Errorf("%s: no such tensor in the base", name)
			continue
		}
		var b gguf.TensorInfo
		for _, x := range lora.Tensors {
			if x.Name == name+".lora_b" {
				b = x
			}
		}
		if ti.Dims[0] != bd[0] || ti.Dims[1] != 4 || b.Dims[0] != 4 || b.Dims[1] != bd[1] {
			t.Errorf("%s: lora_a %v, lora_b %v, base %v", name, ti.Dims, b.Dims, bd)
		}
	}
	if pairs != 4*7 {
		t.Errorf("%d pairs, want 7 matrices × 4 blocks", pairs)
	}
}
