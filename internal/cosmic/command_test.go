package cosmic

import "testing"

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":              "''",
		"plain-1.2_a/b": "plain-1.2_a/b",
		"k=v":           "k=v",
		"a b":           "'a b'",
		"it's":          `'it'\''s'`,
		"$HOME":         "'$HOME'",
		"`x`":           "'`x`'",
		"a\nb":          "'a\nb'",
		"*":             "'*'",
		"é":             "'é'",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
