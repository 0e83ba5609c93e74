package main

// What-if benchmarks for BENCHMARKS.md's optimisation list: one HTTP probe
// of one of 1,000 farm targets, probed in turn as a 1,000-target fleet is,
// three ways. The farm serves in this process, so every op includes its
// side too; compare the three with each other, not with the harness.
//
//	go test -run '^$' -bench Prober -benchmem ./cmd/pulse-bench/
//
// "factory" is Pulse's prober today (probe.Factory: a shared transport
// that keeps at most 256 idle connections, 8 per host). "keepalive" is
// net/http with an idle pool as large as the fleet. "lean" keeps one
// connection per target and writes a preformatted request on it, reading
// the status line and a Content-Length body itself: no Transport, no
// per-connection goroutines. "conns/op" is the share of probes that opened
// a new connection.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

func BenchmarkProber(b *testing.B) {
	const n = 1000
	farm, err := NewFarm(FarmConfig{N: n})
	if err != nil {
		b.Fatal(err)
	}
	defer farm.Close()

	b.Run("factory", func(b *testing.B) {
		f := probe.NewFactory()
		defer f.Close()
		probers := make([]probe.Prober, n)
		for i := range probers {
			if probers[i], err = f.New(probe.Spec{HTTP: &probe.HTTPSpec{URL: farm.URL(i)}}); err != nil {
				b.Fatal(err)
			}
		}
		benchProbers(b, farm, probers)
	})
	b.Run("keepalive", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConns: 0, MaxIdleConnsPerHost: 1, DisableCompression: true}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		probers := make([]probe.Prober, n)
		for i := range probers {
			probers[i] = clientProber{client: client, url: farm.URL(i)}
		}
		benchProbers(b, farm, probers)
	})
	b.Run("lean", func(b *testing.B) {
		probers := make([]probe.Prober, n)
		for i := range probers {
			p := newLeanProber(farm.Addr(i), "/healthz")
			defer p.Close()
			probers[i] = p
		}
		benchProbers(b, farm, probers)
	})
}

// benchProbers probes the targets in turn, after one warm-up round.
func benchProbers(b *testing.B, farm *Farm, probers []probe.Prober) {
	b.Helper()
	ctx := b.Context()
	one := func(p probe.Prober) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := p.Probe(pctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, p := range probers {
		one(p)
	}
	conns := farm.conns.Load()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		one(probers[i%len(probers)])
		i++
	}
	b.StopTimer()
	b.ReportMetric(float64(farm.conns.Load()-conns)/float64(b.N), "conns/op")
}

type clientProber struct {
	client *http.Client
	url    string
}

func (p clientProber) Probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// leanProber is a sketch of a lean HTTP/1.1 prober: one connection kept
// open, the request bytes formatted once, the deadline of the context on
// the connection. It is not safe for concurrent use (a checker has at most
// one probe in flight per target) and handles only Content-Length bodies:
// enough to measure what a prober without net/http's Transport costs.
type leanProber struct {
	addr string
	req  []byte
	conn net.Conn
	br   *bufio.Reader
}

func newLeanProber(addr, path string) *leanProber {
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: pulse-probe/1\r\n\r\n"
	return &leanProber{addr: addr, req: []byte(req)}
}

func (p *leanProber) Probe(ctx context.Context) error {
	if p.conn == nil {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.addr)
		if err != nil {
			return err
		}
		p.conn, p.br = c, bufio.NewReaderSize(c, 4096)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = p.conn.SetDeadline(dl)
	}
	err := p.roundTrip()
	if err != nil {
		p.Close() // the next probe opens a new connection
	}
	return err
}

func (p *leanProber) roundTrip() error {
	if _, err := p.conn.Write(p.req); err != nil {
		return err
	}
	line, err := p.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !strings.HasPrefix(string(line[:5]), "HTTP/") {
		return errors.New("malformed status line")
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return errors.New("malformed status code")
	}
	length := -1
	for {
		h, err := p.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(h) <= 2 { // the blank line
			break
		}
		if name, val, ok := strings.Cut(string(h), ":"); ok && strings.EqualFold(name, "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(val)); err != nil {
				return errors.New("malformed Content-Length")
			}
		}
	}
	if length < 0 {
		return errors.New("no Content-Length")
	}
	if _, err := p.br.Discard(length); err != nil {
		return err
	}
	if code/100 != 2 {
		return fmt.Errorf("status %d", code)
	}
	return nil
}

func (p *leanProber) Close() error {
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn, p.br = nil, nil
	return err
}
