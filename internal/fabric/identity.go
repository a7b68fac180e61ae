package fabric

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// IdentityFile is the name of a component's key file inside its data directory.
const IdentityFile = "identity.key"

// PublicKey is a peer's ed25519 public key: its address on the fabric.
type PublicKey [ed25519.PublicKeySize]byte

// ParsePublicKey parses the 64-hex-character form of a key.
func ParsePublicKey(s string) (PublicKey, error) {
	var k PublicKey
	if len(s) != 2*len(k) {
		return k, fmt.Errorf("public key must be %d hex characters, got %d", 2*len(k), len(s))
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, fmt.Errorf("public key is not hex: %w", err)
	}
	return k, nil
}

// String returns the key as 64 lowercase hex characters.
func (k PublicKey) String() string { return hex.EncodeToString(k[:]) }

// Short returns the first 8 hex characters, for logs.
func (k PublicKey) Short() string { return hex.EncodeToString(k[:4]) }

// IsZero reports whether k is the zero key.
func (k PublicKey) IsZero() bool { return k == PublicKey{} }

// MarshalText encodes the key as hex.
func (k PublicKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes a hex key.
func (k *PublicKey) UnmarshalText(b []byte) error {
	p, err := ParsePublicKey(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// Identity is a component's key pair.
type Identity struct {
	priv ed25519.PrivateKey
	pub  PublicKey
}

// GenerateIdentity makes a new random key pair.
func GenerateIdentity() (*Identity, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return identityFromPrivate(priv), nil
}

// IdentityFromSeed builds the key pair for a 32-byte ed25519 seed.
func IdentityFromSeed(seed []byte) (*Identity, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("seed must be %d bytes", ed25519.SeedSize)
	}
	return identityFromPrivate(ed25519.NewKeyFromSeed(seed)), nil
}

func identityFromPrivate(priv ed25519.PrivateKey) *Identity {
	id := &Identity{priv: priv}
	copy(id.pub[:], priv.Public().(ed25519.PublicKey))
	return id
}

// PublicKey returns the identity's public key.
func (id *Identity) PublicKey() PublicKey { return id.pub }

// Seed returns the 32-byte private seed. Handle with care.
func (id *Identity) Seed() []byte { return id.priv.Seed() }

// MarshalPEM encodes the private key as a PKCS#8 PEM block (the format
// `openssl pkey` reads).
func (id *Identity) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(id.priv)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseIdentityPEM decodes a PKCS#8 PEM ed25519 private key.
func ParseIdentityPEM(b []byte) (*Identity, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is %T, want ed25519", k)
	}
	return identityFromPrivate(priv), nil
}

// WriteIdentityFile writes id to path with mode 0600, refusing to overwrite.
func WriteIdentityFile(path string, id *Identity) error {
	b, err := id.MarshalPEM()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create key directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create key file: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync key file: %w", err)
	}
	return f.Close()
}

// ReadIdentityFile reads a key file. Like ssh, it refuses a file that group
// or others may read.
func ReadIdentityFile(path string) (*Identity, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key file %s has mode %#o; it must not be accessible by group or others (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	id, err := ParseIdentityPEM(b)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return id, nil
}

// LoadOrCreateIdentity returns the identity kept in dataDir, creating it (mode
// 0600) on first use.
func LoadOrCreateIdentity(dataDir string) (*Identity, error) {
	path := filepath.Join(dataDir, IdentityFile)
	id, err := ReadIdentityFile(path)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if id, err = GenerateIdentity(); err != nil {
		return nil, err
	}
	if err := WriteIdentityFile(path, id); err != nil {
		if errors.Is(err, fs.ErrExist) { // lost a race with another process
			return ReadIdentityFile(path)
		}
		return nil, err
	}
	return id, nil
}
