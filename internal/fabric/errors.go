package fabric

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Error codes the fabric itself produces. Handlers may use their own codes
// (e.g. "exceeds_node_gpus"); codes are stable strings for programs to match.
const (
	CodeBadRequest        = "bad_request"        // params could not be decoded or were invalid
	CodeNotFound          = "not_found"          // no such method, or the handler's object is missing
	CodeForbidden         = "forbidden"          // the caller's access does not cover the method
	CodeUnavailable       = "unavailable"        // the peer could not be reached or went away
	CodeDeadlineExceeded  = "deadline_exceeded"  // the call's deadline passed
	CodeCanceled          = "canceled"           // the caller cancelled
	CodeInternal          = "internal"           // the handler failed unexpectedly
	CodeRefused           = "refused"            // the peer's policy refused our key
	CodeResourceExhausted = "resource_exhausted" // a limit of the peer was reached
)

// Error is a structured error carried across the fabric.
type Error struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details,omitempty"`
	// cause is the local error this one was made from; it is not sent.
	cause error
	// unsure marks a local failure of a call whose request had been sent
	// (see Unsure); it is not sent.
	unsure bool
	// remote marks an error the peer answered (decoded from the wire); it
	// is not sent.
	remote bool
}

// Errorf makes an Error with a code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Unwrap lets errors.Is match the local cause (ErrRefused, context errors).
func (e *Error) Unwrap() error { return e.cause }

// WithDetails returns a copy of e carrying v, JSON-encoded, as details.
func (e *Error) WithDetails(v any) *Error {
	c := *e
	c.Details, _ = json.Marshal(v)
	return &c
}

// ErrorCode returns the code of a fabric error in err's chain, or "".
func ErrorCode(err error) string {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return ""
}

// asWireError turns a handler's error into what is sent back.
func asWireError(err error) *Error {
	var fe *Error
	switch {
	case errors.As(err, &fe):
		return &Error{Code: fe.Code, Message: fe.Message, Details: fe.Details}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeDeadlineExceeded, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeCanceled, Message: err.Error()}
	default:
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
}

// Unsure reports whether err is a call's failure to reach its peer after
// the request had been sent (the connection was lost or closed while the
// call was in flight): the peer may have done what was asked. A caller that
// must not do a write twice asks again with the same identity (an ID the
// request carries) or says that the outcome is unknown; a failure that is
// not Unsure was not done.
func Unsure(err error) bool {
	var fe *Error
	return errors.As(err, &fe) && fe.unsure
}

// Remote reports whether err is a peer's answer: an error its handler (or
// its node) returned, as opposed to a failure to reach it or to hear back.
// A peer that answers unavailable is there; one that could not be reached
// is not.
func Remote(err error) bool {
	var fe *Error
	return errors.As(err, &fe) && fe.remote
}

// localError wraps a local failure (context, connection) as an Error whose
// Unwrap yields the cause.
func localError(code string, cause error) *Error {
	return &Error{Code: code, Message: cause.Error(), cause: cause}
}
