package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Writer writes one GGUF file, version 3. NewWriter writes the header, the
// key/values and the tensor infos at once; the tensors' data follows, one
// WriteTensor call per tensor in the order of the infos, so that a model
// need not be in memory whole; Close writes what is buffered.
//
// The bytes are those gguf-py's GGUFWriter writes for the same key/values
// and tensors. gguf.cpp's differ in two ways that change no reader's
// view: it drops a tensor's trailing dimensions of 1, and it pads the end of
// a file that has no tensors.
type Writer struct {
	w       *bufio.Writer
	n       uint64 // bytes written
	align   uint64
	tensors []TensorInfo
	sizes   []uint64
	next    int   // index of the next tensor to write
	err     error // sticky
	buf     [8]byte
}

// NewWriter writes the header, kvs and the infos of tensors to w and
// returns a Writer that expects the tensors' data. The alignment is kvs'
// general.alignment (a uint32 power of two) if present, else 32; keys must
// be unique and non-empty, values of the Go types KV documents; tensor
// names must be unique and under 64 bytes, and each tensor's first
// dimension a multiple of its type's block size. Each tensor's Offset is
// computed here (the caller's is ignored) and can be read back in Tensors.
func NewWriter(w io.Writer, kvs []KV, tensors []TensorInfo) (*Writer, error) {
	align, err := alignmentOf(kvs)
	if err != nil {
		return nil, err
	}
	gw := &Writer{w: bufio.NewWriterSize(w, 256<<10), align: align}
	keys := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		switch {
		case kv.Key == "":
			return nil, errors.New("gguf: empty key")
		case keys[kv.Key]:
			return nil, fmt.Errorf("gguf: duplicate key %q", kv.Key)
		}
		keys[kv.Key] = true
		if _, err := kv.Type(); err != nil {
			return nil, err
		}
	}
	names := make(map[string]bool, len(tensors))
	var off uint64
	for _, t := range tensors {
		size, err := t.Size()
		if err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("gguf: duplicate tensor %q", t.Name)
		}
		names[t.Name] = true
		t.Dims = append([]uint64(nil), t.Dims...)
		t.Offset = off
		gw.tensors = append(gw.tensors, t)
		gw.sizes = append(gw.sizes, size)
		if off += size; off > math.MaxInt64 || pad(off, align) > math.MaxInt64 {
			return nil, fmt.Errorf("gguf: tensor %q: data section size overflows", t.Name)
		}
		off = pad(off, align)
	}

	gw.raw([]byte(Magic))
	gw.u32(Version)
	gw.u64(uint64(len(tensors)))
	gw.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		gw.str(kv.Key)
		gw.value(kv.Value)
	}
	for _, t := range gw.tensors {
		gw.str(t.Name)
		gw.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			gw.u64(d)
		}
		gw.u32(uint32(t.Type))
		gw.u64(t.Offset)
	}
	if len(tensors) > 0 {
		gw.pad() // gguf.cpp pads a file of no tensors too, gguf-py does not
	}
	if gw.err != nil {
		return nil, gw.err
	}
	return gw, nil
}

// Tensors returns the tensor infos as written, offsets included.
func (w *Writer) Tensors() []TensorInfo { return w.tensors }

// WriteTensor writes the data of the next tensor, which must be exactly its
// Size in bytes, and pads it to the alignment.
func (w *Writer) WriteTensor(data []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.next == len(w.tensors) {
		return fmt.Errorf("gguf: all %d tensors are written", len(w.tensors))
	}
	t := w.tensors[w.next]
	if uint64(len(data)) != w.sizes[w.next] {
		return fmt.Errorf("gguf: tensor %q: %d bytes, want %d", t.Name, len(data), w.sizes[w.next])
	}
	w.raw(data)
	w.pad()
	w.next++
	if w.err != nil {
		return fmt.Errorf("gguf: tensor %q: %w", t.Name, w.err)
	}
	return nil
}

// Close checks that every tensor was written and flushes the buffer. It
// does not close the underlying io.Writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next != len(w.tensors) {
		return fmt.Errorf("gguf: %d of %d tensors written, %q is next", w.next, len(w.tensors), w.tensors[w.next].Name)
	}
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

func (w *Writer) raw(b []byte) {
	if w.err != nil {
		return
	}
	_, w.err = w.w.Write(b)
	w.n += uint64(len(b))
}

func (w *Writer) u8(v uint8) {
	w.buf[0] = v
	w.raw(w.buf[:1])
}

func (w *Writer) u16(v uint16) {
	binary.LittleEndian.PutUint16(w.buf[:], v)
	w.raw(w.buf[:2])
}

func (w *Writer) u32(v uint32) {
	binary.LittleEndian.PutUint32(w.buf[:], v)
	w.raw(w.buf[:4])
}

func (w *Writer) u64(v uint64) {
	binary.LittleEndian.PutUint64(w.buf[:], v)
	w.raw(w.buf[:8])
}

func (w *Writer) str(s string) {
	w.u64(uint64(len(s)))
	if w.err == nil {
		_, w.err = w.w.WriteString(s)
		w.n += uint64(len(s))
	}
}

func (w *Writer) pad() {
	for w.n%w.align != 0 && w.err == nil {
		w.u8(0)
	}
}

// value writes a value's type and the value; v's type is checked already.
func (w *Writer) value(v any) {
	t, elem, _ := typesOf(v)
	w.u32(uint32(t))
	if t != TypeArray {
		w.scalar(v)
		return
	}
	w.u32(uint32(elem))
	switch a := v.(type) {
	case []uint8:
		writeArray(w, a)
	case []int8:
		writeArray(w, a)
	case []uint16:
		writeArray(w, a)
	case []int16:
		writeArray(w, a)
	case []uint32:
		writeArray(w, a)
	case []int32:
		writeArray(w, a)
	case []float32:
		writeArray(w, a)
	case []bool:
		writeArray(w, a)
	case []string:
		writeArray(w, a)
	case []uint64:
		writeArray(w, a)
	case []int64:
		writeArray(w, a)
	case []float64:
		writeArray(w, a)
	}
}

func writeArray[T any](w *Writer, a []T) {
	w.u64(uint64(len(a)))
	for _, v := range a {
		w.scalar(v)
	}
}

// scalar writes one value, without its type.
func (w *Writer) scalar(v any) {
	switch v := v.(type) {
	case uint8:
		w.u8(v)
	case int8:
		w.u8(uint8(v))
	case bool:
		if v {
			w.u8(1)
		} else {
			w.u8(0)
		}
	case uint16:
		w.u16(v)
	case int16:
		w.u16(uint16(v))
	case uint32:
		w.u32(v)
	case int32:
		w.u32(uint32(v))
	case float32:
		w.u32(math.Float32bits(v))
	case uint64:
		w.u64(v)
	case int64:
		w.u64(uint64(v))
	case float64:
		w.u64(math.Float64bits(v))
	case string:
		w.str(v)
	}
}
