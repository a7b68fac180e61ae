package agent

import (
	"net/http"
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

// TestParseVolumesAndDataProxy: the bootstrap's volumes go to their mount
// paths, and its data proxy carries every datastore request, loopback
// endpoints included; a mount path that is not clean and absolute, or a
// proxy that is not http://HOST:PORT, is refused, named.
func TestParseVolumesAndDataProxy(t *testing.T) {
	id := mustID(t)
	pem, _ := id.MarshalPEM()
	base := FileConfig{FileBootstrap: FileBootstrap{JobID: "j", Identity: &FileIdentity{PrivateKeyPEM: string(pem), PublicKey: id.PublicKey().String()}}}
	fc := base
	fc.Volumes = []FileVolume{{Index: 1, MountPath: "/data", Push: true}}
	fc.DataProxy = "http://10.0.2.100:7100"
	cfg, err := fc.Parse()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Volumes) != 1 || cfg.Volumes[0].Dir != "/data" || !cfg.Volumes[0].Push || cfg.DataClient == nil {
		t.Fatalf("config %+v", cfg)
	}
	req, _ := http.NewRequest("GET", "http://127.0.0.1:9000/bucket/key", nil)
	if u, err := cfg.DataClient.Transport.(*http.Transport).Proxy(req); err != nil || u == nil || u.Host != "10.0.2.100:7100" {
		t.Errorf("a loopback endpoint's request goes through %v, %v; want the data proxy", u, err)
	}
	for _, bad := range []FileConfig{
		func() FileConfig { c := base; c.Volumes = []FileVolume{{MountPath: "/a/../etc"}}; return c }(),
		func() FileConfig { c := base; c.Volumes = []FileVolume{{MountPath: "data"}}; return c }(),
		func() FileConfig { c := base; c.Volumes = []FileVolume{{MountPath: "/"}}; return c }(),
		func() FileConfig { c := base; c.DataProxy = "socks5://10.0.2.100:7100"; return c }(),
	} {
		if _, err := bad.Parse(); err == nil {
			t.Errorf("Parse(%+v) accepted it", bad)
		}
	}
}
