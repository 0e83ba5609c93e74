//go:build linux

package probe

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// FuzzLeanAnswer holds the lean prober's contract (TestHTTPLeanMatchesNetHTTP,
// TestHTTPAsyncMatchesProbe) for any bytes a target answers before it
// closes the connection: the lean prober, blocking and asynchronous,
// passes or fails as the net/http prober does, with the same error text,
// Describe, errors.Is answers and StatusError. The answer comes whole or
// in two writes (split), on a new connection or (reuse) on one that
// already served a probe, where a connection that ends before any byte of
// an answer is retried on a new one. The probe may check the body
// (contains, within limit bytes) and a header (X-A against headerRegex),
// which the epoll loop does itself for a small answer.
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
		f.Add([]byte(s), false, uint16(0), uint16(0), false, "", uint16(0), "")
		f.Add([]byte(s), false, uint16(0), uint16(len(s)/2), true, "", uint16(0), "")
		f.Add([]byte(s), false, uint16(0), uint16(0), false, "ok", uint16(1), "^1$")
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), true, uint16(0), uint16(20), false, "", uint16(0), "")
	f.Add([]byte("HTTP/1.1 503 No\r\nContent-Length: 0\r\n\r\n"), false, uint16(503), uint16(0), true, "", uint16(0), "")
	ready := "HTTP/1.1 200 OK\r\nX-A: v1\r\nx-a: v2\r\nContent-Length: 5\r\n\r\nready"
	f.Add([]byte(ready), false, uint16(0), uint16(0), false, "ready", uint16(0), "^v2$")
	f.Add([]byte(ready), false, uint16(0), uint16(40), true, "rea", uint16(3), "v[0-9]")
	f.Add([]byte(ready), false, uint16(0), uint16(0), false, "dy", uint16(4), "^v3$")
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nre\r\n3\r\nady\r\n0\r\n\r\n"), false, uint16(0), uint16(0), false, "ready", uint16(0), "")
	// Over the read buffer: a long head, a body past the body checks' limit.
	long := "HTTP/1.1 200 OK\r\nX-A: 1\r\nX-Pad: " + strings.Repeat("p", 1100) + "\r\nContent-Length: 5\r\n\r\nready"
	f.Add([]byte(long), false, uint16(0), uint16(600), false, "ready", uint16(0), "^1$")
	f.Add([]byte(long), false, uint16(0), uint16(0), true, "", uint16(0), "")
	big := "HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n" + strings.Repeat("b", 2995) + "ready"
	f.Add([]byte(big), false, uint16(0), uint16(1500), false, "ready", uint16(2000), "")
	f.Add([]byte(big), false, uint16(0), uint16(0), true, "bbb", uint16(3), "")
	f.Add([]byte(ready), false, uint16(0), uint16(0), false, "dy", uint16(4), "")

	kept := NewFactory()
	dialled := NewFactoryWith(FactoryOptions{MaxIdleConns: -1})
	f.Cleanup(func() { kept.Close(); dialled.Close() })
	// One server for every input, answering the input at hand: a server
	// an input would take a port each, held for a minute (TIME_WAIT) once
	// it closes its connections.
	type input struct {
		answer string
		split  int  // the first write's length, when within the answer
		reuse  bool // the first request of a connection is answered 200
	}
	var in atomic.Pointer[input]
	var served sync.Map // connections that answered their first request
	srv := newRawServer(f, func(c net.Conn) bool {
		in := in.Load()
		if _, again := served.LoadOrStore(c, true); in.reuse && !again {
			return reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")(c) // no body: right for HEAD too
		}
		if in.split > 0 && in.split < len(in.answer) {
			if _, err := c.Write([]byte(in.answer[:in.split])); err != nil {
				return false
			}
			time.Sleep(time.Millisecond) // so that the prober reads the first write alone
			c.Write([]byte(in.answer[in.split:]))
			return false
		}
		return replyAndClose(in.answer)(c)
	})
	timeout := testscale.D(10 * time.Second)
	f.Fuzz(func(t *testing.T, b []byte, head bool, expected, split uint16, reuse bool, contains string, limit uint16, headerRegex string) {
		served.Clear()
		in.Store(&input{answer: string(b), split: int(split), reuse: reuse})
		s := &HTTPSpec{URL: srv.url() + "/healthz"}
		if head {
			s.Method = "HEAD"
		}
		if expected != 0 {
			s.ExpectedStatus = []int{int(expected)}
		}
		s.BodyContains, s.BodyLimit = contains, int(limit)
		if headerRegex != "" {
			s.HeaderMatches = []HeaderMatch{{Name: "X-A", Regex: headerRegex}}
		}
		if (Spec{HTTP: s}).Validate() != nil {
			t.Skip("a spec Validate refuses")
		}
		probe := func(p Prober) error { return probeWithin(t, timeoutCtx(t, timeout), p) }
		lean, std := leanAndNetHTTP(t, kept, s)
		asyncFactory := dialled
		if reuse {
			asyncFactory = kept
		}
		async, _ := leanAndNetHTTP(t, asyncFactory, s)
		// The net/http prober's connection of the input before must not
		// serve this one: it may hold bytes of its answer.
		kept.client.CloseIdleConnections()
		if reuse { // results do not matter: each keeps its connection
			_, _, _ = probe(std), probe(lean), probe(async)
		}
		want := probe(std)
		sameProbeError(t, "lean", probe(lean), "net/http", want)
		got, wasAsync := probeAsync(t, async, timeout)
		if reuse && !wasAsync {
			t.Errorf("ProbeAsync declined the probe on the kept connection")
		}
		sameProbeError(t, "async", got, "net/http", want)
	})
}
