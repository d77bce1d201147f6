package shed

import (
	"errors"
	"fmt"
)

// ErrInvalidOption reports a constructor argument or option field that is
// out of range. Constructors wrap it with the name of the offending field;
// test for it with errors.Is.
var ErrInvalidOption = errors.New("shed: invalid option")

// invalid wraps ErrInvalidOption with a description of the bad field.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}
