//go:build linux

package probe

import (
	"net"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// A body cut short, by the end of the connection or by the probe's
// deadline, fails a probe that checks the body as the net/http prober
// fails it, and leaves one that checks only the status or the header to
// its verdict: blocking, asynchronous on a kept connection, and
// asynchronous on a connection of its own.
func TestHTTPLeanBodyCutShort(t *testing.T) {
	const (
		length  = "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 10\r\n\r\nab"
		chunked = "HTTP/1.1 200 OK\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"
	)
	body := func(s *HTTPSpec) { s.BodyContains = "ab" }
	header := func(s *HTTPSpec) { s.HeaderMatches = []HeaderMatch{{Name: "X-A", Regex: "^1$"}} }
	headerFails := func(s *HTTPSpec) { s.HeaderMatches = []HeaderMatch{{Name: "X-A", Regex: "^2$"}} }
	status := func(*HTTPSpec) {}
	for _, end := range []struct {
		name   string
		answer func(string) func(net.Conn) bool
		holds  bool
	}{{"closed", replyAndClose, false}, {"held", replyAndHold, true}} {
		for _, answer := range []struct{ name, text string }{{"length", length}, {"chunked", chunked}} {
			for _, check := range []struct {
				name string
				set  func(*HTTPSpec)
			}{{"body", body}, {"header", header}, {"header fails", headerFails}, {"status", status}} {
				t.Run(end.name+"/"+answer.name+"/"+check.name, func(t *testing.T) {
					timeout := testscale.D(10 * time.Second)
					if end.holds {
						timeout = testscale.D(300 * time.Millisecond)
					}
					// A kept connection answers its first request with a 200
					// first; a connection of the async prober's own answers
					// at once. Each has a net/http prober of its own on the
					// same server, so that texts name the same URL.
					primedSrv := newRawServer(t, primed(end.answer(answer.text)))
					plainSrv := newRawServer(t, end.answer(answer.text))
					spec := func(srv *rawServer) *HTTPSpec {
						s := &HTTPSpec{URL: srv.url() + "/healthz"}
						check.set(s)
						return s
					}
					probe := func(p Prober) error { return probeWithin(t, timeoutCtx(t, timeout), p) }
					f := newTestFactory(t)
					dialled := NewFactoryWith(FactoryOptions{MaxIdleConns: -1})
					t.Cleanup(dialled.Close)
					lean, std := leanAndNetHTTP(t, f, spec(primedSrv))
					kept, _ := leanAndNetHTTP(t, f, spec(primedSrv))
					own, ownStd := leanAndNetHTTP(t, dialled, spec(plainSrv))
					_, _, _ = probe(std), probe(lean), probe(kept) // each keeps its connection

					want := probe(std)
					sameProbeError(t, "lean", probe(lean), "net/http", want)
					got, _ := probeAsync(t, kept, timeout)
					sameProbeError(t, "async on a kept connection", got, "net/http", want)
					got, _ = probeAsync(t, own, timeout)
					sameProbeError(t, "async on its own connection", got, "net/http", probe(ownStd))
				})
			}
		}
	}
}
