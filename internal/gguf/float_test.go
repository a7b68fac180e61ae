package gguf

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFloat32ToFloat16Table(t *testing.T) {
	for _, c := range []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"one third", 1.0 / 3, 0x3555},
		{"0.1", 0.1, 0x2e66},
		{"max finite", 65504, 0x7bff},
		{"below the max's tie rounds down", 65519.996, 0x7bff},
		{"max's tie rounds to even: infinity", 65520, 0x7c00},
		{"overflow", 1e6, 0x7c00},
		{"negative overflow", -1e30, 0xfc00},
		{"smallest normal", 0x1p-14, 0x0400},
		{"largest subnormal", 0x3ffp-24, 0x03ff},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"negative smallest subnormal", -0x1p-24, 0x8001},
		{"half the smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"just above that rounds up", 0x1.000002p-25, 0x0001},
		{"1.5 subnormal units tie to even 2", 0x3p-25, 0x0002},
		{"2.5 subnormal units tie to even 2", 0x5p-25, 0x0002},
		{"subnormal rounding into the smallest normal", 0x7ffp-25, 0x0400},
		{"underflow", 1e-10, 0x0000},
		{"negative underflow keeps its sign", -1e-10, 0x8000},
		{"float32 subnormal", math.SmallestNonzeroFloat32, 0x0000},
		{"tie between 1 and 1+2⁻¹⁰ goes to even 1", 1 + 0x1p-11, 0x3c00},
		{"tie between 1+2⁻¹⁰ and 1+2⁻⁹ goes to even 1+2⁻⁹", 1 + 0x3p-11, 0x3c02},
		{"just above a tie rounds up", 1 + 0x1p-11 + 0x1p-23, 0x3c01},
		{"mantissa carry into the exponent", 0x1.fffp0, 0x4000},
		{"infinity", float32(math.Inf(1)), 0x7c00},
		{"negative infinity", float32(math.Inf(-1)), 0xfc00},
		{"NaN", float32(math.NaN()), 0x7e00},
		{"negative NaN with a payload", math.Float32frombits(0xff800001), 0xfe00},
	} {
		if got := Float32ToFloat16(c.in); got != c.want {
			t.Errorf("%s: Float32ToFloat16(%g) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
	}
}

// TestFloat16ToFloat32All converts all 65536 half values: each is the
// float64 the format defines, and converts back to itself.
func TestFloat16ToFloat32All(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := Float16ToFloat32(h)
		exp, mant := int(h>>10&0x1f), float64(h&0x3ff)
		var want float64
		switch exp {
		case 0x1f:
			if mant != 0 {
				if !math.IsNaN(float64(f)) || math.Signbit(float64(f)) != (h&0x8000 != 0) {
					t.Fatalf("%#04x: got %v, want a NaN of the same sign", h, f)
				}
				if back := Float32ToFloat16(f); back != h&0x8000|0x7e00 {
					t.Fatalf("%#04x: NaN back to %#04x", h, back)
				}
				continue
			}
			want = math.Inf(1)
		case 0:
			want = math.Ldexp(mant, -24)
		default:
			want = math.Ldexp(1024+mant, exp-25)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if float64(f) != want || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("Float16ToFloat32(%#04x) = %v, want %v", h, f, want)
		}
		if back := Float32ToFloat16(f); back != h {
			t.Fatalf("Float32ToFloat16(Float16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
}

// ggmlFP32ToFP16 is ggml_compute_fp32_to_fp16 of ggml/src/ggml-impl.h,
// transcribed: an independent algorithm (float arithmetic, not bit
// rounding) to check Float32ToFloat16 against. The float32 conversions
// keep each operation rounded on its own, as in C.
func ggmlFP32ToFP16(f float32) uint16 {
	const scaleToInf, scaleToZero = float32(0x1p112), float32(0x1p-110)
	base := float32(float32(float32(math.Abs(float64(f)))*scaleToInf) * scaleToZero)
	w := math.Float32bits(f)
	shl1w := w + w
	sign := w & 0x80000000
	bias := shl1w & 0xff000000
	if bias < 0x71000000 {
		bias = 0x71000000
	}
	base = float32(math.Float32frombits(bias>>1+0x07800000) + base)
	bits := math.Float32bits(base)
	nonsign := bits>>13&0x7c00 + bits&0x0fff
	if shl1w > 0xff000000 {
		nonsign = 0x7e00
	}
	return uint16(sign>>16 | nonsign)
}

// TestFloat32ToFloat16MatchesGGML compares with ggml's algorithm on every
// sign, exponent and top-10 mantissa bits combined with the low bits that
// decide rounding, and on random values.
func TestFloat32ToFloat16MatchesGGML(t *testing.T) {
	check := func(f float32) {
		if got, want := Float32ToFloat16(f), ggmlFP32ToFP16(f); got != want {
			t.Fatalf("Float32ToFloat16(%g = %#08x) = %#04x, ggml %#04x", f, math.Float32bits(f), got, want)
		}
	}
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff}
	for hi := range uint32(1 << 19) {
		for _, lo := range lows {
			check(math.Float32frombits(hi<<13 | lo))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		check(math.Float32frombits(r.Uint32()))
		check(float32(r.NormFloat64() * 0.02)) // the test models' weights
	}
}

func TestFloatBytes(t *testing.T) {
	in := []float32{0, 1, -2.5, 65504, 0x1p-24}
	for _, typ := range []GGMLType{TypeF32, TypeF16} {
		var b []byte
		if typ == TypeF32 {
			b = F32Bytes(in)
		} else {
			b = F16Bytes(in)
		}
		out, err := Floats(typ, b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			if out[i] != in[i] {
				t.Errorf("%v: value %d = %v, want %v", typ, i, out[i], in[i])
			}
		}
	}
	if _, err := Floats(TypeF16, []byte{1}); err == nil {
		t.Error("Floats of an odd number of F16 bytes: no error")
	}
	if _, err := Floats(TypeQ8_0, make([]byte, 34)); err == nil {
		t.Error("Floats of Q8_0: no error")
	}
}
