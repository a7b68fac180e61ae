// Package wav reads and writes the small PCM WAV files of the speech path:
// the inference agent's readiness probe of a Parakeet runtime sends one,
// the simulated runtime reads their length. Standard library only.
//
// Any package may import wav.
package wav

import (
	"errors"
	"math"
)

// Duration returns the length in seconds of a RIFF/WAVE file's PCM data.
func Duration(b []byte) (float64, error) {
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return 0, errors.New("not a RIFF/WAVE file")
	}
	var byteRate uint32
	for p := 12; p+8 <= len(b); {
		id := string(b[p : p+4])
		size := int(le32(b[p+4:]))
		body := p + 8
		switch id {
		case "fmt ":
			if size < 16 || body+16 > len(b) {
				return 0, errors.New("short fmt chunk")
			}
			byteRate = le32(b[body+8:])
		case "data":
			if byteRate == 0 {
				return 0, errors.New("data chunk before fmt chunk")
			}
			if body+size > len(b) {
				size = len(b) - body
			}
			return float64(size) / float64(byteRate), nil
		}
		p = body + size + size%2
	}
	return 0, errors.New("no data chunk")
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Tone returns a mono 16-bit PCM WAV file of the given length: a quiet tone,
// for probes and tests.
func Tone(seconds float64, rate int) []byte {
	n := int(seconds * float64(rate))
	data := make([]byte, 44+2*n)
	copy(data, "RIFF")
	put32(data[4:], uint32(36+2*n))
	copy(data[8:], "WAVEfmt ")
	put32(data[16:], 16)
	data[20], data[22] = 1, 1 // PCM, mono
	put32(data[24:], uint32(rate))
	put32(data[28:], uint32(2*rate))
	data[32], data[34] = 2, 16
	copy(data[36:], "data")
	put32(data[40:], uint32(2*n))
	for i := 0; i < n; i++ {
		v := int16(2000 * math.Sin(2*math.Pi*440*float64(i)/float64(rate)))
		data[44+2*i], data[45+2*i] = byte(v), byte(uint16(v)>>8)
	}
	return data
}

func put32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
