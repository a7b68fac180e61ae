package cosmic

import (
	"errors"
	"fmt"
	"strings"
)

// The error vocabulary: each kind of error the domain has carries its code,
// the one string every layer maps from (CodeOf): the fabric carries it as
// its error code (internal/ork), the API answers it with the status
// apiv1.StatusOf gives and the same code in its JSON error, and the CLI
// and SDK clients match it. A new kind is a code here and a status there.
const (
	CodeNotFound  = "not_found" // no such object, or not visible to the caller
	CodeInvalid   = "invalid"   // the input is invalid (FieldErrors say where)
	CodeConflict  = "conflict"  // contradicts the object's current state
	CodeForbidden = "forbidden" // the caller may not do it
)

// Sentinel errors, one per kind (ErrIllegalTransition is a conflict).
// Components wrap them with %w; errors.Is and CodeOf see through.
var (
	ErrNotFound          error = &Kind{CodeNotFound, "not found"}
	ErrConflict          error = &Kind{CodeConflict, "conflict"}
	ErrInvalid           error = &Kind{CodeInvalid, "invalid"}
	ErrIllegalTransition error = &Kind{CodeConflict, "illegal status transition"}
	ErrForbidden         error = &Kind{CodeForbidden, "forbidden"}
)

// Kind is a sentinel error of a kind: its code and its text.
type Kind struct {
	Code string
	Text string
}

func (k *Kind) Error() string { return k.Text }

// CodeOf returns the code of the first kind in err's tree (a FieldError is
// invalid), or "" when err has none.
func CodeOf(err error) string {
	var k *Kind
	if errors.As(err, &k) {
		return k.Code
	}
	return ""
}

// MessageOf is err's text for people, without the kind's own text in front
// ("conflict: job … is running" reads "job … is running"): every layer
// shows the code beside the message, so the kind would read twice.
func MessageOf(err error) string {
	msg := err.Error()
	var k *Kind
	if errors.As(err, &k) {
		if rest, ok := strings.CutPrefix(msg, k.Text+": "); ok {
			return rest
		}
	}
	return msg
}

// Codes lists every code, for the layers' tests.
var Codes = []string{CodeNotFound, CodeInvalid, CodeConflict, CodeForbidden}

// FieldError is one problem with one field of an input, named by its JSON
// path (for example "resources.gpu" or "envVars[2].name").
// errors.Is(fieldErr, ErrInvalid) is true.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
	// Reason is the reason code when the field asks for what the platform
	// cannot give (no_such_location, exceeds_node_gpus, …): the code a job
	// would otherwise have failed with.
	Reason ReasonCode `json:"reason,omitempty"`
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
