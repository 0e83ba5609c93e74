package probe

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// A redirect is reported as is by default; with FollowRedirects the probe
// follows up to that many and judges the final answer, and past them
// reports the redirect it stopped at.
func TestFollowRedirects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /hop/N redirects N more times, then answers 200.
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
		}
	}))
	defer srv.Close()
	loopback, err := ParseEgressPolicy([]string{"127.0.0.0/8"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		follow, hops int
		want         string
	}{
		{0, 1, "status 302"},
		{10, 1, ""},
		{10, 10, ""},
		{10, 11, "status 302"},
		{3, 4, "status 302"},
		{99, 10, ""}, // capped at MaxFollowRedirects
		{99, 11, "status 302"},
	} {
		f := NewFactoryWith(FactoryOptions{Egress: loopback, FollowRedirects: tc.follow})
		p, err := f.New(Spec{HTTP: &HTTPSpec{URL: fmt.Sprintf("%s/hop/%d", srv.URL, tc.hops)}})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := p.Probe(t.Context()); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("follow %d, %d hops: %q, want %q", tc.follow, tc.hops, got, tc.want)
		}
		f.Close()
	}
}
