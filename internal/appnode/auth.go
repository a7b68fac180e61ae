package appnode

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Accounts is what the app-node needs of the accounts store (implemented
// by internal/store).
type Accounts interface {
	CreateTeam(ctx context.Context, t cosmic.Team) error // cosmic.ErrConflict if it exists
	ListTeams(ctx context.Context) ([]cosmic.Team, error)
	CreateUser(ctx context.Context, u cosmic.User) error
	GetUser(ctx context.Context, name string) (cosmic.User, error) // cosmic.ErrNotFound
	ListUsers(ctx context.Context) ([]cosmic.User, error)
	CreateToken(ctx context.Context, t store.Token) error
	UserByTokenHash(ctx context.Context, hash []byte) (cosmic.User, store.Token, error) // cosmic.ErrNotFound
	DeleteToken(ctx context.Context, id string) error
}

// Token shape: TokenPrefix then the base64url (unpadded) encoding of
// tokenBytes random bytes.
const (
	TokenPrefix = "cac_"
	tokenBytes  = 32
	tokenLen    = len(TokenPrefix) + (tokenBytes*8+5)/6
)

// NewToken returns a fresh API token secret and the hash to store.
func NewToken() (secret string, hash []byte, err error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("read random: %w", err)
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, HashToken(secret), nil
}

// HashToken is the hash under which a token secret is stored: sha256 of
// the whole secret, prefix included.
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// NewTokenID returns a random token ID ("tok_" and 16 hex digits); the ID
// names a token (to list or delete it) and is no secret.
func NewTokenID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	return "tok_" + hex.EncodeToString(b), nil
}

// wellFormed reports whether s is shaped like a token, so that garbage
// never reaches the store.
func wellFormed(s string) bool {
	if len(s) != tokenLen || !strings.HasPrefix(s, TokenPrefix) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s[len(TokenPrefix):])
	return err == nil
}

// caller is the authenticated user of a request.
type caller struct {
	user  cosmic.User
	token string // token ID
}

func (c *caller) admin() bool { return c.user.Role == cosmic.RoleAdmin }

var errUnauthorized = errorf(http.StatusUnauthorized, apiv1.CodeUnauthorized,
	"missing or invalid token: send Authorization: Bearer TOKEN")

// authenticate finds the caller of r and checks that the caller's role
// allows access.
func (s *Server) authenticate(r *http.Request, access apiv1.Access) (*caller, error) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, errUnauthorized
	}
	secret = strings.TrimSpace(secret)
	if !wellFormed(secret) {
		return nil, errUnauthorized
	}
	hash := HashToken(secret)
	u, tok, err := s.acc.UserByTokenHash(r.Context(), hash)
	switch {
	case errors.Is(err, cosmic.ErrNotFound):
		return nil, errUnauthorized
	case err != nil:
		return nil, fmt.Errorf("look up token: %w", err)
	case subtle.ConstantTimeCompare(tok.Hash, hash) != 1,
		!tok.ExpiresAt.IsZero() && !s.now().Before(tok.ExpiresAt):
		return nil, errUnauthorized
	}
	c := &caller{user: u, token: tok.ID}
	switch {
	case access == apiv1.Write && !u.Role.CanWrite():
		return nil, errorf(http.StatusForbidden, apiv1.CodeForbidden, "role %s may not change anything", u.Role)
	case access == apiv1.Admin && !c.admin():
		return nil, errorf(http.StatusForbidden, apiv1.CodeForbidden, "only admins may do this")
	}
	return c, nil
}

// Bootstrap names.
const (
	AdminTokenFile = "admin.token"
	BootstrapTeam  = "default"
	BootstrapUser  = "admin"
	bootstrapToken = "bootstrap-admin" // the token's ID
)

// Bootstrap makes the first admin on first start: when no user exists it
// creates team "default", user "admin" (role admin) and a token, and writes
// the token to dataDir/admin.token (mode 0600; dataDir is created 0700).
// It returns that file's path and whether it wrote it now; when users exist
// it does nothing and created is false.
//
// The token is first written to admin.token.new, then stored, then the
// file is renamed: a bootstrap interrupted half-way finishes on the next
// start from the .new file, so the admin is never left without a token.
func Bootstrap(ctx context.Context, acc Accounts, dataDir string) (path string, created bool, err error) {
	path = filepath.Join(dataDir, AdminTokenFile)
	pending := path + ".new"
	secret := ""
	switch b, err := os.ReadFile(pending); {
	case err == nil && wellFormed(strings.TrimSpace(string(b))):
		secret = strings.TrimSpace(string(b))
	case err == nil || errors.Is(err, os.ErrNotExist):
		users, err := acc.ListUsers(ctx)
		if err != nil {
			return path, false, fmt.Errorf("bootstrap: list users: %w", err)
		}
		if len(users) > 0 {
			return path, false, nil
		}
		if secret, _, err = NewToken(); err != nil {
			return path, false, fmt.Errorf("bootstrap: %w", err)
		}
		if err := writeSecret(dataDir, pending, secret); err != nil {
			return path, false, fmt.Errorf("bootstrap: %w", err)
		}
	default:
		return path, false, fmt.Errorf("bootstrap: %w", err)
	}
	now := time.Now().UTC()
	if err := acc.CreateTeam(ctx, cosmic.Team{Name: BootstrapTeam}); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		return path, false, fmt.Errorf("bootstrap: create team: %w", err)
	}
	if err := acc.CreateUser(ctx, cosmic.User{Name: BootstrapUser, Team: BootstrapTeam, Role: cosmic.RoleAdmin}); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		return path, false, fmt.Errorf("bootstrap: create user: %w", err)
	}
	tok := store.Token{ID: bootstrapToken, Name: "bootstrap admin token", UserName: BootstrapUser, Hash: HashToken(secret), CreatedAt: now}
	if err := acc.CreateToken(ctx, tok); err != nil && !errors.Is(err, cosmic.ErrConflict) {
		return path, false, fmt.Errorf("bootstrap: create token: %w", err)
	}
	if err := os.Rename(pending, path); err != nil {
		return path, false, fmt.Errorf("bootstrap: %w", err)
	}
	return path, true, nil
}

func writeSecret(dir, name, secret string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	err = f.Chmod(0o600) // a leftover file keeps its mode otherwise
	if err == nil {
		_, err = f.WriteString(secret + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write token file %s: %w", name, err)
	}
	return nil
}
