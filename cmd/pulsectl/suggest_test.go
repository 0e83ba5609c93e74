package main

import (
	"regexp"
	"strings"
	"testing"
)

// A mistyped command or flag is a usage error that names the closest
// commands or flags; one too far from any names none.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the suggestion line, "" for none
	}{
		{[]string{"lst"}, `Did you mean "ls"?`},
		{[]string{"lis"}, `Did you mean "ls"?`}, // the alias list, as its command
		{[]string{"drian", "web-1"}, `Did you mean "drain"?`},
		{[]string{"wach"}, `Did you mean "watch"?`},
		{[]string{"sta"}, `Did you mean "state"?`},
		{[]string{"help", "stat"}, `Did you mean "state"?`},
		{[]string{"ls", "--stat", "healthy"}, `Did you mean "--state"?`},
		{[]string{"add", "--intervl", "5s"}, `Did you mean "--interval"?`},
		{[]string{"set", "x", "-intervl", "5s"}, `Did you mean "--interval"?`},
		{[]string{"watch", "--snapshto"}, `Did you mean "--snapshot"?`},
		{[]string{"--adr", "127.0.0.1:1", "ls"}, `Did you mean "--addr"?`},
		{[]string{"xyzzy"}, ""},
		{[]string{"ls", "--frobnicate"}, ""},
		{[]string{"ls", "--group"}, ""},
		{[]string{"ls", "--state", "helthy"}, `Did you mean "healthy"?`},
		{[]string{"policy", "gte", "edge"}, `Did you mean "get"?`},
		{[]string{"config", "veiw"}, `Did you mean "view"?`},
		{[]string{"completion", "fihs"}, `Did you mean "fish"?`},
		{[]string{"add", "--interval", "soon"}, ""},
	} {
		r := pulsectl(t, tc.args...)
		if r.code != exitUsage || r.stdout != "" || !strings.HasPrefix(r.stderr, "pulsectl: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, r.code, r.stdout, r.stderr)
			continue
		}
		lines := strings.Split(r.stderr, "\n")
		got := ""
		for _, l := range lines {
			if strings.HasPrefix(l, "Did you mean") {
				got = l
			}
		}
		if got != tc.want {
			t.Errorf("%q: suggestion %q, want %q\n%s", tc.args, got, tc.want, r.stderr)
		}
		if strings.Contains(r.stderr, "---") || regexp.MustCompile(`(flag|argument:) -[a-z]{2}`).MatchString(r.stderr) {
			t.Errorf("%q: a flag with the wrong dashes:\n%s", tc.args, r.stderr)
		}
	}
}
