package version

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v1.2.0", Revision: "3f2a9c1e5b7d", Time: "2026-12-01T17:00:00Z", GoVersion: "go1.25.0"}, "v1.2.0 (revision 3f2a9c1e5b7d, 2026-12-01T17:00:00Z; go1.25.0 "},
		{Info{Version: "(devel)", Revision: "abc", Modified: true, GoVersion: "go1.25.0"}, "(devel) (revision abc, modified; go1.25.0 "},
		{Info{Version: "(devel)", GoVersion: "go1.25.0"}, "(devel) (no VCS revision stamped; go1.25.0 "},
	} {
		if got := tc.in.String(); !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, ")") {
			t.Errorf("%+v: %q, want it to start with %q", tc.in, got, tc.want)
		}
	}
	if got := Line("pulsed"); !strings.HasPrefix(got, "pulsed ") || Get().GoVersion == "" {
		t.Errorf("Line = %q", got)
	}
}
