package cosmic

import (
	"errors"
	"fmt"
	"testing"
)

// Every kind carries its code through wrapping and joining.
func TestCodeOf(t *testing.T) {
	for err, want := range map[error]string{
		ErrNotFound: CodeNotFound, ErrConflict: CodeConflict, ErrInvalid: CodeInvalid,
		ErrIllegalTransition: CodeConflict, ErrForbidden: CodeForbidden,
		fmt.Errorf("job x: %w", ErrNotFound):                          CodeNotFound,
		&FieldError{Field: "a", Message: "b"}:                         CodeInvalid,
		errors.Join(&FieldError{Field: "a"}, &FieldError{Field: "b"}): CodeInvalid,
		errors.New("plain"):                                           "",
		nil:                                                           "",
	} {
		if got := CodeOf(err); got != want {
			t.Errorf("CodeOf(%v) = %q, want %q", err, got, want)
		}
	}
	for _, c := range Codes {
		if c == "" {
			t.Error("an empty code")
		}
	}
}
