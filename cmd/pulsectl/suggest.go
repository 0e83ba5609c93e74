package main

import "github.com/pulsehealth/pulse/cmd/internal/suggest"

// didYouMean is " Did you mean "a"?" or " Did you mean "a" or "b"?" for
// the suggestions, on a line of its own; "" when there are none.
func didYouMean(suggestions []string) string { return suggest.DidYouMean(suggestions) }

// flagName is a flag as it is typed: -o for a one-letter flag, --name for
// the others.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
