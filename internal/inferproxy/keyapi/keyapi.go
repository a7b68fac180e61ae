// Package keyapi is the contract of the inference API keys between their
// keeper, the app-node, and their user, proxy-inference: a key's format
// (its secret, prefix and stored hash) and the app-node's fabric method
// that resolves a key by the hash of its secret (ByHash), with its params
// and reply. The app-node serves it (appnode.ServeKeyLookup).
//
// Importers: internal/appnode (makes keys, serves ByHash),
// internal/inferproxy (resolves them), internal/trust (the method's name in
// the graph). It imports the fabric only.
package keyapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// KeyPrefix starts every API key secret.
const KeyPrefix = "sk-cac-"

// NewSecret makes a key's secret: KeyPrefix and 32 random bytes.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// SecretPrefix is the start of a secret that a list shows.
func SecretPrefix(secret string) string { return secret[:len(KeyPrefix)+4] }

// HashKey is the hash under which a key's secret is stored (sha256).
func HashKey(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// ByHash is the app-node's fabric call (read-only; the trust graph lets
// only proxy-inference and operators call it) that finds an inference API
// key by the hash of its secret: how a standalone proxy-inference checks
// keys without opening the accounts database.
var ByHash = fabric.Method[ByHashParams, ByHashReply]{Name: "inference.apiKeyByHash"}

// ByHashParams asks for the key whose secret hashes to Hash (sha256, 32
// bytes; base64 in JSON).
type ByHashParams struct {
	Hash []byte `json:"hash"`
}

// ByHashReply is the key, without its hashes; Found false when no key has
// that hash (an unknown or revoked key). An answer, not an error, so that
// a peer without the method (not_found) is never taken for "no such key".
// Previous says the hash is the key's previous secret, which works until
// PreviousExpiresAt; the proxy checks the times at each use.
type ByHashReply struct {
	Found             bool      `json:"found"`
	ID                string    `json:"id,omitempty"`
	Name              string    `json:"name,omitempty"`
	Team              string    `json:"team,omitempty"`
	CreatedBy         string    `json:"createdBy,omitempty"`
	Prefix            string    `json:"prefix,omitempty"`
	CreatedAt         time.Time `json:"createdAt,omitzero"`
	Models            []string  `json:"models,omitempty"`
	ExpiresAt         time.Time `json:"expiresAt,omitzero"`
	Previous          bool      `json:"previous,omitempty"`
	PreviousExpiresAt time.Time `json:"previousExpiresAt,omitzero"`
	TokensPerMinute   int64     `json:"tokensPerMinute,omitempty"`
}
