package cosmic

import (
	"encoding/json"
	"testing"
)

func FuzzSpec(f *testing.F) {
	for _, s := range []Spec{containerSpec(), inferenceSpec()} {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	for _, s := range []string{`{}`, `{"region":"us","location":"eu"}`, `{"type":"managed-inference","inference":{}}`,
		`{"sshPublicKeys":["ssh-rsa AAAA/w=="]}`, `{"inference":{"args":{"dtype":"x"}}}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var lenient Spec
		_ = json.Unmarshal(data, &lenient)
		s, err := ParseSpec(data)
		if err != nil {
			return
		}
		s.Default()
		err = s.Validate()
		for _, fe := range FieldErrors(err) {
			if fe.Field == "" || fe.Message == "" {
				t.Errorf("empty field error %+v", fe)
			}
		}
		_ = s.TotalGPUs()
		if err == nil {
			// A valid spec survives a round trip and stays valid.
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseSpec(b)
			if err != nil {
				t.Fatalf("ParseSpec(Marshal(valid)) = %v", err)
			}
			if err := back.Validate(); err != nil {
				t.Fatalf("round-tripped valid spec invalid: %v", err)
			}
		}
	})
}
