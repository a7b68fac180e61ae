package cosmic

// Role is what a user may do within a team.
type Role string

// The roles.
const (
	RoleAdmin  Role = "admin"  // everything, including teams, users and racks
	RoleMember Role = "member" // create and manage the team's jobs
	RoleViewer Role = "viewer" // read only
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleMember || r == RoleViewer }

// CanWrite reports whether r may create, change or delete jobs.
func (r Role) CanWrite() bool { return r == RoleAdmin || r == RoleMember }

// User is someone who calls the API, acting within one team.
type User struct {
	Name string `json:"name"`
	Team string `json:"team"`
	Role Role   `json:"role"`
}

// Team owns jobs; every job belongs to the team active when it was created.
type Team struct {
	Name string `json:"name"`
}
