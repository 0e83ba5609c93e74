package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// The errors a call can wrap, one per gRPC code pulsed answers with. Test
// for them with errors.Is:
//
//	if _, err := c.State(ctx, "web-1"); errors.Is(err, client.ErrNotFound) { ... }
var (
	// ErrNotFound: no target of that name.
	ErrNotFound error = codeError(codes.NotFound)
	// ErrInvalidArgument: a malformed request; the message starts with the
	// field to fix and states the bound.
	ErrInvalidArgument error = codeError(codes.InvalidArgument)
	// ErrUnavailable: pulsed cannot be reached, is shutting down, or cannot
	// store a change (its registry is down).
	ErrUnavailable error = codeError(codes.Unavailable)
	// ErrUnauthenticated: no token, or one pulsed does not know.
	ErrUnauthenticated error = codeError(codes.Unauthenticated)
	// ErrPermissionDenied: the token's role may not make this call.
	ErrPermissionDenied error = codeError(codes.PermissionDenied)
	// ErrFailedPrecondition: the call does not apply in this state, e.g.
	// ReportOutcome for a target without passive outcomes, or a watch
	// resumed from another server's revision.
	ErrFailedPrecondition error = codeError(codes.FailedPrecondition)
	// ErrOutOfRange: a watch resumed from a revision older than pulsed's
	// history.
	ErrOutOfRange error = codeError(codes.OutOfRange)
	// ErrResourceExhausted: a rate or connection limit, or a watch that
	// fell behind.
	ErrResourceExhausted error = codeError(codes.ResourceExhausted)
)

// codeError is the sentinel for one gRPC code.
type codeError codes.Code

func (c codeError) Error() string { return "pulse: " + codes.Code(c).String() }

// Error is a call that pulsed (or gRPC on its way there) refused. It wraps
// the sentinel of its code (errors.Is(err, ErrNotFound)), and
// context.Canceled or context.DeadlineExceeded for CANCELLED and
// DEADLINE_EXCEEDED; status.Code(err) gives the code.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is pulsed's message.
	Message string
	// Method is the RPC, e.g. "State".
	Method string

	st *status.Status // as pulsed sent it, with its details; nil: made here
}

// Details of pulsed's errors: a google.rpc.ErrorInfo of domain ErrorDomain,
// read with status.Convert(err).Details().
const (
	// ErrorDomain is the domain of pulsed's ErrorInfo details.
	ErrorDomain = "github.com/pulsehealth/pulse"
	// ReasonProbedElsewhere is the reason of History's NOT_FOUND, on a
	// replica, for a target another replica probes and keeps the history
	// of. Its metadata: "replica", that replica's ID, and where it says
	// it is reached, "address" (host:port of its API) and "page" (its
	// status page's URL), each when it says so (pulsed -advertise-host).
	ReasonProbedElsewhere = "PROBED_ELSEWHERE"
)

// Error returns "pulse: <Method>: <Code>: <Message>".
func (e *Error) Error() string {
	return fmt.Sprintf("pulse: %s: %s: %s", e.Method, e.Code, e.Message)
}

// Is reports whether target is the sentinel of e's code, or the context
// error CANCELLED and DEADLINE_EXCEEDED stand for.
func (e *Error) Is(target error) bool {
	switch target {
	case context.Canceled:
		return e.Code == codes.Canceled
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	}
	c, ok := target.(codeError)
	return ok && codes.Code(c) == e.Code
}

// GRPCStatus returns e as a gRPC status, so that status.Code and
// status.FromError see through it; it has the details pulsed sent.
func (e *Error) GRPCStatus() *status.Status {
	if e.st != nil {
		return e.st
	}
	return status.New(e.Code, e.Message)
}

// ErrClosed: the client was closed (Client.Close); no call can be made on
// it any more.
var ErrClosed = errors.New("pulse: the client is closed")

// wrap is the package's wrap, with ErrClosed for a call the client's own
// Close ended, rather than the context.Canceled gRPC answers with.
func (c *Client) wrap(method string, err error) error {
	if err != nil && status.Code(err) == codes.Canceled && c.conn.GetState() == connectivity.Shutdown {
		return fmt.Errorf("pulse: %s: %w", method, ErrClosed)
	}
	return wrap(method, err)
}

// wrap turns a gRPC error into an *Error; nil stays nil.
func wrap(method string, err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	return &Error{Code: st.Code(), Message: st.Message(), Method: method, st: st}
}
