// Package seal keeps secrets that the platform must use again, not only
// recognise, encrypted at rest: a datastore's secret key is stored sealed
// with a key the app-nodes hold in a file, so that a copy of the database
// (a backup, a `cosmicac db copy`, a read of PostgreSQL's disk) gives the
// sealed bytes and nothing else.
//
// A sealed value is AES-256-GCM (the standard library's crypto/cipher):
// one version byte, a random 12-byte nonce, the ciphertext and its tag.
// Each value is sealed with associated data naming what it is (for a
// datastore: its team and alias), so a sealed value copied onto another
// row does not open there. Kubernetes seals Secrets the same way with its
// aescbc/aesgcm EncryptionConfiguration, and like its key file this one
// is given to every app-node of a platform (docs/security.md,
// "Secrets at rest").
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// version is the first byte of a sealed value: AES-256-GCM, 12-byte nonce.
const version = 1

// keyLen is the key's length in bytes (AES-256).
const keyLen = 32

// ErrOpen is Open's error for a value that is not one this key sealed with
// this associated data (another key, another row, changed bytes).
var ErrOpen = errors.New("seal: the value does not open with this key")

// Key seals and opens values.
type Key struct {
	aead cipher.AEAD
}

// New is a Key of raw, 32 bytes.
func New(raw []byte) (*Key, error) {
	if len(raw) != keyLen {
		return nil, fmt.Errorf("seal: a key is %d bytes, not %d", keyLen, len(raw))
	}
	b, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &Key{aead: aead}, nil
}

// Load reads the key in the file at path: 32 bytes in standard base64 on
// one line. A file others may read (any permission bit for group or
// others) is refused, as ssh refuses such a private key.
func Load(path string) (*Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("seal key %s: mode %v lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("seal key %s: not base64: %w", path, err)
	}
	k, err := New(raw)
	if err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreate loads the key at path, or, when there is no file there,
// makes a random one and writes it (mode 0600, its directory made 0700).
// It answers whether it made the key.
func LoadOrCreate(path string) (*Key, bool, error) {
	k, err := Load(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	raw := make([]byte, keyLen)
	rand.Read(raw)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("seal key: %w", err)
	}
	// Written whole to a file of its own, then linked into place: link
	// fails if the name exists, so of two processes making it at once one
	// puts its key there and the other reads that one, never a half.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".seal-key-*")
	if err != nil {
		return nil, false, fmt.Errorf("seal key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(base64.StdEncoding.EncodeToString(raw) + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		k, err := Load(path)
		return k, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("seal key: %w", err)
	}
	k, err = New(raw)
	return k, true, err
}

// Seal encrypts plaintext, bound to ad (what it is and whose: another ad
// does not open it).
func (k *Key) Seal(plaintext, ad []byte) []byte {
	out := make([]byte, 1+k.aead.NonceSize(), 1+k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	out[0] = version
	rand.Read(out[1:])
	return k.aead.Seal(out, out[1:], plaintext, ad)
}

// Open decrypts what Seal sealed with the same key and ad, or answers
// ErrOpen.
func (k *Key) Open(sealed, ad []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < 1+n+k.aead.Overhead() || sealed[0] != version {
		return nil, ErrOpen
	}
	out, err := k.aead.Open(nil, sealed[1:1+n], sealed[1+n:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}
