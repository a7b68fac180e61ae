package appnode

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The platform keeps a way in for its admins (docs/security.md, "The last
// way in"): a request that would leave no platform admin with a password
// or a full personal access token (unexpired, bound to no team, of no
// scope: the only kind that holds the platform's permissions) is refused,
// 409. Browser sessions do not count: they end within sessionLife and
// mint nothing once the tokens behind them are gone. The check reads the
// store before the change, so two admins removing their last two
// credentials at the same instant may both pass; `cosmicac admin token`
// on the host is the way back in from that, or from every token expiring.

// losing is what a request would take away: a token, or a user's
// platform-admin rights (a user deleted or demoted).
type losing struct {
	token string // a token's ID
	user  string // a user's name
}

// fullToken reports whether t holds its user's platform permissions at now.
func fullToken(t store.Token, now time.Time) bool {
	return t.Kind == store.KindToken && t.Team == "" && t.Scope == "" && len(t.Selector) == 0 &&
		(t.ExpiresAt.IsZero() || now.Before(t.ExpiresAt))
}

// adminWayIn reports whether some platform admin keeps a password or a
// full token once l is gone.
func (s *Server) adminWayIn(ctx context.Context, l losing) (bool, error) {
	users, err := s.acc.ListUsers(ctx)
	if err != nil {
		return false, fmt.Errorf("list users: %w", err)
	}
	now := s.now()
	for _, u := range users {
		if !u.PlatformAdmin || u.Name == l.user {
			continue
		}
		if u.HasPassword {
			return true, nil
		}
		toks, err := s.acc.ListTokens(ctx, u.Name, store.KindToken)
		if err != nil {
			return false, fmt.Errorf("list tokens of %s: %w", u.Name, err)
		}
		for _, t := range toks {
			if t.ID != l.token && fullToken(t, now) {
				return true, nil
			}
		}
	}
	return false, nil
}

// keepAdminWayIn refuses (409) what l would take away when it leaves no
// platform admin a way in; what names it says it, for the message.
func (s *Server) keepAdminWayIn(ctx context.Context, l losing, what string) error {
	ok, err := s.adminWayIn(ctx, l)
	if err != nil || ok {
		return err
	}
	return errorf(http.StatusConflict, apiv1.CodeConflict,
		"%s would leave no platform admin a way to sign in (a password or a full access token): "+
			"set a password first (cosmicac users passwd), or create another token, or make another platform admin with one; "+
			"an operator on the host can always mint one with cosmicac admin token", what)
}

// userLosesAdmin refuses deleting or demoting u when that leaves no
// platform admin a way in.
func (s *Server) userLosesAdmin(ctx context.Context, u cosmic.User, what string) error {
	if !u.PlatformAdmin {
		return nil
	}
	return s.keepAdminWayIn(ctx, losing{user: u.Name}, what)
}

// AuditAdminToken is the audit log's action for a token minted on the
// host (MintAdminToken).
const AuditAdminToken = "admin.token"

// MintAdminToken is the operator's way back in (`cosmicac admin token`):
// it stores a full personal access token of the platform admin user ("":
// the bootstrap admin if a platform admin, else the first platform admin
// by name), living life from now, straight in the accounts store of a
// host the operator can reach, and records it in the audit log. A user
// who is not a platform admin, or does not exist, is ErrInvalid.
func MintAdminToken(ctx context.Context, acc Accounts, user, name string, life time.Duration, now time.Time) (apiv1.CreatedToken, error) {
	users, err := acc.ListUsers(ctx)
	if err != nil {
		return apiv1.CreatedToken{}, fmt.Errorf("list users: %w", err)
	}
	var admins []string
	for _, u := range users {
		if u.PlatformAdmin {
			admins = append(admins, u.Name)
		}
	}
	switch {
	case len(admins) == 0:
		return apiv1.CreatedToken{}, fmt.Errorf("no platform admin in this database (is it the app-node's?): %w", cosmic.ErrInvalid)
	case user == "" && slices.Contains(admins, BootstrapUser):
		user = BootstrapUser
	case user == "":
		user = admins[0]
	case !slices.Contains(admins, user):
		return apiv1.CreatedToken{}, fmt.Errorf("%s is not a platform admin here; the platform admins are %s: %w", user, strings.Join(admins, ", "), cosmic.ErrInvalid)
	}
	secret, hash, err := NewToken()
	if err != nil {
		return apiv1.CreatedToken{}, err
	}
	id, err := NewTokenID()
	if err != nil {
		return apiv1.CreatedToken{}, err
	}
	now = now.UTC()
	t := store.Token{ID: id, Kind: store.KindToken, Name: name, UserName: user, Hash: hash, CreatedAt: now, ExpiresAt: now.Add(life)}
	if err := acc.CreateToken(ctx, t); err != nil {
		return apiv1.CreatedToken{}, fmt.Errorf("store token: %w", err)
	}
	if err := acc.AppendAudit(ctx, store.AuditRecord{At: now, User: user, Action: AuditAdminToken, Target: id, Remote: "host",
		Status: http.StatusCreated, Detail: "minted on the host with cosmicac admin token"}); err != nil {
		return apiv1.CreatedToken{}, fmt.Errorf("record in the audit log: %w", err)
	}
	return apiv1.CreatedToken{Token: tokenOut(t), Secret: secret}, nil
}
