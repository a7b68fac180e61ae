package appnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// apiError is an error the app-node itself answers with a given status.
type apiError struct {
	status int
	body   apiv1.ErrorBody
}

func (e *apiError) Error() string { return e.body.Code + ": " + e.body.Message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, body: apiv1.ErrorBody{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, apiv1.CodeBadRequest, format, args...)
}

// invalid reports field problems as one 400 "invalid" error with every
// field in details.
func invalid(fes ...*cosmic.FieldError) *apiError {
	e := errorf(http.StatusBadRequest, apiv1.CodeInvalid, "%s", fes[0].Error())
	if len(fes) > 1 {
		e.body.Message = fmt.Sprintf("%s (and %d more problems)", fes[0].Error(), len(fes)-1)
	}
	e.body.Details, _ = json.Marshal(fes)
	return e
}

// toHTTP is the one mapping from errors to what clients see: the app-node's
// own errors as they are; request-body limits 413; the domain's sentinel
// errors and field errors; the ork's fabric error codes; everything else 500
// without its text. internal says the error is a failure of ours (5xx) whose
// cause must be logged.
func toHTTP(err error) (status int, body apiv1.ErrorBody, internal bool) {
	var ae *apiError
	var mbe *http.MaxBytesError
	var fe *fabric.Error
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.body, ae.status >= 500
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, apiv1.ErrorBody{Code: apiv1.CodeTooLarge,
			Message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}, false
	case errors.As(err, &fe):
		return fabricToHTTP(fe)
	}
	if fes := cosmic.FieldErrors(err); len(fes) > 0 {
		ie := invalid(fes...)
		return ie.status, ie.body, false
	}
	if code := cosmic.CodeOf(err); code != "" {
		return apiv1.StatusOf(code), apiv1.ErrorBody{Code: code, Message: cosmic.MessageOf(err)}, false
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, apiv1.ErrorBody{Code: apiv1.CodeTimeout, Message: "the request timed out"}, true
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, apiv1.ErrorBody{Code: apiv1.CodeUnavailable, Message: "the request was canceled"}, false
	}
	return http.StatusInternalServerError, apiv1.ErrorBody{Code: apiv1.CodeInternal, Message: "internal error; see the app-node's log"}, true
}

// fabricToHTTP answers an error from the ork: a domain code (and bad
// request) as it is, with its status; the fabric's failures to reach the
// ork as unavailable (503: not done) or, where the request had reached it
// or the deadline passed, timed out (504: perhaps done).
func fabricToHTTP(fe *fabric.Error) (int, apiv1.ErrorBody, bool) {
	switch fe.Code {
	case orkapi.CodeInvalid:
		b := apiv1.ErrorBody{Code: apiv1.CodeInvalid, Message: fe.Message}
		if json.Valid(fe.Details) {
			b.Details = fe.Details // []orkapi.FieldError: the same shape as apiv1.FieldError
		}
		return http.StatusBadRequest, b, false
	case cosmic.CodeNotFound, cosmic.CodeConflict, cosmic.CodeForbidden, fabric.CodeBadRequest:
		return apiv1.StatusOf(fe.Code), apiv1.ErrorBody{Code: fe.Code, Message: fe.Message}, false
	case fabric.CodeUnavailable, fabric.CodeRefused:
		if fabric.Unsure(fe) {
			// The ork may have done it: 503 would say it did not.
			return http.StatusGatewayTimeout, apiv1.ErrorBody{Code: apiv1.CodeTimeout,
				Message: "the connection to the ork was lost before it answered; the change may have been made: read the object before trying again"}, true
		}
		return http.StatusServiceUnavailable, apiv1.ErrorBody{Code: apiv1.CodeUnavailable, Message: "the ork cannot be reached; try again"}, true
	case fabric.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout, apiv1.ErrorBody{Code: apiv1.CodeTimeout, Message: "the ork did not answer in time; try again"}, true
	case fabric.CodeCanceled:
		// The ork gave the call up (it was stepping down) or the caller
		// went away: either way it may have been done.
		return http.StatusGatewayTimeout, apiv1.ErrorBody{Code: apiv1.CodeTimeout, Message: "the request was canceled before the ork answered; the change may have been made: read the object before trying again"}, false
	}
	return http.StatusInternalServerError, apiv1.ErrorBody{Code: apiv1.CodeInternal, Message: "internal error; see the app-node's log"}, true
}

// writeError answers err, logging it when it is a failure of ours.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body, internal := toHTTP(err)
	if internal {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusUnauthorized {
		v := `Bearer realm="cosmicac"`
		if r.Header.Get("Authorization") != "" {
			v += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", v)
	}
	writeJSON(w, status, apiv1.ErrorResponse{Error: body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // our own types always encode; keep the answer well-formed anyway
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encode answer"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
