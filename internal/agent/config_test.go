package agent

import (
	"slices"
	"strings"
	"testing"
)

func TestConfigErrors(t *testing.T) {
	_, err := FileConfig{FileBootstrap: FileBootstrap{Peers: []FilePeer{{Key: "nope"}}}, Env: []string{"X"}}.Parse()
	for _, want := range []string{"jobId", "identity", "peers[0].key", `env "X"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	id, other := mustID(t), mustID(t)
	pem, _ := id.MarshalPEM()
	_, err = FileConfig{FileBootstrap: FileBootstrap{JobID: "j", Identity: &FileIdentity{PrivateKeyPEM: string(pem), PublicKey: other.PublicKey().String()}}}.Parse()
	if err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched identity: %v", err)
	}
}

func TestParseEnv(t *testing.T) {
	got, err := ParseEnv([]byte("# c\nA='x y'\n\nB=plain\nC='it'\\''s'\nD='two\nlines'\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=x y", "B=plain", "C=it's", "D=two\nlines"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	for _, bad := range []string{"A='open\n", "=x\n", "A=$HOME\n"} {
		if _, err := ParseEnv([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
