package suggest

import (
	"slices"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"ls", "ls", 0}, {"lst", "ls", 1}, {"drian", "drain", 1},
		{"intervl", "interval", 1}, {"x", "ls", 2}, {"ca", "abc", 3}, {"", "abc", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	flags := []string{"listen", "http-listen", "interval", "timeout", "data-dir"}
	for _, tc := range []struct {
		typed string
		want  []string
	}{
		{"intervl", []string{"interval"}},
		{"grpc-listen", []string{"listen"}},
		{"data", []string{"data-dir"}},
		{"xyzzy", nil},
		{"lis", []string{"listen"}},
	} {
		if got := Closest(tc.typed, flags, nil); !slices.Equal(got, tc.want) {
			t.Errorf("Closest(%q) = %q, want %q", tc.typed, got, tc.want)
		}
	}
}
