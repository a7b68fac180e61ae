// Package gguf reads and writes GGUF files, the model format of ggml and
// llama.cpp, version 3, little-endian. It is small on purpose: enough to
// copy a tokenizer out of one file into a new one and to write the F32 and
// F16 tensors of a test model (see package testmodel), and to read such
// files back and check them. Standard library only; any package may import
// gguf.
//
// A file is, in order (all integers little-endian):
//
//   - the magic "GGUF", the version (uint32, 3), the tensor count and the
//     key/value count (both uint64, read as int64 and checked to be ≥ 0);
//   - the key/values: a key (string), a value type (uint32, [Type]), and
//     the value; an array is the type [TypeArray], then its element type,
//     its length (uint64) and the elements; arrays of arrays are rejected,
//     as llama.cpp rejects them;
//   - the tensor infos: a name (string, under 64 bytes), the number of
//     dimensions (uint32, at most 4), the dimensions (uint64 each, the
//     innermost, contiguous one first: ggml's ne[0], ne[1], …), the ggml
//     type (uint32, [GGMLType]) and the offset of the tensor's data from
//     the start of the data section (uint64);
//   - if there are tensors, zero padding up to the alignment, then the
//     data section: each tensor's bytes, in the order of the infos, each
//     padded with zeros to the alignment. The alignment is the uint32 key
//     "general.alignment" if present (a power of two), else 32.
//
// A string is its length in bytes (uint64) followed by the bytes, with no
// terminating NUL. A bool is one byte, 0 or 1.
//
// The reader checks what llama.cpp's gguf_init_from_file checks (magic,
// version 2 or 3, unique non-empty keys, the alignment key's type and
// value, unique tensor names under 64 bytes, at most 4 non-negative
// dimensions whose product does not overflow, a known ggml type whose block
// size divides the first dimension, offsets laid out back to back with
// padding) and, in addition, that every tensor's data lies inside the
// file. It
// returns an error, never panics, on a truncated or malformed file, and
// what it allocates for the lengths it reads is bounded by a small multiple
// of the file's size.
//
// The format follows these files of llama.cpp (tag v0.4.0 as shipped in
// node-llama-cpp 3.21.1): ggml/include/gguf.h (the layout and the
// gguf_type enum), ggml/src/gguf.cpp (gguf_init_from_reader's checks, and
// gguf_writer_base for the byte layout and padding), gguf-py/gguf/constants.py
// (GGUFValueType, GGMLQuantizationType and GGML_QUANT_SIZES, the ggml
// types' block and byte sizes), gguf-py/gguf/gguf_writer.py and
// gguf-py/gguf/gguf_reader.py (the Python writer and reader, the same layout).
package gguf

import (
	"fmt"
	"math"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// Version is the GGUF version the writer writes.
const Version = 3

// DefaultAlignment is the alignment of the data section and of each
// tensor's data when a file has no "general.alignment" key.
const DefaultAlignment = 32

// KeyAlignment is the key that overrides DefaultAlignment; its value must be
// a uint32 power of two.
const KeyAlignment = "general.alignment"

// maxNameLen is ggml's GGML_MAX_NAME: a tensor name has fewer bytes.
const maxNameLen = 64

// maxDims is ggml's GGML_MAX_DIMS.
const maxDims = 4

// Type is the type of a key/value's value, gguf_type in gguf.h.
type Type uint32

// The value types. Their numbers are the file's.
const (
	TypeUint8   Type = 0
	TypeInt8    Type = 1
	TypeUint16  Type = 2
	TypeInt16   Type = 3
	TypeUint32  Type = 4
	TypeInt32   Type = 5
	TypeFloat32 Type = 6
	TypeBool    Type = 7
	TypeString  Type = 8
	TypeArray   Type = 9
	TypeUint64  Type = 10
	TypeInt64   Type = 11
	TypeFloat64 Type = 12
)

var typeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"}

// String returns the type's short name as gguf.cpp prints it ("u32", "str", …).
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint32(t))
}

// size returns the encoded size of a fixed-size type, 0 for strings, arrays
// and unknown types.
func (t Type) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// KV is one metadata key/value pair. Value holds one of the Go types that
// map one to one onto the GGUF types: uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64, float64, or a slice of one
// of them (an array; []string included). The reader produces exactly these
// types, so a KV read from one file is written unchanged into another.
type KV struct {
	Key   string
	Value any
}

// Type returns the type of kv's value: TypeArray for a slice. It returns an
// error for a Go type that has no GGUF type.
func (kv KV) Type() (Type, error) {
	t, _, err := typesOf(kv.Value)
	if err != nil {
		return 0, fmt.Errorf("gguf: key %q: %w", kv.Key, err)
	}
	return t, nil
}

// ArrayType returns the element type of an array value, or an error if the
// value is not a supported slice.
func (kv KV) ArrayType() (Type, error) {
	t, elem, err := typesOf(kv.Value)
	switch {
	case err != nil:
		return 0, fmt.Errorf("gguf: key %q: %w", kv.Key, err)
	case t != TypeArray:
		return 0, fmt.Errorf("gguf: key %q: %T is not an array", kv.Key, kv.Value)
	}
	return elem, nil
}

// typesOf returns the GGUF type of v and, for an array, its element type.
func typesOf(v any) (typ, elem Type, err error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, 0, nil
	case int8:
		return TypeInt8, 0, nil
	case uint16:
		return TypeUint16, 0, nil
	case int16:
		return TypeInt16, 0, nil
	case uint32:
		return TypeUint32, 0, nil
	case int32:
		return TypeInt32, 0, nil
	case float32:
		return TypeFloat32, 0, nil
	case bool:
		return TypeBool, 0, nil
	case string:
		return TypeString, 0, nil
	case uint64:
		return TypeUint64, 0, nil
	case int64:
		return TypeInt64, 0, nil
	case float64:
		return TypeFloat64, 0, nil
	case []uint8:
		return TypeArray, TypeUint8, nil
	case []int8:
		return TypeArray, TypeInt8, nil
	case []uint16:
		return TypeArray, TypeUint16, nil
	case []int16:
		return TypeArray, TypeInt16, nil
	case []uint32:
		return TypeArray, TypeUint32, nil
	case []int32:
		return TypeArray, TypeInt32, nil
	case []float32:
		return TypeArray, TypeFloat32, nil
	case []bool:
		return TypeArray, TypeBool, nil
	case []string:
		return TypeArray, TypeString, nil
	case []uint64:
		return TypeArray, TypeUint64, nil
	case []int64:
		return TypeArray, TypeInt64, nil
	case []float64:
		return TypeArray, TypeFloat64, nil
	}
	return 0, 0, fmt.Errorf("value of Go type %T has no GGUF type", v)
}

// GGMLType is a tensor's element type, ggml_type in ggml.h.
type GGMLType uint32

// The ggml types this package names. The reader knows the sizes of every
// type of GGML_QUANT_SIZES (quantized ones included) so that it can lay out
// and check any file; the writer's callers use F32 and F16.
const (
	TypeF32  GGMLType = 0
	TypeF16  GGMLType = 1
	TypeQ4_0 GGMLType = 2
	TypeQ8_0 GGMLType = 8
	TypeBF16 GGMLType = 30
)

// ggmlTypes holds each known ggml type's name, block size (elements) and
// block bytes, from GGML_QUANT_SIZES in gguf-py/gguf/constants.py. The
// holes (4, 5, 31–33, 36–38) are types removed from ggml.
var ggmlTypes = map[GGMLType]struct {
	name         string
	block, bytes uint64
}{
	0: {"F32", 1, 4}, 1: {"F16", 1, 2}, 2: {"Q4_0", 32, 18}, 3: {"Q4_1", 32, 20},
	6: {"Q5_0", 32, 22}, 7: {"Q5_1", 32, 24}, 8: {"Q8_0", 32, 34}, 9: {"Q8_1", 32, 40},
	10: {"Q2_K", 256, 84}, 11: {"Q3_K", 256, 110}, 12: {"Q4_K", 256, 144}, 13: {"Q5_K", 256, 176},
	14: {"Q6_K", 256, 210}, 15: {"Q8_K", 256, 292}, 16: {"IQ2_XXS", 256, 66}, 17: {"IQ2_XS", 256, 74},
	18: {"IQ3_XXS", 256, 98}, 19: {"IQ1_S", 256, 50}, 20: {"IQ4_NL", 32, 18}, 21: {"IQ3_S", 256, 110},
	22: {"IQ2_S", 256, 82}, 23: {"IQ4_XS", 256, 136}, 24: {"I8", 1, 1}, 25: {"I16", 1, 2},
	26: {"I32", 1, 4}, 27: {"I64", 1, 8}, 28: {"F64", 1, 8}, 29: {"IQ1_M", 256, 56},
	30: {"BF16", 1, 2}, 34: {"TQ1_0", 256, 54}, 35: {"TQ2_0", 256, 66}, 39: {"MXFP4", 32, 17},
	40: {"NVFP4", 64, 36}, 41: {"Q1_0", 128, 18}, 42: {"Q2_0", 64, 18},
}

// String returns the type's name as ggml prints it ("F32", "Q4_K", …).
func (t GGMLType) String() string {
	if tt, ok := ggmlTypes[t]; ok {
		return tt.name
	}
	return fmt.Sprintf("GGMLType(%d)", uint32(t))
}

// BlockSize returns the number of elements in one block of the type (1 for
// F32 and F16), or 0 for an unknown type.
func (t GGMLType) BlockSize() uint64 { return ggmlTypes[t].block }

// BlockBytes returns the encoded size of one block (4 for F32, 2 for F16),
// or 0 for an unknown type.
func (t GGMLType) BlockBytes() uint64 { return ggmlTypes[t].bytes }

// TensorInfo describes one tensor: its name, its dimensions innermost
// first (ggml's ne: a matrix of n_rows rows of n_cols is {n_cols, n_rows};
// at most 4, none meaning a single element),
// its type, and where its data starts, counted from the start of the data
// section. The writer computes Offset and ignores the caller's.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64
}

// NumElements returns the product of the dimensions, or false if it
// overflows.
func (ti TensorInfo) NumElements() (uint64, bool) {
	n := uint64(1)
	for _, d := range ti.Dims {
		if d != 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// Size returns the size in bytes of the tensor's data, unpadded.
func (ti TensorInfo) Size() (uint64, error) {
	if err := ti.check(); err != nil {
		return 0, fmt.Errorf("gguf: %w", err)
	}
	n, _ := ti.NumElements()
	return n / ti.Type.BlockSize() * ti.Type.BlockBytes(), nil
}

// check reports whether ti is a tensor llama.cpp would accept.
func (ti TensorInfo) check() error {
	switch {
	case ti.Name == "":
		return fmt.Errorf("tensor with an empty name")
	case len(ti.Name) >= maxNameLen:
		return fmt.Errorf("tensor name %.20q… is %d bytes, limit %d", ti.Name, len(ti.Name), maxNameLen-1)
	case len(ti.Dims) > maxDims:
		return fmt.Errorf("tensor %q has %d dimensions, limit %d", ti.Name, len(ti.Dims), maxDims)
	}
	for i, d := range ti.Dims {
		if d > math.MaxInt64 {
			return fmt.Errorf("tensor %q: dimension %d is %d", ti.Name, i, d)
		}
	}
	n, ok := ti.NumElements()
	if !ok {
		return fmt.Errorf("tensor %q: %v elements overflow", ti.Name, ti.Dims)
	}
	block := ti.Type.BlockSize()
	if block == 0 {
		return fmt.Errorf("tensor %q has unknown ggml type %d", ti.Name, uint32(ti.Type))
	}
	if len(ti.Dims) > 0 && ti.Dims[0]%block != 0 {
		return fmt.Errorf("tensor %q: first dimension %d is not a multiple of %v's block size %d", ti.Name, ti.Dims[0], ti.Type, block)
	}
	if n/block > math.MaxInt64/ti.Type.BlockBytes() {
		return fmt.Errorf("tensor %q: size in bytes overflows", ti.Name)
	}
	return nil
}

// alignmentOf returns the alignment a file with these key/values uses.
func alignmentOf(kvs []KV) (uint64, error) {
	for _, kv := range kvs {
		if kv.Key != KeyAlignment {
			continue
		}
		a, ok := kv.Value.(uint32)
		if !ok {
			return 0, fmt.Errorf("gguf: %s is %T, want uint32", KeyAlignment, kv.Value)
		}
		if a == 0 || a&(a-1) != 0 {
			return 0, fmt.Errorf("gguf: %s %d is not a power of two", KeyAlignment, a)
		}
		return uint64(a), nil
	}
	return DefaultAlignment, nil
}

// pad returns n rounded up to a multiple of align (a power of two).
func pad(n, align uint64) uint64 { return (n + align - 1) &^ (align - 1) }
