package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// matchJob: a job by name, by a prefix of its ID of MinJobIDPrefix
// characters or more, and never by a shorter one (issue 32: `jobs delete 9
// --force` after a typo deleted the one job whose ID began with 9).
func TestMatchJob(t *testing.T) {
	job := func(id, name string) apiv1.Job {
		var j apiv1.Job
		j.ID, j.Team, j.Spec.Name = id, "ml", name
		return j
	}
	a := job("9f2a1c00-0000-4000-8000-000000000001", "train")
	b := job("9f2a7d00-0000-4000-8000-000000000002", "9")
	c := job("3c4d5e00-0000-4000-8000-000000000003", "serve")
	all := []apiv1.Job{a, b, c}
	named := func(n string) []apiv1.Job {
		var out []apiv1.Job
		for _, j := range all {
			if j.Spec.Name == n {
				out = append(out, j)
			}
		}
		return out
	}
	for _, tc := range []struct {
		arg, want string
		code      int    // the exit code of the refusal; 0: found
		says      string // in the refusal
	}{
		{arg: "train", want: a.ID},
		{arg: "9f2a1", want: a.ID},
		{arg: "9F2A1C", want: a.ID},
		{arg: "9f2a7", want: b.ID},
		{arg: "3c4d", want: c.ID},
		{arg: "9", want: b.ID},                                        // a name, however short
		{arg: "3", code: ExitUsage, says: "too few for an ID prefix"}, // the one job it begins: not taken
		{arg: "3c", code: ExitUsage, says: "give at least 4 of the ID"},
		{arg: "3c4", code: ExitUsage, says: "too few"},
		{arg: "9f2", code: ExitUsage, says: "too few"},
		{arg: "9f2a", code: ExitUsage, says: `"9f2a" is ambiguous: ` + a.ID + ", " + b.ID},
		{arg: "9f2a9", code: ExitFailure, says: `no job is named "9f2a9" or has an ID starting with it`},
		{arg: "nope", code: ExitFailure, says: "no job is named"},
	} {
		var all4 []apiv1.Job
		if isIDPrefix(tc.arg) && len(tc.arg) >= MinJobIDPrefix {
			all4 = all
		}
		got, err := matchJob(tc.arg, named(tc.arg), all4)
		if tc.code == 0 {
			if err != nil || got != tc.want {
				t.Errorf("%q: %q, %v; want %s", tc.arg, got, err, tc.want)
			}
			continue
		}
		var ec *exitError
		if err == nil || !errors.As(err, &ec) || ec.code != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %q, %v; want exit %d saying %q", tc.arg, got, err, tc.code, tc.says)
		}
	}
}
