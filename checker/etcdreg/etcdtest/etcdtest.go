// Package etcdtest runs a real, single-member etcd server inside a test
// process (etcd's own embed package), on loopback, for the tests of the
// etcd registry and of pulsed replicas. Only tests import it.
package etcdtest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running etcd.
type Server struct {
	// Endpoint is the client URL, e.g. http://127.0.0.1:40123.
	Endpoint string

	t          testing.TB
	dir        string
	client     url.URL
	peer       url.URL
	e          *embed.Etcd
	progressIv time.Duration
	tls        *transport.TLSInfo // nil: plaintext
}

// Start starts etcd with its data in a temporary directory and stops it
// when the test ends. Watch progress notifications come every progress
// (if 0, etcd's default of ten minutes).
func Start(t testing.TB, progress time.Duration) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), client: freeURL(t), peer: freeURL(t), progressIv: progress}
	s.Endpoint = s.client.String()
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return url.URL{Scheme: "http", Host: addr}
}

func (s *Server) start() {
	s.t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "pulse-test"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, s.peer.String())
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true // test data only
	if s.tls != nil {
		cfg.ClientTLSInfo = *s.tls
	}
	if s.progressIv > 0 {
		cfg.WatchProgressNotifyInterval = s.progressIv
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		s.t.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		s.t.Fatal("etcd did not become ready within 30s")
	}
	s.e = e
}

// Stop stops etcd; its data stays for Restart. It is idempotent.
func (s *Server) Stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Restart starts a stopped etcd again, on the same address and data.
func (s *Server) Restart() {
	s.t.Helper()
	if s.e == nil {
		s.start()
	}
}

// Proxy forwards TCP connections to etcd until it is cut: a partition
// between pulsed and etcd, while etcd itself runs on.
type Proxy struct {
	// Endpoint is the proxy's client URL.
	Endpoint string

	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Proxy starts a proxy to s, closed when the test ends.
func (s *Server) Proxy(t testing.TB) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Endpoint: "http://" + l.Addr().String(), l: l, target: s.client.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		l.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// Cut closes every connection through the proxy and refuses new ones
// until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Put stores value at key with a client of its own and returns the
// revision of the write: with a key outside a fleet's prefix, it moves
// etcd's revision past what the fleet's replicas have applied, as another
// fleet sharing the etcd does.
func (s *Server) Put(t testing.TB, key, value string) uint64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Put(t.Context(), key, value)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return uint64(resp.Header.Revision)
}
