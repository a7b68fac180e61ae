package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// WithTeam makes every request act in team (apiv1.HeaderTeam): where jobs
// are created and what lists show. "" leaves the choice to the API.
func WithTeam(team string) Option { return func(c *Client) { c.team = team } }

// Login signs in with a password and returns a personal access token.
func (c *Client) Login(ctx context.Context, in apiv1.Login) (apiv1.CreatedToken, error) {
	var out apiv1.CreatedToken
	err := c.do(ctx, http.MethodPost, "/login", nil, in, &out)
	return out, err
}

// Logout revokes the token (or ends the session) the client carries.
func (c *Client) Logout(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/session", nil, nil, nil)
}

// ChangePassword changes the caller's own password.
func (c *Client) ChangePassword(ctx context.Context, current, next string) error {
	return c.do(ctx, http.MethodPut, "/whoami/password", nil, apiv1.ChangePassword{CurrentPassword: current, Password: next}, nil)
}

// ListUsers lists the users (platform admins).
func (c *Client) ListUsers(ctx context.Context) ([]apiv1.UserInfo, error) {
	var out apiv1.UserList
	err := c.do(ctx, http.MethodGet, "/users", nil, nil, &out)
	return out.Items, err
}

// CreateUser makes a user (platform admins).
func (c *Client) CreateUser(ctx context.Context, in apiv1.CreateUser) (apiv1.UserInfo, error) {
	var out apiv1.UserInfo
	err := c.do(ctx, http.MethodPost, "/users", nil, in, &out)
	return out, err
}

// GetUser returns a user and their teams (platform admins).
func (c *Client) GetUser(ctx context.Context, name string) (apiv1.UserInfo, error) {
	var out apiv1.UserInfo
	err := c.do(ctx, http.MethodGet, "/users/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// UpdateUser changes a user (platform admins).
func (c *Client) UpdateUser(ctx context.Context, name string, in apiv1.UpdateUser) (apiv1.UserInfo, error) {
	var out apiv1.UserInfo
	err := c.do(ctx, http.MethodPatch, "/users/"+url.PathEscape(name), nil, in, &out)
	return out, err
}

// DeleteUser deletes a user (platform admins).
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/users/"+url.PathEscape(name), nil, nil, nil)
}

// SetPassword sets a user's password (platform admins).
func (c *Client) SetPassword(ctx context.Context, name, password string) error {
	return c.do(ctx, http.MethodPut, "/users/"+url.PathEscape(name)+"/password", nil, apiv1.SetPassword{Password: password}, nil)
}

// ListTeams lists the caller's teams (platform admins: every team).
func (c *Client) ListTeams(ctx context.Context) ([]apiv1.TeamInfo, error) {
	var out apiv1.TeamList
	err := c.do(ctx, http.MethodGet, "/teams", nil, nil, &out)
	return out.Items, err
}

// CreateTeam makes a team (platform admins).
func (c *Client) CreateTeam(ctx context.Context, in apiv1.CreateTeam) (apiv1.TeamInfo, error) {
	var out apiv1.TeamInfo
	err := c.do(ctx, http.MethodPost, "/teams", nil, in, &out)
	return out, err
}

// DeleteTeam deletes a team that has no jobs.
func (c *Client) DeleteTeam(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/teams/"+url.PathEscape(name), nil, nil, nil)
}

// ListMembers lists a team's members.
func (c *Client) ListMembers(ctx context.Context, team string) ([]cosmic.Member, error) {
	var out apiv1.MemberList
	err := c.do(ctx, http.MethodGet, "/teams/"+url.PathEscape(team)+"/members", nil, nil, &out)
	return out.Items, err
}

// PutMember adds a member to a team, or changes their role.
func (c *Client) PutMember(ctx context.Context, team, user string, role cosmic.Role) (cosmic.Member, error) {
	var out cosmic.Member
	err := c.do(ctx, http.MethodPut, "/teams/"+url.PathEscape(team)+"/members/"+url.PathEscape(user), nil, apiv1.PutMember{Role: role}, &out)
	return out, err
}

// DeleteMember removes a member from a team.
func (c *Client) DeleteMember(ctx context.Context, team, user string) error {
	return c.do(ctx, http.MethodDelete, "/teams/"+url.PathEscape(team)+"/members/"+url.PathEscape(user), nil, nil, nil)
}

// ListTokens lists the caller's personal access tokens.
func (c *Client) ListTokens(ctx context.Context) ([]apiv1.Token, error) {
	var out apiv1.TokenList
	err := c.do(ctx, http.MethodGet, "/tokens", nil, nil, &out)
	return out.Items, err
}

// CreateToken makes a personal access token of the caller.
func (c *Client) CreateToken(ctx context.Context, in apiv1.CreateToken) (apiv1.CreatedToken, error) {
	var out apiv1.CreatedToken
	err := c.do(ctx, http.MethodPost, "/tokens", nil, in, &out)
	return out, err
}

// RevokeToken revokes one of the caller's tokens.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/tokens/"+url.PathEscape(id), nil, nil, nil)
}

// AuditQuery selects audit records (zero values: no filter).
type AuditQuery struct {
	User, Action string
	Since, Until time.Time
	Before       int64
	Limit        int
}

// ListAudit reads a page of the audit log of the client's team.
func (c *Client) ListAudit(ctx context.Context, q AuditQuery) (apiv1.AuditList, error) {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set(apiv1.QueryUser, q.User)
	set(apiv1.QueryAction, q.Action)
	if !q.Since.IsZero() {
		v.Set(apiv1.QuerySince, q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set(apiv1.QueryUntil, q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Before > 0 {
		v.Set(apiv1.QueryBefore, strconv.FormatInt(q.Before, 10))
	}
	if q.Limit > 0 {
		v.Set(apiv1.QueryLimit, strconv.Itoa(q.Limit))
	}
	var out apiv1.AuditList
	err := c.do(ctx, http.MethodGet, "/audit", v, nil, &out)
	return out, err
}

// ListQuotas lists team's quotas; with team "" every team's (platform
// admins).
func (c *Client) ListQuotas(ctx context.Context, team string) ([]apiv1.Quota, error) {
	path := "/quotas"
	if team != "" {
		path = "/teams/" + url.PathEscape(team) + "/quotas"
	}
	var out apiv1.QuotaList
	err := c.do(ctx, http.MethodGet, path, nil, nil, &out)
	return out.Items, err
}

// SetQuota sets team's quota in location (platform admins).
func (c *Client) SetQuota(ctx context.Context, team, location string, in apiv1.SetQuota) (apiv1.Quota, error) {
	var out apiv1.Quota
	err := c.do(ctx, http.MethodPut, "/teams/"+url.PathEscape(team)+"/quotas/"+url.PathEscape(location), nil, in, &out)
	return out, err
}

// DeleteQuota removes team's quota in location for gpuModel ("": the one
// of every model).
func (c *Client) DeleteQuota(ctx context.Context, team, location, gpuModel string) error {
	var q url.Values
	if gpuModel != "" {
		q = url.Values{apiv1.QueryGPUModel: {gpuModel}}
	}
	return c.do(ctx, http.MethodDelete, "/teams/"+url.PathEscape(team)+"/quotas/"+url.PathEscape(location), q, nil, nil)
}
