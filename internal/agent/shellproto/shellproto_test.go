package shellproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	big := bytes.Repeat([]byte("x"), 3*ChunkSize+5)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Data(TypeStdin, big))
	must(w.Frame(TypeResize, ResizePayload(40, 132)))
	must(w.Frame(TypeSignal, []byte("INT")))
	must(w.Frame(TypeStdinEOF, nil))
	must(w.Exit(ExitStatus{Code: 130, Signal: "INT"}))

	r := NewReader(&b)
	var got []byte
	for i := 0; i < 4; i++ {
		f, err := r.Next()
		must(err)
		if f.Type != TypeStdin {
			t.Fatalf("frame %d type %c", i, f.Type)
		}
		got = append(got, f.Payload...)
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("data: got %d bytes, want %d", len(got), len(big))
	}
	f, err := r.Next()
	must(err)
	if rows, cols := f.Resize(); f.Type != TypeResize || rows != 40 || cols != 132 {
		t.Fatalf("resize: %c %d %d", f.Type, rows, cols)
	}
	f, err = r.Next()
	must(err)
	if f.Type != TypeSignal || string(f.Payload) != "INT" {
		t.Fatalf("signal: %c %q", f.Type, f.Payload)
	}
	f, err = r.Next()
	must(err)
	if f.Type != TypeStdinEOF {
		t.Fatalf("eof: %c", f.Type)
	}
	f, err = r.Next()
	must(err)
	if es := f.Exit(); f.Type != TypeExit || es.Code != 130 || es.Signal != "INT" {
		t.Fatalf("exit: %c %+v", f.Type, es)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v, want EOF", err)
	}
}

func TestDecoderRejects(t *testing.T) {
	for name, in := range map[string][]byte{
		"unknown type":  AppendFrame(nil, 'Q', nil),
		"too large":     {TypeStdin, 0xff, 0xff, 0xff, 0xff},
		"short resize":  AppendFrame(nil, TypeResize, []byte{1, 2}),
		"empty signal":  AppendFrame(nil, TypeSignal, nil),
		"bad exit":      AppendFrame(nil, TypeExit, []byte("{")),
		"eof with data": AppendFrame(nil, TypeStdinEOF, []byte{1}),
	} {
		if _, err := NewReader(bytes.NewReader(in)).Next(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	_, err := NewReader(bytes.NewReader(AppendFrame(nil, TypeStdout, []byte("abc"))[:6])).Next()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated frame: %v, want ErrUnexpectedEOF", err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(AppendFrame(nil, TypeStdout, []byte("hello")))
	f.Add(AppendFrame(nil, TypeResize, ResizePayload(24, 80)))
	f.Add(AppendFrame(AppendFrame(nil, TypeSignal, []byte("INT")), TypeExit, []byte(`{"code":3}`)))
	f.Add([]byte{TypeStdin, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		var out []byte
		for {
			fr, err := r.Next()
			if err != nil {
				break
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			switch fr.Type {
			case TypeResize:
				fr.Resize()
			case TypeExit:
				fr.Exit()
			}
			out = AppendFrame(out, fr.Type, fr.Payload)
		}
		// Whatever decoded re-encodes to a prefix of the input.
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("re-encoding is not a prefix of the input")
		}
	})
}
