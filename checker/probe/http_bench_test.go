package probe

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkHTTPProber: one probe of one of n targets (Go HTTP servers on
// 127.0.0.1 answering 200 "ok\n"), probed in turn as a fleet is, by the
// lean prober and by the net/http prober on the Factory's shared
// transport. "conns/op" is the share of probes that opened a connection.
// The servers run in this process, so each op includes their side too.
//
//	go test -run '^$' -bench HTTPProber -benchmem ./checker/probe/
func BenchmarkHTTPProber(b *testing.B) {
	for _, n := range []int{1, 1000} {
		for _, kind := range []string{"lean", "nethttp"} {
			b.Run(fmt.Sprintf("targets=%d/%s", n, kind), func(b *testing.B) {
				var accepted atomic.Int64
				srv := &http.Server{
					Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						_, _ = io.WriteString(w, "ok\n")
					}),
					ConnState: func(_ net.Conn, s http.ConnState) {
						if s == http.StateNew {
							accepted.Add(1)
						}
					},
				}
				var wg sync.WaitGroup
				defer func() {
					_ = srv.Close()
					wg.Wait()
				}()
				f := NewFactory()
				defer f.Close()
				f.init()
				probers := make([]Prober, n)
				for i := range n {
					l, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() { _ = srv.Serve(l) })
					s := &HTTPSpec{URL: "http://" + l.Addr().String() + "/healthz"}
					if kind == "lean" {
						p, _ := f.newHTTPProber(s)
						defer closeProber(p)
						probers[i] = p
					} else {
						probers[i] = newNetHTTPProber(f.client, s)
					}
				}
				one := func(p Prober) {
					ctx, cancel := context.WithTimeout(b.Context(), time.Second)
					defer cancel()
					if err := p.Probe(ctx); err != nil {
						b.Fatal(err)
					}
				}
				for _, p := range probers {
					one(p)
				}
				before := accepted.Load()
				b.ReportAllocs()
				b.ResetTimer()
				i := 0
				for b.Loop() {
					one(probers[i%n])
					i++
				}
				b.StopTimer()
				b.ReportMetric(float64(accepted.Load()-before)/float64(b.N), "conns/op")
			})
		}
	}
}
