package cosmic

import (
	"errors"
	"fmt"
)

// Sentinel errors. Components wrap them with %w; the HTTP layer maps them to
// statuses with errors.Is (ErrNotFound 404, ErrConflict 409, ErrInvalid 400,
// ErrIllegalTransition 409, ErrForbidden 403).
var (
	ErrNotFound          = errors.New("not found")
	ErrConflict          = errors.New("conflict")
	ErrInvalid           = errors.New("invalid")
	ErrIllegalTransition = errors.New("illegal status transition")
	ErrForbidden         = errors.New("forbidden")
)

// FieldError is one problem with one field of an input, named by its JSON
// path (for example "resources.gpu" or "envVars[2].name").
// errors.Is(fieldErr, ErrInvalid) is true.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Unwrap makes every FieldError an ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// FieldErrors returns every *FieldError in err's tree (as built by
// errors.Join and %w), in order. It returns nil if there is none.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// problems collects field errors; err joins them.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (p problems) err() error { return errors.Join(p...) }
