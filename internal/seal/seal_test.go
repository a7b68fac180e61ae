package seal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestSealOpen: a value opens with its key and associated data, and with
// nothing else: another key, another ad, a changed byte, a cut value.
func TestSealOpen(t *testing.T) {
	k, _, err := LoadOrCreate(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := LoadOrCreate(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	secret, ad := []byte("wJalrXUtnFEMI/K7MDENG"), []byte("datastore\x00ml\x00s3-main")
	s1, s2 := k.Seal(secret, ad), k.Seal(secret, ad)
	if bytes.Equal(s1, s2) {
		t.Error("two seals of one value are equal: the nonce is not fresh")
	}
	if bytes.Contains(s1, secret) {
		t.Fatal("the sealed value holds the secret")
	}
	got, err := k.Open(s1, ad)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q, %v", got, err)
	}
	flipped := bytes.Clone(s1)
	flipped[len(flipped)-1] ^= 1
	for name, try := range map[string]func() ([]byte, error){
		"another key":   func() ([]byte, error) { return other.Open(s1, ad) },
		"another ad":    func() ([]byte, error) { return k.Open(s1, []byte("datastore\x00other\x00s3-main")) },
		"a changed tag": func() ([]byte, error) { return k.Open(flipped, ad) },
		"cut":           func() ([]byte, error) { return k.Open(s1[:10], ad) },
		"empty":         func() ([]byte, error) { return k.Open(nil, ad) },
		"no version":    func() ([]byte, error) { return k.Open(append([]byte{0}, s1[1:]...), ad) },
	} {
		if got, err := try(); !errors.Is(err, ErrOpen) || got != nil {
			t.Errorf("%s: %q, %v; want ErrOpen", name, got, err)
		}
	}
}

// TestKeyFile: LoadOrCreate makes a 0600 key once and loads the same key
// after; a key file others may read, or one that is not a 32-byte base64
// key, is refused; processes making it at once get one key.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets", "seal.key")
	k1, made, err := LoadOrCreate(path)
	if err != nil || !made {
		t.Fatalf("first: made %v, %v", made, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode().Perm(), err)
	}
	k2, made, err := LoadOrCreate(path)
	if err != nil || made {
		t.Fatalf("second: made %v, %v", made, err)
	}
	ad := []byte("x")
	if _, err := k2.Open(k1.Seal([]byte("v"), ad), ad); err != nil {
		t.Fatalf("the key loaded is not the key made: %v", err)
	}
	os.Chmod(path, 0o640)
	if _, err := Load(path); err == nil {
		t.Error("a key file the group may read was loaded")
	}
	for name, content := range map[string]string{"not base64": "!!!\n", "short": "AAAA\n"} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := Load(p); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}

	race := filepath.Join(dir, "race.key")
	keys := make([]*Key, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, _, err := LoadOrCreate(race)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	sealed := keys[0].Seal([]byte("v"), ad)
	for i, k := range keys {
		if k == nil {
			continue
		}
		if _, err := k.Open(sealed, ad); err != nil {
			t.Errorf("process %d made a key of its own", i)
		}
	}
}
