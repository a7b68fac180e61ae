package cosmic

import "time"

// Role is what a member may do within one team (docs/permissions.md).
type Role string

// The team roles, from the most to the least trusted.
const (
	RoleOwner  Role = "owner"  // everything in the team, owners included
	RoleAdmin  Role = "admin"  // members (but owners), API keys; reads quotas and audit
	RoleMember Role = "member" // creates and operates the team's jobs, opens shells
	RoleViewer Role = "viewer" // reads the team's jobs and logs
)

// Roles lists the team roles, most trusted first.
var Roles = []Role{RoleOwner, RoleAdmin, RoleMember, RoleViewer}

// Valid reports whether r is a team role.
func (r Role) Valid() bool {
	return r == RoleOwner || r == RoleAdmin || r == RoleMember || r == RoleViewer
}

// User is someone who calls the API. A user belongs to any number of teams
// (Member), and acts in one of them per request. A platform admin manages
// users, teams, racks and quotas, and acts as an owner in every team.
type User struct {
	Name          string    `json:"name"`
	PlatformAdmin bool      `json:"platformAdmin"`
	CreatedAt     time.Time `json:"createdAt"`
	// HasPassword tells whether the user can sign in with a password (the
	// hash itself never leaves the store).
	HasPassword bool `json:"hasPassword"`
}

// Member is a user's role in a team.
type Member struct {
	Team string `json:"team"`
	User string `json:"user"`
	Role Role   `json:"role"`
}

// Team owns jobs; every job belongs to the team active when it was created.
type Team struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// Names of users and teams: 1 to MaxAccountName characters of [a-z0-9._-],
// starting with a letter or a digit.
const MaxAccountName = 63

// ValidAccountName reports whether s may name a user or a team.
func ValidAccountName(s string) bool {
	if s == "" || len(s) > MaxAccountName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
