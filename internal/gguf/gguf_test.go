package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

// allKVs has a value of every type, scalar and array, and their edges.
var allKVs = []KV{
	{"general.architecture", "llama"},
	{"t.u8", uint8(255)},
	{"t.i8", int8(-128)},
	{"t.u16", uint16(65535)},
	{"t.i16", int16(-32768)},
	{"t.u32", uint32(math.MaxUint32)},
	{"t.i32", int32(math.MinInt32)},
	{"t.f32", float32(-1.5e-7)},
	{"t.bool.true", true},
	{"t.bool.false", false},
	{"t.str", "héllo\x00world ✓"},
	{"t.str.empty", ""},
	{"t.u64", uint64(math.MaxUint64)},
	{"t.i64", int64(math.MinInt64)},
	{"t.f64", math.Pi},
	{"a.u8", []uint8{0, 1, 255}},
	{"a.i8", []int8{-1, 0, 127}},
	{"a.u16", []uint16{1, 65535}},
	{"a.i16", []int16{-32768, 32767}},
	{"a.u32", []uint32{7}},
	{"a.i32", []int32{-7, 3, 6}},
	{"a.f32", []float32{0, -0.25, float32(math.Inf(1))}},
	{"a.bool", []bool{true, false, true}},
	{"a.str", []string{"<unk>", "", "▁the", "Ġ Ġ"}},
	{"a.u64", []uint64{1 << 63}},
	{"a.i64", []int64{-1 << 63, 1}},
	{"a.f64", []float64{math.MaxFloat64, math.SmallestNonzeroFloat64}},
	{"a.str.empty", []string{}},
	{"a.f32.empty", []float32{}},
}

// testTensors are tensors of several types, shapes and sizes that are not
// multiples of the alignment, with their data.
func testTensors() ([]TensorInfo, [][]byte) {
	q8 := make([]byte, 2*34) // two Q8_0 blocks: raw bytes, not decoded
	for i := range q8 {
		q8[i] = byte(i)
	}
	infos := []TensorInfo{
		{Name: "norm.weight", Dims: []uint64{3}, Type: TypeF32},
		{Name: "blk.0.attn_q.weight", Dims: []uint64{4, 3}, Type: TypeF16},
		{Name: "q8", Dims: []uint64{32, 2}, Type: TypeQ8_0},
		{Name: "cube", Dims: []uint64{1, 2, 1, 3}, Type: TypeF32},
		{Name: "empty", Dims: []uint64{0, 5}, Type: TypeF16},
	}
	data := [][]byte{
		F32Bytes([]float32{1, 1, 1}),
		F16Bytes([]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
		q8,
		F32Bytes([]float32{-1, -2, -3, -4, -5, -6}),
		{},
	}
	return infos, data
}

// write writes a file and fails the test on error.
func write(t testing.TB, kvs []KV, infos []TensorInfo, data [][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, kvs, infos)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range data {
		if err := w.WriteTensor(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	infos, data := testTensors()
	for _, align := range []uint32{0, 1, 8, 64, 4096} {
		kvs := allKVs
		want := uint64(DefaultAlignment)
		if align != 0 {
			kvs = append(append([]KV(nil), allKVs...), KV{KeyAlignment, align})
			want = uint64(align)
		}
		b := write(t, kvs, infos, data)
		f, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("alignment %d: %v", align, err)
		}
		if f.Version != Version || f.Alignment != want || f.DataOffset%int64(want) != 0 {
			t.Errorf("alignment %d: version %d, alignment %d, data at %d", align, f.Version, f.Alignment, f.DataOffset)
		}
		if !reflect.DeepEqual(f.KVs, kvs) {
			t.Errorf("alignment %d: key/values differ:\n got %v\nwant %v", align, f.KVs, kvs)
		}
		for _, kv := range f.KVs {
			typ, _ := kv.Type()
			if name := strings.SplitN(kv.Key, ".", 3)[1]; kv.Key[0] == 't' && typ.String() != name {
				t.Errorf("%s: type %v", kv.Key, typ)
			}
		}
		var end uint64
		for i, ti := range f.Tensors {
			if ti.Name != infos[i].Name || !reflect.DeepEqual(ti.Dims, infos[i].Dims) || ti.Type != infos[i].Type || ti.Offset%want != 0 {
				t.Errorf("alignment %d: tensor %d = %+v, want %+v", align, i, ti, infos[i])
			}
			got, err := f.TensorData(ti.Name)
			if err != nil || !bytes.Equal(got, data[i]) {
				t.Errorf("alignment %d: tensor %q data = %v, %v", align, ti.Name, got, err)
			}
			n, _ := ti.Size()
			end = pad(ti.Offset+n, want)
		}
		if int64(len(b)) != f.DataOffset+int64(end) {
			t.Errorf("alignment %d: file is %d bytes, want data at %d + %d padded", align, len(b), f.DataOffset, end)
		}
		// Written again from what was read: the same bytes.
		if b2 := rewrite(t, f); !bytes.Equal(b, b2) {
			t.Errorf("alignment %d: rewriting what was read changed the file", align)
		}
	}
}

// rewrite writes f's key/values and tensors to a new file.
func rewrite(t testing.TB, f *File) []byte {
	t.Helper()
	var data [][]byte
	for _, ti := range f.Tensors {
		d, err := f.TensorData(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, d)
	}
	return write(t, f.KVs, f.Tensors, data)
}

func TestKVTypes(t *testing.T) {
	typ, err := KV{"k", []string{"a"}}.Type()
	if err != nil || typ != TypeArray {
		t.Errorf("Type of []string = %v, %v", typ, err)
	}
	elem, err := KV{"k", []string{"a"}}.ArrayType()
	if err != nil || elem != TypeString {
		t.Errorf("ArrayType of []string = %v, %v", elem, err)
	}
	if _, err := (KV{"k", uint32(1)}).ArrayType(); err == nil {
		t.Error("ArrayType of a uint32: no error")
	}
	for _, v := range []any{1, nil, []any{1}, [][]uint8{{1}}, map[string]int{}} {
		if _, err := (KV{"k", v}).Type(); err == nil {
			t.Errorf("Type of %T: no error", v)
		}
	}
	if TypeUint32.String() != "u32" || Type(99).String() != "Type(99)" || TypeF16.String() != "F16" || GGMLType(4).String() != "GGMLType(4)" {
		t.Error("String methods")
	}
}

// TestVocabFiles reads the vocab files of testmodel/testdata, written by
// llama.cpp's tooling, and writes them back byte for byte.
func TestVocabFiles(t *testing.T) {
	for _, name := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-bert-bge.gguf"} {
		path := "testmodel/testdata/" + name
		f, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Tensors) != 0 {
			t.Errorf("%s: %d tensors", name, len(f.Tensors))
		}
		tokens, ok := f.Lookup("tokenizer.ggml.tokens")
		if toks, _ := tokens.([]string); !ok || len(toks) < 30000 {
			t.Errorf("%s: tokenizer.ggml.tokens is %T of %d", name, tokens, len(toks))
		}
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if b := rewrite(t, f); !bytes.Equal(b, orig) {
			t.Errorf("%s: rewritten, %d bytes differ from the original's %d", name, len(b), len(orig))
		}
	}
}

// enc builds files by hand, malformed ones included.
type enc struct{ bytes.Buffer }

func (e *enc) u32(v uint32) *enc  { e.Write(binary.LittleEndian.AppendUint32(nil, v)); return e }
func (e *enc) u64(v uint64) *enc  { e.Write(binary.LittleEndian.AppendUint64(nil, v)); return e }
func (e *enc) str(s string) *enc  { e.u64(uint64(len(s))); e.WriteString(s); return e }
func (e *enc) raw(b ...byte) *enc { e.Write(b); return e }

// file starts a file's bytes: magic, version 3 and the counts.
func file(tensors, kvs uint64) *enc {
	e := &enc{}
	e.WriteString(Magic)
	return e.u32(3).u64(tensors).u64(kvs)
}

// tensorInfo appends a tensor info.
func (e *enc) tensorInfo(name string, typ GGMLType, off uint64, dims ...uint64) *enc {
	e.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		e.u64(d)
	}
	return e.u32(uint32(typ)).u64(off)
}

// padTo pads to a multiple of n and appends size bytes of data.
func (e *enc) padTo(n, size int) *enc {
	for e.Len()%n != 0 {
		e.WriteByte(0)
	}
	e.Write(make([]byte, size))
	return e
}

func TestReadErrors(t *testing.T) {
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"empty":                {nil, "magic"},
		"bad magic":            {[]byte("GGML\x03\x00\x00\x00"), "bad magic"},
		"version 1":            {append([]byte(Magic), 1, 0, 0, 0), "version 1"},
		"version 4":            {append([]byte(Magic), 4, 0, 0, 0), "version 4"},
		"big-endian version":   {append([]byte(Magic), 0, 0, 0, 3), "version"},
		"count past the end":   {file(0, 1<<40).Bytes(), "cannot fit"},
		"negative count":       {file(1<<63, 0).Bytes(), "cannot fit"},
		"empty key":            {file(0, 1).str("").u32(4).u32(1).Bytes(), "empty key"},
		"duplicate key":        {file(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2).Bytes(), `duplicate key "k"`},
		"invalid type":         {file(0, 1).str("k").u32(13).u32(1).Bytes(), "invalid type 13"},
		"string past the end":  {file(0, 1).str("k").u32(8).u64(1 << 62).Bytes(), "string of"},
		"key past the end":     {file(0, 1).u64(1000).raw('k').Bytes(), "string of 1000"},
		"nested array":         {file(0, 1).str("k").u32(9).u32(9).u64(1).Bytes(), "invalid array type 9"},
		"array past the end":   {file(0, 1).str("k").u32(9).u32(4).u64(1 << 61).Bytes(), "array of"},
		"strings past the end": {file(0, 1).str("k").u32(9).u32(8).u64(1 << 40).Bytes(), "array of"},
		"truncated array":      {file(0, 1).str("k").u32(9).u32(8).u64(2).str("a").raw(0, 0, 0, 0, 0, 0, 0).Bytes(), "element 1"},
		"alignment type":       {file(0, 1).str(KeyAlignment).u32(5).u32(32).Bytes(), "want uint32"},
		"alignment zero":       {file(0, 1).str(KeyAlignment).u32(4).u32(0).Bytes(), "power of two"},
		"alignment 48":         {file(0, 1).str(KeyAlignment).u32(4).u32(48).Bytes(), "power of two"},
		"five dimensions":      {file(1, 0).tensorInfo("t", TypeF32, 0, 1, 1, 1, 1, 1).padTo(32, 4).Bytes(), "5 dimensions"},
		"unknown ggml type":    {file(1, 0).tensorInfo("t", 4, 0, 1).padTo(32, 4).Bytes(), "unknown ggml type 4"},
		"ggml type past enum":  {file(1, 0).tensorInfo("t", 43, 0, 1).padTo(32, 4).Bytes(), "unknown ggml type 43"},
		"row not whole blocks": {file(1, 0).tensorInfo("t", TypeQ8_0, 0, 16).padTo(32, 34).Bytes(), "block size"},
		"negative dimension":   {file(1, 0).tensorInfo("t", TypeF32, 0, 1<<63).padTo(32, 4).Bytes(), "dimension 0"},
		"elements overflow":    {file(1, 0).tensorInfo("t", TypeF32, 0, 1<<40, 1<<40).padTo(32, 4).Bytes(), "overflow"},
		"bytes overflow":       {file(1, 0).tensorInfo("t", TypeF32, 0, 1<<62).padTo(32, 4).Bytes(), "overflow"},
		"empty name":           {file(1, 0).tensorInfo("", TypeF32, 0, 1).padTo(32, 4).Bytes(), "empty name"},
		"long name":            {file(1, 0).tensorInfo(strings.Repeat("x", 64), TypeF32, 0, 1).padTo(32, 4).Bytes(), "limit 63"},
		"duplicate tensor": {file(2, 0).tensorInfo("t", TypeF32, 0, 1).tensorInfo("t", TypeF32, 32, 1).padTo(32, 36).Bytes(),
			`duplicate tensor "t"`},
		"offset not packed": {file(2, 0).tensorInfo("a", TypeF32, 0, 1).tensorInfo("b", TypeF32, 4, 1).padTo(32, 36).Bytes(),
			"at offset 4, want 32"},
		"first offset not 0": {file(1, 0).tensorInfo("a", TypeF32, 32, 1).padTo(32, 40).Bytes(), "want 0"},
		"section overflow": {file(2, 0).tensorInfo("a", TypeF32, 0, 1<<60).tensorInfo("b", TypeF32, 1<<62, 1<<60).padTo(32, 4).Bytes(),
			"data section size overflows"},
		"data past the end": {file(1, 0).tensorInfo("a", TypeF32, 0, 2).padTo(32, 4).Bytes(), "past the end"},
		"no data section":   {file(1, 0).tensorInfo("a", TypeF32, 0, 0).Bytes(), "past the end"},
	} {
		_, err := Read(bytes.NewReader(c.b), int64(len(c.b)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", name, err, c.want)
		}
	}
}

// TestReadTruncated: every proper prefix of a valid file is an error.
func TestReadTruncated(t *testing.T) {
	infos, data := testTensors()
	b := write(t, allKVs, infos, data)
	// The last tensor is empty and the one before it ends 8 bytes before
	// the final padding: cut before that.
	f, _ := Read(bytes.NewReader(b), int64(len(b)))
	n, _ := f.Tensors[3].Size()
	end := int(f.DataOffset + int64(f.Tensors[3].Offset+n))
	for i := range end {
		if _, err := Read(bytes.NewReader(b[:i]), int64(i)); err == nil {
			t.Fatalf("%d of %d bytes: no error", i, len(b))
		}
	}
}

func TestWriterErrors(t *testing.T) {
	f32 := []TensorInfo{{Name: "a", Dims: []uint64{2}, Type: TypeF32}}
	for name, c := range map[string]struct {
		kvs     []KV
		tensors []TensorInfo
		want    string
	}{
		"empty key":          {[]KV{{"", uint8(1)}}, nil, "empty key"},
		"duplicate key":      {[]KV{{"k", uint8(1)}, {"k", uint8(2)}}, nil, "duplicate key"},
		"int":                {[]KV{{"k", 1}}, nil, "no GGUF type"},
		"nested array":       {[]KV{{"k", [][]uint32{{1}}}}, nil, "no GGUF type"},
		"alignment type":     {[]KV{{KeyAlignment, uint64(32)}}, nil, "want uint32"},
		"alignment 3":        {[]KV{{KeyAlignment, uint32(3)}}, nil, "power of two"},
		"duplicate tensor":   {nil, append(f32, f32...), "duplicate tensor"},
		"unknown type":       {nil, []TensorInfo{{Name: "a", Dims: []uint64{1}, Type: 5}}, "unknown ggml type"},
		"partial block":      {nil, []TensorInfo{{Name: "a", Dims: []uint64{33}, Type: TypeQ4_0}}, "block size"},
		"too many dims":      {nil, []TensorInfo{{Name: "a", Dims: []uint64{1, 1, 1, 1, 1}, Type: TypeF32}}, "limit 4"},
		"long name":          {nil, []TensorInfo{{Name: strings.Repeat("n", 64), Dims: []uint64{1}, Type: TypeF32}}, "limit 63"},
		"dimension too big":  {nil, []TensorInfo{{Name: "a", Dims: []uint64{1 << 63}, Type: TypeF32}}, "dimension 0"},
		"elements overflow":  {nil, []TensorInfo{{Name: "a", Dims: []uint64{1 << 32, 1 << 32}, Type: TypeF32}}, "overflow"},
		"data size overflow": {nil, []TensorInfo{{Name: "a", Dims: []uint64{1 << 62}, Type: TypeF32}}, "overflow"},
		"section overflow": {nil, []TensorInfo{{Name: "a", Dims: []uint64{1 << 60}, Type: TypeF32}, {Name: "b", Dims: []uint64{1 << 60}, Type: TypeF32}},
			"data section size overflows"},
	} {
		if _, err := NewWriter(io.Discard, c.kvs, c.tensors); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", name, err, c.want)
		}
	}

	w, err := NewWriter(io.Discard, nil, append(f32, TensorInfo{Name: "b", Dims: []uint64{1}, Type: TypeF16}))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Tensors()[1].Offset; got != DefaultAlignment {
		t.Errorf("second tensor's offset = %d, want %d", got, DefaultAlignment)
	}
	if err := w.WriteTensor(make([]byte, 4)); err == nil {
		t.Error("WriteTensor of 4 bytes for 8: no error")
	}
	if err := w.WriteTensor(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), `"b" is next`) {
		t.Errorf("Close with a tensor left: %v", err)
	}
	if err := w.WriteTensor(make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor(nil); err == nil {
		t.Error("WriteTensor past the last tensor: no error")
	}
	if err := w.Close(); err != nil {
		t.Error(err)
	}

	if _, err := NewWriter(failWriter{}, []KV{{"k", strings.Repeat("x", 1<<20)}}, nil); err == nil {
		t.Error("NewWriter to a failing writer: no error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestLookup(t *testing.T) {
	infos, data := testTensors()
	b := write(t, allKVs, infos, data)
	f, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := f.Lookup("t.u16"); !ok || v != uint16(65535) {
		t.Errorf("Lookup(t.u16) = %v, %v", v, ok)
	}
	if _, ok := f.Lookup("nope"); ok {
		t.Error("Lookup(nope) found")
	}
	if _, err := f.TensorData("nope"); err == nil {
		t.Error("TensorData(nope): no error")
	}
	if _, err := ReadFile("testdata/does-not-exist.gguf"); err == nil {
		t.Error("ReadFile of a missing file: no error")
	}
	if _, err := Read(bytes.NewReader(b), -1); err == nil {
		t.Error("Read of size -1: no error")
	}
	if _, err := (&File{Tensors: f.Tensors}).TensorData(f.Tensors[0].Name); err == nil {
		t.Error("TensorData of a File not read: no error")
	}
}

// FuzzRead: Read never panics, and what it accepts it writes back into a
// file it reads the same way.
func FuzzRead(f *testing.F) {
	infos, data := testTensors()
	f.Add(write(f, allKVs[:5], infos[:2], data[:2]))
	f.Add(write(f, []KV{{"a", []string{"x", "yz"}}, {KeyAlignment, uint32(8)}}, infos[2:3], data[2:3]))
	f.Add(file(0, 0).Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		b1 := rewrite(t, g)
		g1, err := Read(bytes.NewReader(b1), int64(len(b1)))
		if err != nil {
			t.Fatalf("re-reading what was written: %v", err)
		}
		if b2 := rewrite(t, g1); !bytes.Equal(b1, b2) {
			t.Fatal("a second rewrite differs")
		}
	})
}
