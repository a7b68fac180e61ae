package appnode

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Passwords are hashed with argon2id (RFC 9106) and stored as PHC strings,
// parameters included, so that stronger parameters apply to new hashes
// without breaking the old ones:
//
//	$argon2id$v=19$m=19456,t=2,p=1$SALT$HASH
//
// The parameters are OWASP's first recommendation for argon2id (19 MiB,
// two passes, one lane).
type argonParams struct {
	memory  uint32 // KiB
	time    uint32
	threads uint8
	keyLen  uint32
}

var defaultArgon = argonParams{memory: 19 * 1024, time: 2, threads: 1, keyLen: 32}

// Password length bounds, in characters (NIST SP 800-63B: at least 8, and
// long passphrases allowed; the upper bound keeps hashing cheap to ask for).
const (
	MinPasswordLen = 8
	MaxPasswordLen = 256
)

// checkPassword says what is wrong with a new password, or nil.
func checkPassword(pw string) error {
	switch n := utf8.RuneCountInString(pw); {
	case !utf8.ValidString(pw):
		return errors.New("is not valid UTF-8")
	case n < MinPasswordLen:
		return fmt.Errorf("must have at least %d characters", MinPasswordLen)
	case n > MaxPasswordLen:
		return fmt.Errorf("must have at most %d characters", MaxPasswordLen)
	}
	return nil
}

// HashPassword returns the PHC string of pw under fresh salt.
func HashPassword(pw string) (string, error) {
	return hashPassword(pw, defaultArgon)
}

func hashPassword(pw string, p argonParams) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	key := argon2.IDKey([]byte(pw), salt, p.time, p.memory, p.threads, p.keyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.memory, p.time, p.threads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// Bounds on the parameters a stored hash may ask for, so that a corrupt
// row cannot make a sign-in allocate gigabytes.
const (
	maxArgonMemory = 1 << 20 // KiB: 1 GiB
	maxArgonTime   = 16
)

// parsePHC reads a PHC string of argon2id.
func parsePHC(s string) (p argonParams, salt, key []byte, err error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, errors.New("not an argon2id PHC string")
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return p, nil, nil, fmt.Errorf("argon2 version %q", parts[2])
	}
	var threads uint32
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &threads); err != nil {
		return p, nil, nil, fmt.Errorf("argon2 parameters %q", parts[3])
	}
	if p.memory == 0 || p.memory > maxArgonMemory || p.time == 0 || p.time > maxArgonTime || threads == 0 || threads > 255 {
		return p, nil, nil, fmt.Errorf("argon2 parameters out of bounds: %q", parts[3])
	}
	p.threads = uint8(threads)
	b64 := base64.RawStdEncoding
	if salt, err = b64.DecodeString(parts[4]); err != nil || len(salt) < 8 {
		return p, nil, nil, errors.New("argon2 salt")
	}
	if key, err = b64.DecodeString(parts[5]); err != nil || len(key) < 16 || len(key) > 64 {
		return p, nil, nil, errors.New("argon2 key")
	}
	p.keyLen = uint32(len(key))
	return p, salt, key, nil
}

// dummySalt is hashed with when the user does not exist or has no
// password, so that a sign-in takes as long either way and does not tell
// which names exist. Only the work matters, so no hash is computed ahead:
// the binary's start (every CLI command) pays nothing for it.
var dummySalt = make([]byte, 16)

// VerifyPassword reports whether pw matches the PHC string phc, in
// constant time over the hash. An empty or malformed phc matches nothing
// (and still costs one hash).
func VerifyPassword(phc, pw string) bool {
	p, salt, key, err := parsePHC(phc)
	if err != nil {
		p := defaultArgon
		argon2.IDKey([]byte(pw), dummySalt, p.time, p.memory, p.threads, p.keyLen)
		return false
	}
	got := argon2.IDKey([]byte(pw), salt, p.time, p.memory, p.threads, p.keyLen)
	return subtle.ConstantTimeCompare(got, key) == 1
}
