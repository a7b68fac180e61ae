package wav

import (
	"math"
	"testing"
)

func TestToneAndDuration(t *testing.T) {
	for _, secs := range []float64{0, 0.5, 2} {
		d, err := Duration(Tone(secs, 16000))
		if err != nil || math.Abs(d-secs) > 1e-9 {
			t.Errorf("Duration(Tone(%v)) = %v, %v", secs, d, err)
		}
	}
	for name, b := range map[string][]byte{"empty": nil, "not riff": []byte("RIFX....WAVE"), "no data": Tone(1, 8000)[:36]} {
		if _, err := Duration(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
