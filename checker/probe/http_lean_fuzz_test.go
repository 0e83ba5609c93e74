//go:build linux

package probe

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// FuzzLeanAnswer holds the lean prober's contract (TestHTTPLeanMatchesNetHTTP,
// TestHTTPAsyncMatchesProbe) for any bytes a target answers before it
// closes the connection: the lean prober, blocking and asynchronous (on a
// connection of its own, as past the kept-connection budget), passes or
// fails as the net/http prober does, with the same error text, Describe,
// errors.Is answers and StatusError.
func FuzzLeanAnswer(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\n\r\n",
		"HTTP/1.1 503 Unavailable\r\nContent-Length: 4\r\n\r\ndown",
		"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"HTTP/1.1   200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 099 Low\r\n\r\n",
		"HTTP/1.1 600 High\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nContent-Length: 02\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\n  more\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: a\x01b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nrest",
		"HTTP/1.0 200 OK\r\n\r\nok",
		"HTTP/2.0 200 OK\r\n\r\n",
		"garbage\r\n\r\n",
		"",
	} {
		f.Add([]byte(s), false, uint16(0))
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), true, uint16(0))
	f.Add([]byte("HTTP/1.1 503 No\r\nContent-Length: 0\r\n\r\n"), false, uint16(503))

	kept := NewFactory()
	dialled := NewFactoryWith(FactoryOptions{MaxIdleConns: -1})
	f.Cleanup(func() { kept.Close(); dialled.Close() })
	// One server for every input, answering the input at hand: a server
	// an input would take a port each, held for a minute (TIME_WAIT) once
	// it closes its connections.
	var answer atomic.Pointer[string]
	srv := newRawServer(f, func(c net.Conn) bool { return replyAndClose(*answer.Load())(c) })
	timeout := testscale.D(10 * time.Second)
	f.Fuzz(func(t *testing.T, b []byte, head bool, expected uint16) {
		a := string(b)
		answer.Store(&a)
		s := &HTTPSpec{URL: srv.url() + "/healthz"}
		if head {
			s.Method = "HEAD"
		}
		if expected != 0 {
			s.ExpectedStatus = []int{int(expected)}
		}
		if (Spec{HTTP: s}).Validate() != nil {
			t.Skip("an expected status the spec refuses")
		}
		lean, std := leanAndNetHTTP(t, kept, s)
		// The net/http prober's connection of the input before must not
		// serve this one: it may hold bytes of its answer.
		kept.client.CloseIdleConnections()
		want := probeWithin(t, timeoutCtx(t, timeout), std)
		sameProbeError(t, "lean", probeWithin(t, timeoutCtx(t, timeout), lean), "net/http", want)

		async, _ := leanAndNetHTTP(t, dialled, s)
		got, _ := probeAsync(t, async, timeout)
		sameProbeError(t, "async", got, "net/http", want)
	})
}
