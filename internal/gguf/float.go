package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Float32ToFloat16 converts f to IEEE 754 binary16 bits, rounding to the
// nearest representable value, ties to even, as ggml's
// ggml_compute_fp32_to_fp16 does: magnitudes from 65520 up become
// infinity, magnitudes under 2⁻¹⁴ become subnormals or (from 2⁻²⁵ down, the
// tie included) signed zero, and every NaN becomes the quiet NaN 0x7e00
// with its sign.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00
	}
	e := exp - 127 + 15 // the binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00 // too large even before rounding
	}
	if e <= 0 { // a binary16 subnormal, or zero
		if e < -10 {
			return sign // under 2⁻²⁵: rounds to zero
		}
		m := mant | 0x800000 // the implicit bit; a float32 subnormal has e < -10
		shift := uint32(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && h&1 == 1 {
			h++ // a carry into bit 10 is the smallest normal: still right
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // a carry into the exponent is right too, up to infinity
	}
	return sign | uint16(h)
}

// Float16ToFloat32 converts IEEE 754 binary16 bits to a float32, exactly.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalize
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32Bytes encodes values as the data of an F32 tensor.
func F32Bytes(values []float32) []byte {
	b := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// F16Bytes encodes values as the data of an F16 tensor, each rounded by
// Float32ToFloat16.
func F16Bytes(values []float32) []byte {
	b := make([]byte, 2*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint16(b[2*i:], Float32ToFloat16(v))
	}
	return b
}

// Floats decodes the data of an F32 or F16 tensor into float32 values.
func Floats(t GGMLType, data []byte) ([]float32, error) {
	switch {
	case t == TypeF32 && len(data)%4 == 0:
		out := make([]float32, len(data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return out, nil
	case t == TypeF16 && len(data)%2 == 0:
		out := make([]float32, len(data)/2)
		for i := range out {
			out[i] = Float16ToFloat32(binary.LittleEndian.Uint16(data[2*i:]))
		}
		return out, nil
	case t == TypeF32 || t == TypeF16:
		return nil, fmt.Errorf("gguf: %d bytes are not whole %v values", len(data), t)
	}
	return nil, fmt.Errorf("gguf: cannot decode %v data as floats", t)
}
