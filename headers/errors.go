package headers

import (
	"errors"
	"fmt"
)

// Errors returned by the parsers and formatters. They are wrapped with the
// field name and a reason; test for them with errors.Is.
var (
	// ErrSyntax reports a field value that does not follow the syntax of
	// its field.
	ErrSyntax = errors.New("headers: malformed field value")

	// ErrRange reports a well-formed value outside what the field allows or
	// what a time.Duration can hold: a negative quota, a zero window, a
	// Retry-After beyond the configured bound, an integer that Structured
	// Fields cannot carry.
	ErrRange = errors.New("headers: value out of range")
)

// fieldError wraps sentinel with the field name and a reason.
func fieldError(field string, sentinel error, reason string) error {
	return fmt.Errorf("%w: %s: %s", sentinel, field, reason)
}
