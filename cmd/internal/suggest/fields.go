package suggest

import (
	"errors"
	"strings"

	"github.com/pulsehealth/pulse/internal/yamlpb"
)

// DidYouMean is `Did you mean "a"?` or `Did you mean "a", "b" or "c"?`
// for the suggestions, on a line of its own; "" when there are none.
func DidYouMean(suggestions []string) string {
	if len(suggestions) == 0 {
		return ""
	}
	quoted := make([]string, len(suggestions))
	for i, s := range suggestions {
		quoted[i] = `"` + s + `"`
	}
	list := quoted[0]
	if n := len(quoted); n > 1 {
		list = strings.Join(quoted[:n-1], ", ") + " or " + quoted[n-1]
	}
	return "\nDid you mean " + list + "?"
}

// FileErrors is the text of the errors of a file yamlpb decoded, each
// unknown field followed by the closest fields of its message, if any is
// close.
func FileErrors(err error) string {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var b strings.Builder
	for _, err := range errs {
		b.WriteString(strings.TrimRight(err.Error(), "\n"))
		if uf := (*yamlpb.UnknownFieldError)(nil); errors.As(err, &uf) {
			b.WriteString(DidYouMean(Closest(uf.Field, uf.Fields, nil)))
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
