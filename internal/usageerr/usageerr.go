// Package usageerr marks errors in what the user asked for (bad flags,
// sizes, names, paths: exit status 2), as opposed to failures while doing
// it. Every package that checks user input answers with it, so the
// command sees one kind of error whichever package refused.
package usageerr

import (
	"errors"
	"fmt"
)

// ErrUsage is what errors.Is matches for every such error.
var ErrUsage = errors.New("usage")

type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// Errorf makes an ErrUsage error with a message of its own (one line).
func Errorf(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// Entries is n entries of a directory, in words, for a refusal that
// counts them ("1 entry", "3 entries").
func Entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}
