// Package testmodel writes tiny GGUF models that llama.cpp's llama-server
// loads and runs, for tests: a real tokenizer, copied from a vocab-only
// GGUF file, on top of a few layers of seeded pseudo-random weights. The
// engine, the tokenizer, the chat template, batching and the KV cache are
// all real; the text they produce is noise. They stand in for a model in
// tests because no model hub is reachable; an operator points a real job at
// a real GGUF file instead.
//
// The models are deterministic: the same vocab and options write the same
// bytes, on any machine (the weights come from an integer generator, see
// Chat). The vocab files of llama.cpp's models/ directory suit them, e.g.
// ggml-vocab-llama-spm.gguf (SentencePiece, 32000 tokens) for Chat and
// ggml-vocab-bert-bge.gguf (WordPiece, 30522 tokens) for Embedding; this
// package's testdata holds those two.
//
// The tensors and keys follow what llama.cpp (tag v0.4.0) loads:
// src/models/llama.cpp and src/models/bert.cpp (load_arch_tensors: names,
// shapes, which tensors are required), src/llama-model.cpp
// (llama_model_base::load_hparams: which keys are required and their
// types), src/llama-arch.cpp (the key and tensor names),
// tests/test-llama-archs.cpp (random models of each architecture) and
// conversion/base.py (which tensors stay F32 in an F16 model: 1-D ones,
// norms, position and token-type embeddings).
//
// Tests and test harnesses import testmodel, and `cosmicac up`, which
// installs the two test models (Install) into its model directory for the
// simulated rack's llama.cpp jobs; it imports gguf and the standard
// library only.
package testmodel

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cosmicac/cosmicac/internal/gguf"
)

// ChatMLTemplate is the chat template Chat writes when the vocab has none:
// ChatML, which llama.cpp recognizes by its <|im_start|> marker.
const ChatMLTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// description is general.description, for whoever inspects a model file.
const description = "CosmicAC test model: a real tokenizer on seeded random weights; its output is noise."

// Keys of the vocab file.
const (
	keyTokens         = "tokenizer.ggml.tokens"
	keyModel          = "tokenizer.ggml.model"
	keyChatTemplate   = "tokenizer.chat_template"
	keyTokenTypeCount = "tokenizer.ggml.token_type_count"
)

// ChatOptions shape the model Chat writes. A zero field takes its default.
type ChatOptions struct {
	// Name is general.name. Default "cosmicac-test-chat".
	Name string
	// EmbeddingLength is n_embd. Default 256.
	EmbeddingLength int
	// BlockCount is the number of transformer blocks. Default 4.
	BlockCount int
	// HeadCount is the number of attention heads; EmbeddingLength /
	// HeadCount, the head size, must be even. Default 4 (head size 64).
	HeadCount int
	// HeadCountKV is the number of key/value heads (grouped-query
	// attention); it must divide HeadCount. Default 2.
	HeadCountKV int
	// FeedForwardLength is n_ff. Default 512.
	FeedForwardLength int
	// ContextLength is the training context, n_ctx_train: the context
	// llama-server uses when not told one. It costs no bytes. Default 4096.
	ContextLength int
	// RopeFreqBase is the RoPE frequency base. Default 10000.
	RopeFreqBase float32
	// F32 writes the matrices as F32 instead of F16 (general.file_type 0
	// instead of 1), doubling their size.
	F32 bool
	// TiedEmbeddings leaves out output.weight: llama.cpp then uses
	// token_embd.weight for the output too. It saves n_embd × n_vocab
	// weights.
	TiedEmbeddings bool
	// ChatTemplate replaces tokenizer.chat_template. Default: the vocab's,
	// or ChatMLTemplate if it has none.
	ChatTemplate string
	// Seed seeds the weights.
	Seed uint64
}

func (o *ChatOptions) defaults() {
	def(&o.Name, "cosmicac-test-chat")
	def(&o.EmbeddingLength, 256)
	def(&o.BlockCount, 4)
	def(&o.HeadCount, 4)
	def(&o.HeadCountKV, 2)
	def(&o.FeedForwardLength, 512)
	def(&o.ContextLength, 4096)
	def(&o.RopeFreqBase, 10000)
}

func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Chat writes to w a llama-architecture chat model with vocab's tokenizer:
// every tokenizer.* key of vocab, unchanged and in order; general.*
// (architecture "llama", type "model", name, file type); the llama.*
// hyperparameters; tokenizer.chat_template (see ChatOptions); and the
// tensors llama.cpp's LLM_ARCH_LLAMA requires: token_embd.weight
// {n_embd, n_vocab}; per block blk.N.attn_norm.weight {n_embd},
// attn_q {n_embd, n_embd}, attn_k and attn_v {n_embd, n_embd_kv},
// attn_output {n_embd, n_embd}, ffn_norm {n_embd}, ffn_gate and ffn_up
// {n_embd, n_ff}, ffn_down {n_ff, n_embd}; output_norm.weight {n_embd}
// and output.weight {n_embd, n_vocab}. Dimensions are ggml's, innermost
// first. Norms are F32 and 1; matrices are F16 (or F32, see ChatOptions)
// drawn from about N(0, 0.02²).
//
// With the default options and the 32000-token llama-spm vocab the file is
// about 38 MB (two 16 MB vocab-sized matrices and 4.7 MB of blocks); with
// a 151936-token vocab such as qwen2's it is about 166 MB, 88 MB with
// TiedEmbeddings.
//
// The weights are drawn per tensor from a SplitMix64 generator seeded with
// the seed and the tensor's name; each is the sum of four 16-bit uniform
// integers, centred and scaled (an Irwin–Hall approximation of the normal
// distribution, within ±3.5σ), so that only integer arithmetic and one
// rounded multiplication make a weight and the file is the same on every
// machine and Go version.
//
// Serve it like any model: llama-server -m FILE. Its replies are random
// tokens, stopping at max_tokens or a random end-of-generation token; with
// a vocab that has no <|im_start|> and <|im_end|> tokens (llama-spm) the
// ChatML markers are tokenized as plain text. It also serves embeddings
// (--embedding --pooling mean), though Embedding's model is the
// embedding architecture.
func Chat(w io.Writer, vocab *gguf.File, opts ChatOptions) error {
	o := opts
	o.defaults()
	switch {
	case o.EmbeddingLength < 0 || o.BlockCount < 0 || o.HeadCount < 0 || o.HeadCountKV < 0 || o.FeedForwardLength < 0 || o.ContextLength < 0:
		return fmt.Errorf("testmodel: negative size in %+v", opts)
	case o.EmbeddingLength%o.HeadCount != 0 || (o.EmbeddingLength/o.HeadCount)%2 != 0:
		return fmt.Errorf("testmodel: embedding length %d is not an even head size times %d heads", o.EmbeddingLength, o.HeadCount)
	case o.HeadCount%o.HeadCountKV != 0:
		return fmt.Errorf("testmodel: %d key/value heads do not divide %d heads", o.HeadCountKV, o.HeadCount)
	}
	tok, nVocab, err := tokenizer(vocab)
	if err != nil {
		return err
	}
	template := o.ChatTemplate
	if _, ok := vocab.Lookup(keyChatTemplate); !ok && template == "" {
		template = ChatMLTemplate
	}
	if template != "" {
		tok = set(tok, keyChatTemplate, template)
	}

	embd, headSize := uint64(o.EmbeddingLength), uint32(o.EmbeddingLength/o.HeadCount)
	embdKV, ff, vocabN := uint64(headSize)*uint64(o.HeadCountKV), uint64(o.FeedForwardLength), uint64(nVocab)
	matType, fileType := gguf.TypeF16, uint32(1) // LLAMA_FTYPE_MOSTLY_F16
	if o.F32 {
		matType, fileType = gguf.TypeF32, 0 // LLAMA_FTYPE_ALL_F32
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.type", Value: "model"},
		{Key: "general.name", Value: o.Name},
		{Key: "general.description", Value: description},
		{Key: "llama.vocab_size", Value: uint32(nVocab)},
		{Key: "llama.context_length", Value: uint32(o.ContextLength)},
		{Key: "llama.embedding_length", Value: uint32(o.EmbeddingLength)},
		{Key: "llama.block_count", Value: uint32(o.BlockCount)},
		{Key: "llama.feed_forward_length", Value: uint32(o.FeedForwardLength)},
		{Key: "llama.attention.head_count", Value: uint32(o.HeadCount)},
		{Key: "llama.attention.head_count_kv", Value: uint32(o.HeadCountKV)},
		// llama.cpp rejects a llama model whose n_rot is not the head size.
		{Key: "llama.rope.dimension_count", Value: headSize},
		{Key: "llama.rope.freq_base", Value: o.RopeFreqBase},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: "general.file_type", Value: fileType},
		{Key: "general.quantization_version", Value: uint32(2)},
	}
	kvs = append(kvs, tok...)

	ts := []tensor{{"token_embd.weight", []uint64{embd, vocabN}, matType, random}}
	for i := range o.BlockCount {
		blk := func(name string) string { return fmt.Sprintf("blk.%d.%s.weight", i, name) }
		ts = append(ts,
			tensor{blk("attn_norm"), []uint64{embd}, gguf.TypeF32, ones},
			tensor{blk("attn_q"), []uint64{embd, embd}, matType, random},
			tensor{blk("attn_k"), []uint64{embd, embdKV}, matType, random},
			tensor{blk("attn_v"), []uint64{embd, embdKV}, matType, random},
			tensor{blk("attn_output"), []uint64{embd, embd}, matType, random},
			tensor{blk("ffn_norm"), []uint64{embd}, gguf.TypeF32, ones},
			tensor{blk("ffn_gate"), []uint64{embd, ff}, matType, random},
			tensor{blk("ffn_up"), []uint64{embd, ff}, matType, random},
			tensor{blk("ffn_down"), []uint64{ff, embd}, matType, random},
		)
	}
	ts = append(ts, tensor{"output_norm.weight", []uint64{embd}, gguf.TypeF32, ones})
	if !o.TiedEmbeddings {
		ts = append(ts, tensor{"output.weight", []uint64{embd, vocabN}, matType, random})
	}
	return writeModel(w, kvs, ts, o.Seed)
}

// LoRAOptions shape the adapter ChatLoRA writes. A zero field takes its
// default.
type LoRAOptions struct {
	// Name is general.name. Default "cosmicac-test-chat-lora".
	Name string
	// Rank is the rank of each A·B pair. Default 8.
	Rank int
	// Alpha is adapter.lora.alpha: the update is scaled by Alpha / Rank
	// (times the scale a request asks for). Default 16.
	Alpha float32
	// Seed seeds the factors.
	Seed uint64
}

// ChatLoRA writes to w a LoRA adapter of the model Chat writes with base
// (its shapes): general.architecture "llama", general.type "adapter",
// adapter.type "lora", adapter.lora.alpha; and, for every matrix of every
// block (not the vocab-sized ones, whose size is the vocab's), the pair
// NAME.lora_a {in, rank} and NAME.lora_b {rank, out} as llama.cpp's
// llama_adapter_lora_init reads them (src/llama-adapter.cpp: lora_a's
// ne[0] is the base tensor's, lora_b's ne[1] is; lora_a's ne[1] is
// lora_b's ne[0]), F32, about N(0, 0.1²): far from the usual zero B, so
// that the adapter changes every answer of the noise model (a test can
// tell it was applied). Serve it with llama-server -m BASE --lora FILE
// (--lora-init-without-apply, then a request's "lora": [{"id": 0,
// "scale": 1}]).
func ChatLoRA(w io.Writer, base ChatOptions, opts LoRAOptions) error {
	b, o := base, opts
	b.defaults()
	def(&o.Name, "cosmicac-test-chat-lora")
	def(&o.Rank, 8)
	def(&o.Alpha, 16)
	if o.Rank < 0 || b.EmbeddingLength <= 0 || b.HeadCount <= 0 || b.HeadCountKV <= 0 {
		return fmt.Errorf("testmodel: bad LoRA shape in %+v, %+v", base, opts)
	}
	embd, rank := uint64(b.EmbeddingLength), uint64(o.Rank)
	embdKV := uint64(b.EmbeddingLength/b.HeadCount) * uint64(b.HeadCountKV)
	ff := uint64(b.FeedForwardLength)
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.type", Value: "adapter"},
		{Key: "general.name", Value: o.Name},
		{Key: "general.description", Value: description},
		{Key: "adapter.type", Value: "lora"},
		{Key: "adapter.lora.alpha", Value: o.Alpha},
	}
	var ts []tensor
	pair := func(name string, in, out uint64) {
		ts = append(ts, tensor{name + ".lora_a", []uint64{in, rank}, gguf.TypeF32, strong},
			tensor{name + ".lora_b", []uint64{rank, out}, gguf.TypeF32, strong})
	}
	for i := range b.BlockCount {
		blk := func(name string) string { return fmt.Sprintf("blk.%d.%s.weight", i, name) }
		pair(blk("attn_q"), embd, embd)
		pair(blk("attn_k"), embd, embdKV)
		pair(blk("attn_v"), embd, embdKV)
		pair(blk("attn_output"), embd, embd)
		pair(blk("ffn_gate"), embd, ff)
		pair(blk("ffn_up"), embd, ff)
		pair(blk("ffn_down"), ff, embd)
	}
	return writeModel(w, kvs, ts, o.Seed)
}

// EmbeddingOptions shape the model Embedding writes. A zero field takes its
// default.
type EmbeddingOptions struct {
	// Name is general.name. Default "cosmicac-test-embedding".
	Name string
	// EmbeddingLength is n_embd, the length of the embeddings. Default 128.
	EmbeddingLength int
	// BlockCount is the number of encoder blocks. Default 2.
	BlockCount int
	// HeadCount is the number of attention heads; it must divide
	// EmbeddingLength. Default 2 (head size 64).
	HeadCount int
	// FeedForwardLength is n_ff. Default 512.
	FeedForwardLength int
	// ContextLength is the number of positions, the longest input: BERT
	// has a learned position embedding of this many rows. Default 512.
	ContextLength int
	// PoolingType is bert.pooling_type, llama.cpp's enum: 1 mean, 2 CLS,
	// 3 last. Default 1; llama-server's --pooling overrides it.
	PoolingType uint32
	// Seed seeds the weights.
	Seed uint64
}

func (o *EmbeddingOptions) defaults() {
	def(&o.Name, "cosmicac-test-embedding")
	def(&o.EmbeddingLength, 128)
	def(&o.BlockCount, 2)
	def(&o.HeadCount, 2)
	def(&o.FeedForwardLength, 512)
	def(&o.ContextLength, 512)
	def(&o.PoolingType, 1)
}

// Embedding writes to w a BERT-architecture embedding model with vocab's
// tokenizer: every tokenizer.* key of vocab, unchanged and in order (and
// tokenizer.ggml.token_type_count = 2 added if vocab has none: llama.cpp's
// BERT requires it); general.* (architecture "bert", type "model", name,
// file type 1); bert.* (sizes, layer_norm_epsilon 1e-12, attention.causal
// false, pooling_type); and the tensors llama.cpp's LLM_ARCH_BERT loads:
// token_embd.weight {n_embd, n_vocab} F16, token_types.weight {n_embd,
// n_token_types} F32, position_embd.weight {n_embd, n_ctx} F32,
// token_embd_norm.weight and .bias {n_embd}; per block blk.N.attn_q,
// attn_k, attn_v, attn_output .weight {n_embd, n_embd} F16 and .bias
// {n_embd}, attn_output_norm.weight and .bias {n_embd}, ffn_up.weight
// {n_embd, n_ff} F16 and .bias {n_ff}, ffn_down.weight {n_ff, n_embd} F16
// and .bias {n_embd}, layer_output_norm.weight and .bias {n_embd}. Norm
// weights are 1, biases 0, the rest random as in Chat.
//
// With the default options and the 30522-token bert-bge vocab the file is
// about 9.5 MB. Serve it with llama-server -m FILE --embedding; BERT is
// not causal, so the whole input must fit one micro-batch (-ub, 512 by
// default) and in ContextLength.
func Embedding(w io.Writer, vocab *gguf.File, opts EmbeddingOptions) error {
	o := opts
	o.defaults()
	switch {
	case o.EmbeddingLength < 0 || o.BlockCount < 0 || o.HeadCount < 0 || o.FeedForwardLength < 0 || o.ContextLength < 0:
		return fmt.Errorf("testmodel: negative size in %+v", opts)
	case o.EmbeddingLength%o.HeadCount != 0:
		return fmt.Errorf("testmodel: %d heads do not divide embedding length %d", o.HeadCount, o.EmbeddingLength)
	}
	tok, nVocab, err := tokenizer(vocab)
	if err != nil {
		return err
	}
	nTypes := uint32(2)
	if v, ok := vocab.Lookup(keyTokenTypeCount); ok {
		if nTypes, ok = v.(uint32); !ok || nTypes == 0 {
			return fmt.Errorf("testmodel: vocab's %s is %v (%T), want a positive uint32", keyTokenTypeCount, v, v)
		}
	} else {
		tok = set(tok, keyTokenTypeCount, nTypes)
	}

	kvs := []gguf.KV{
		{Key: "general.architecture", Value: "bert"},
		{Key: "general.type", Value: "model"},
		{Key: "general.name", Value: o.Name},
		{Key: "general.description", Value: description},
		{Key: "bert.context_length", Value: uint32(o.ContextLength)},
		{Key: "bert.embedding_length", Value: uint32(o.EmbeddingLength)},
		{Key: "bert.block_count", Value: uint32(o.BlockCount)},
		{Key: "bert.feed_forward_length", Value: uint32(o.FeedForwardLength)},
		{Key: "bert.attention.head_count", Value: uint32(o.HeadCount)},
		{Key: "bert.attention.layer_norm_epsilon", Value: float32(1e-12)},
		{Key: "bert.attention.causal", Value: false},
		{Key: "bert.pooling_type", Value: o.PoolingType},
		{Key: "general.file_type", Value: uint32(1)}, // LLAMA_FTYPE_MOSTLY_F16
		{Key: "general.quantization_version", Value: uint32(2)},
	}
	kvs = append(kvs, tok...)

	embd, ff := uint64(o.EmbeddingLength), uint64(o.FeedForwardLength)
	f16, f32 := gguf.TypeF16, gguf.TypeF32
	ts := []tensor{
		{"token_embd.weight", []uint64{embd, uint64(nVocab)}, f16, random},
		{"token_types.weight", []uint64{embd, uint64(nTypes)}, f32, random},
		{"position_embd.weight", []uint64{embd, uint64(o.ContextLength)}, f32, random},
		{"token_embd_norm.weight", []uint64{embd}, f32, ones},
		{"token_embd_norm.bias", []uint64{embd}, f32, zeros},
	}
	for i := range o.BlockCount {
		blk := func(name string) string { return fmt.Sprintf("blk.%d.%s", i, name) }
		for _, name := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			ts = append(ts,
				tensor{blk(name + ".weight"), []uint64{embd, embd}, f16, random},
				tensor{blk(name + ".bias"), []uint64{embd}, f32, zeros})
		}
		ts = append(ts,
			tensor{blk("attn_output_norm.weight"), []uint64{embd}, f32, ones},
			tensor{blk("attn_output_norm.bias"), []uint64{embd}, f32, zeros},
			tensor{blk("ffn_up.weight"), []uint64{embd, ff}, f16, random},
			tensor{blk("ffn_up.bias"), []uint64{ff}, f32, zeros},
			tensor{blk("ffn_down.weight"), []uint64{ff, embd}, f16, random},
			tensor{blk("ffn_down.bias"), []uint64{embd}, f32, zeros},
			tensor{blk("layer_output_norm.weight"), []uint64{embd}, f32, ones},
			tensor{blk("layer_output_norm.bias"), []uint64{embd}, f32, zeros},
		)
	}
	return writeModel(w, kvs, ts, o.Seed)
}

// tokenizer returns vocab's tokenizer.* key/values, in order, and the
// number of tokens.
func tokenizer(vocab *gguf.File) ([]gguf.KV, int, error) {
	if vocab == nil {
		return nil, 0, errors.New("testmodel: no vocab")
	}
	var kvs []gguf.KV
	for _, kv := range vocab.KVs {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			kvs = append(kvs, kv)
		}
	}
	if m, _ := vocab.Lookup(keyModel); m == nil {
		return nil, 0, fmt.Errorf("testmodel: the vocab has no %s", keyModel)
	}
	v, _ := vocab.Lookup(keyTokens)
	tokens, ok := v.([]string)
	if !ok || len(tokens) == 0 {
		return nil, 0, fmt.Errorf("testmodel: the vocab's %s is %T, want a non-empty []string", keyTokens, v)
	}
	return kvs, len(tokens), nil
}

// set replaces key's value in kvs, or appends the key.
func set(kvs []gguf.KV, key string, v any) []gguf.KV {
	for i := range kvs {
		if kvs[i].Key == key {
			kvs[i].Value = v
			return kvs
		}
	}
	return append(kvs, gguf.KV{Key: key, Value: v})
}

// fill says what a tensor holds.
type fill int

const (
	random fill = iota // about N(0, 0.02²)
	ones
	zeros
	strong // about N(0, 0.1²): a LoRA's factors, whose product shows
)

// tensor is a tensor to write.
type tensor struct {
	name string
	dims []uint64
	typ  gguf.GGMLType
	fill fill
}

// writeModel writes the file, generating each tensor's data in turn.
func writeModel(w io.Writer, kvs []gguf.KV, ts []tensor, seed uint64) error {
	infos := make([]gguf.TensorInfo, len(ts))
	for i, t := range ts {
		infos[i] = gguf.TensorInfo{Name: t.name, Dims: t.dims, Type: t.typ}
	}
	gw, err := gguf.NewWriter(w, kvs, infos)
	if err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	for _, t := range ts {
		n := uint64(1)
		for _, d := range t.dims {
			n *= d
		}
		v := make([]float32, n)
		switch t.fill {
		case random:
			r := newRNG(seed, t.name)
			for i := range v {
				v[i] = r.normal()
			}
		case strong:
			r := newRNG(seed, t.name)
			for i := range v {
				v[i] = 5 * r.normal()
			}
		case ones:
			for i := range v {
				v[i] = 1
			}
		}
		var data []byte
		if t.typ == gguf.TypeF16 {
			data = gguf.F16Bytes(v)
		} else {
			data = gguf.F32Bytes(v)
		}
		if err := gw.WriteTensor(data); err != nil {
			return fmt.Errorf("testmodel: %w", err)
		}
	}
	if err := gw.Close(); err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	return nil
}

// rng is SplitMix64 (Steele, Lea and Flood 2014).
type rng struct{ s uint64 }

// newRNG seeds a generator with seed and the FNV-1a hash of name.
func newRNG(seed uint64, name string) *rng {
	h := uint64(14695981039346656037)
	for i := range len(name) {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return &rng{seed ^ h}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// scale makes the sum of four centred 16-bit uniforms, whose standard
// deviation is sqrt((65536²-1)/3) ≈ 37837.2, one of standard deviation 0.02.
const scale = float32(0.02 / 37837.2)

// normal returns a weight of about N(0, 0.02²).
func (r *rng) normal() float32 {
	x := r.next()
	s := int32(x&0xffff) + int32(x>>16&0xffff) + int32(x>>32&0xffff) + int32(x>>48) - 2*0xffff
	return float32(s) * scale
}
