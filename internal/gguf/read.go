package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// File is a parsed GGUF file: its header, its key/values in file order, its
// tensor infos in file order, and access to the tensors' data.
type File struct {
	// Version is the file's GGUF version, 2 or 3 (the same layout).
	Version uint32
	// KVs are the key/values, in file order, with their exact types.
	KVs []KV
	// Tensors are the tensor infos, in file order.
	Tensors []TensorInfo
	// Alignment is the alignment in effect: general.alignment or 32.
	Alignment uint64
	// DataOffset is where the data section starts, from the start of the
	// file.
	DataOffset int64

	r io.ReaderAt
}

// ReadFile reads and parses the GGUF file name. It reads the whole file
// into memory: it is meant for the small files of tests (vocabularies,
// test models), not for real models.
func ReadFile(name string) (*File, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// Read parses the GGUF file of the given size in r. It reads the header,
// the key/values and the tensor infos; the tensors' data is read later, by
// TensorData, from r, which must stay readable as long as the File is used.
func Read(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("gguf: negative size %d", size)
	}
	d := &decoder{r: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10), size: size}
	f := &File{r: r}
	if err := d.header(f); err != nil {
		return nil, err
	}
	return f, nil
}

// Lookup returns the value of key, if the file has it.
func (f *File) Lookup(key string) (any, bool) {
	for _, kv := range f.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Tensor returns the info of the tensor called name, if the file has it.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// TensorData reads the data of the tensor called name.
func (f *File) TensorData(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	switch {
	case !ok:
		return nil, fmt.Errorf("gguf: no tensor %q", name)
	case f.r == nil:
		return nil, fmt.Errorf("gguf: tensor %q: the File was not read from a file", name)
	}
	n, err := t.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if n == 0 {
		return b, nil
	}
	// A ReaderAt may return io.EOF with all the bytes read at the end.
	if m, err := f.r.ReadAt(b, f.DataOffset+int64(t.Offset)); m < len(b) {
		return nil, fmt.Errorf("gguf: reading tensor %q: %w", name, err)
	}
	return b, nil
}

// decoder reads the file's header sequentially, counting the bytes read so
// that no length read from the file can claim more than what is left.
type decoder struct {
	r    *bufio.Reader
	off  int64 // bytes consumed
	size int64 // the file's size
	buf  [8]byte
}

// left returns the number of bytes not yet consumed.
func (d *decoder) left() uint64 { return uint64(d.size - d.off) }

// next returns the next n (≤ 8) bytes.
func (d *decoder) next(n int) ([]byte, error) {
	if _, err := io.ReadFull(d.r, d.buf[:n]); err != nil {
		return nil, d.eof(err)
	}
	d.off += int64(n)
	return d.buf[:n], nil
}

func (d *decoder) eof(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated at byte %d: %w", d.off, io.ErrUnexpectedEOF)
	}
	return err
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.next(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.next(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *decoder) str() (string, error) {
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	if n > d.left() {
		return "", fmt.Errorf("string of %d bytes at byte %d: only %d left", n, d.off-8, d.left())
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return "", d.eof(err)
	}
	d.off += int64(n)
	return string(b), nil
}

// header parses everything up to the data section into f.
func (d *decoder) header(f *File) error {
	b, err := d.next(4)
	if err != nil {
		return fmt.Errorf("gguf: magic: %w", err)
	}
	if string(b) != Magic {
		return fmt.Errorf("gguf: bad magic %q, want %q", b, Magic)
	}
	if f.Version, err = d.u32(); err != nil {
		return fmt.Errorf("gguf: version: %w", err)
	}
	if f.Version != 2 && f.Version != 3 {
		return fmt.Errorf("gguf: version %d not supported (2 and 3 are; a byte-swapped version means a big-endian file)", f.Version)
	}
	nTensors, err := d.u64()
	if err != nil {
		return fmt.Errorf("gguf: tensor count: %w", err)
	}
	nKV, err := d.u64()
	if err != nil {
		return fmt.Errorf("gguf: key/value count: %w", err)
	}
	// Each key/value and each tensor info takes more than 8 bytes: counts
	// beyond that are lies, caught here before any loop.
	if nKV > d.left()/8 || nTensors > d.left()/8 {
		return fmt.Errorf("gguf: %d key/values and %d tensors cannot fit in %d bytes", nKV, nTensors, d.size)
	}
	keys := make(map[string]bool)
	for i := range nKV {
		kv, err := d.kv()
		if err != nil {
			return fmt.Errorf("gguf: key/value %d: %w", i, err)
		}
		if keys[kv.Key] {
			return fmt.Errorf("gguf: duplicate key %q", kv.Key)
		}
		keys[kv.Key] = true
		f.KVs = append(f.KVs, kv)
	}
	if f.Alignment, err = alignmentOf(f.KVs); err != nil {
		return err
	}
	names := make(map[string]bool)
	var want uint64 // the offset the next tensor must have
	for i := range nTensors {
		t, err := d.tensorInfo()
		if err != nil {
			return fmt.Errorf("gguf: tensor info %d: %w", i, err)
		}
		if names[t.Name] {
			return fmt.Errorf("gguf: duplicate tensor %q", t.Name)
		}
		names[t.Name] = true
		if t.Offset != want {
			return fmt.Errorf("gguf: tensor %q at offset %d, want %d", t.Name, t.Offset, want)
		}
		n, _ := t.Size()
		if want = t.Offset + n; want > math.MaxInt64 || pad(want, f.Alignment) > math.MaxInt64 {
			return fmt.Errorf("gguf: tensor %q: data section size overflows", t.Name)
		}
		want = pad(want, f.Alignment)
		f.Tensors = append(f.Tensors, t)
	}
	f.DataOffset = d.off
	if nTensors > 0 {
		f.DataOffset = int64(pad(uint64(d.off), f.Alignment))
	}
	if f.DataOffset > d.size {
		return fmt.Errorf("gguf: data section at byte %d is past the end (%d bytes)", f.DataOffset, d.size)
	}
	for _, t := range f.Tensors {
		if n, _ := t.Size(); t.Offset+n > uint64(d.size-f.DataOffset) {
			return fmt.Errorf("gguf: tensor %q: %d bytes at offset %d go past the end of the file", t.Name, n, t.Offset)
		}
	}
	return nil
}

// kv reads one key/value.
func (d *decoder) kv() (KV, error) {
	key, err := d.str()
	if err != nil {
		return KV{}, fmt.Errorf("key: %w", err)
	}
	if key == "" {
		return KV{}, errors.New("empty key")
	}
	t, err := d.u32()
	if err != nil {
		return KV{}, fmt.Errorf("%q: type: %w", key, err)
	}
	var v any
	if Type(t) == TypeArray {
		v, err = d.array()
	} else {
		v, err = d.scalar(Type(t))
	}
	if err != nil {
		return KV{}, fmt.Errorf("%q: %w", key, err)
	}
	return KV{Key: key, Value: v}, nil
}

// scalar reads one value of type t.
func (d *decoder) scalar(t Type) (any, error) {
	if t == TypeString {
		return d.str()
	}
	n := t.size()
	if n == 0 {
		return nil, fmt.Errorf("invalid type %d", uint32(t))
	}
	b, err := d.next(n)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return b[0], nil
	case TypeInt8:
		return int8(b[0]), nil
	case TypeBool:
		return b[0] != 0, nil
	case TypeUint16:
		return le.Uint16(b), nil
	case TypeInt16:
		return int16(le.Uint16(b)), nil
	case TypeUint32:
		return le.Uint32(b), nil
	case TypeInt32:
		return int32(le.Uint32(b)), nil
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case TypeUint64:
		return le.Uint64(b), nil
	case TypeInt64:
		return int64(le.Uint64(b)), nil
	default: // TypeFloat64
		return math.Float64frombits(le.Uint64(b)), nil
	}
}

// array reads an array's element type, length and elements.
func (d *decoder) array() (any, error) {
	et, err := d.u32()
	if err != nil {
		return nil, fmt.Errorf("array type: %w", err)
	}
	t := Type(et)
	n, err := d.u64()
	if err != nil {
		return nil, fmt.Errorf("array length: %w", err)
	}
	size := uint64(t.size())
	switch {
	case t == TypeString:
		size = 8 // each string has its length
	case size == 0:
		return nil, fmt.Errorf("invalid array type %d", et)
	}
	if n > d.left()/size {
		return nil, fmt.Errorf("array of %d %v at byte %d: only %d bytes left", n, t, d.off, d.left())
	}
	switch t {
	case TypeUint8:
		return readArray[uint8](d, t, n)
	case TypeInt8:
		return readArray[int8](d, t, n)
	case TypeUint16:
		return readArray[uint16](d, t, n)
	case TypeInt16:
		return readArray[int16](d, t, n)
	case TypeUint32:
		return readArray[uint32](d, t, n)
	case TypeInt32:
		return readArray[int32](d, t, n)
	case TypeFloat32:
		return readArray[float32](d, t, n)
	case TypeBool:
		return readArray[bool](d, t, n)
	case TypeString:
		return readArray[string](d, t, n)
	case TypeUint64:
		return readArray[uint64](d, t, n)
	case TypeInt64:
		return readArray[int64](d, t, n)
	default: // TypeFloat64
		return readArray[float64](d, t, n)
	}
}

func readArray[T any](d *decoder, t Type, n uint64) ([]T, error) {
	out := make([]T, n)
	for i := range out {
		v, err := d.scalar(t)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = v.(T)
	}
	return out, nil
}

// tensorInfo reads one tensor info and checks it.
func (d *decoder) tensorInfo() (TensorInfo, error) {
	var t TensorInfo
	var err error
	if t.Name, err = d.str(); err != nil {
		return t, fmt.Errorf("name: %w", err)
	}
	nDims, err := d.u32()
	if err != nil {
		return t, fmt.Errorf("%q: dimensions: %w", t.Name, err)
	}
	if nDims > maxDims {
		return t, fmt.Errorf("%q has %d dimensions, limit %d", t.Name, nDims, maxDims)
	}
	t.Dims = make([]uint64, nDims)
	for i := range t.Dims {
		if t.Dims[i], err = d.u64(); err != nil {
			return t, fmt.Errorf("%q: dimension %d: %w", t.Name, i, err)
		}
	}
	typ, err := d.u32()
	if err != nil {
		return t, fmt.Errorf("%q: type: %w", t.Name, err)
	}
	t.Type = GGMLType(typ)
	if t.Offset, err = d.u64(); err != nil {
		return t, fmt.Errorf("%q: offset: %w", t.Name, err)
	}
	return t, t.check()
}
