package cosmic

import "strings"

// FileCommand is the command that creates a job from a full spec file; a
// caller suggests it when jobflags.Command reports fields that have no flag.
const FileCommand = "cosmicac jobs create -f spec.yaml"

// Command is the `cosmicac jobs create` invocation equivalent to a spec.
type Command struct {
	// Args is the argument vector, starting with "cosmicac".
	Args []string `json:"args"`
	// Line is Args quoted for a POSIX shell.
	Line string `json:"command"`
	// Unexpressed lists the JSON paths of set fields that no flag
	// expresses. When it is not empty Line creates a different job than the
	// spec: save the spec to a file and use FileCommand instead.
	Unexpressed []string `json:"unexpressed,omitempty"`
}

// ShellQuote quotes s for a POSIX shell: as is when it holds only safe
// characters, else in single quotes, each ' written as the sequence quote,
// backslash, quote, quote.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_@%+=:,./-", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
