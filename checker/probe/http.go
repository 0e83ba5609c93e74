package probe

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// maxBodyBytes caps how much of a response body an HTTP probe reads when
// no expectation reads more (see HTTPSpec.BodyLimit). A body that fits is
// read to its end, so the connection goes back to the pool; a longer one
// is cut off, which costs an HTTP/1.1 connection (HTTP/2 only resets the
// stream).
const maxBodyBytes = 64 << 10

// httpProber sends one request per probe through a net/http client: the
// Factory's shared one, or its own when the spec follows redirects or sets
// TLS options. Its fields are set once by newHTTPProber and only read
// afterwards, so Probe is safe for concurrent use.
type httpProber struct {
	client *http.Client
	method string
	url    string
	host   string      // request Host when the spec sets one, else ""
	header http.Header // never modified after construction
	body   string      // request body; POST only
	expect *httpExpect // nil: any 2xx passes

	own    *http.Transport // the prober's own transport, closed by Close; nil when shared
	expiry expiryWatch
}

// newHTTPProber builds a prober for a validated spec: a leanProber, which
// keeps its own connection, for a plain http:// request it can send
// exactly as net/http would, and otherwise an httpProber on a net/http
// client.
func (f *Factory) newHTTPProber(s *HTTPSpec) (Prober, error) {
	p := newNetHTTPProber(f.client, s)
	if s.TLS != nil {
		src, err := newTLSSource("http.tls", s.TLS, f.rootCAs)
		if err != nil {
			return nil, err
		}
		p.expiry.src = src
		p.own = f.sourceTransport(src)
		p.client = &http.Client{Transport: p.own, CheckRedirect: f.client.CheckRedirect}
		src.changed = p.own.CloseIdleConnections
	}
	if s.FollowRedirects {
		p.client = &http.Client{Transport: p.client.Transport, CheckRedirect: followRedirects}
		return p, nil
	}
	if p.own == nil {
		if lp := newLeanProber(f, p); lp != nil {
			f.remember(lp)
			return lp, nil
		}
	}
	return p, nil
}

// followRedirects is the CheckRedirect of probes that follow redirects.
func followRedirects(_ *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return fmt.Errorf("stopped after %d redirects", MaxRedirects)
	}
	return nil
}

// sourceTransport returns a transport of its own for a prober with TLS
// options: every TLS connection is configured by src when it is made, so
// that rotated files are used, and dialled like the shared transport's.
func (f *Factory) sourceTransport(src *tlsSource) *http.Transport {
	return &http.Transport{
		Proxy:       nil,
		DialContext: f.dialer.DialContext,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := f.dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			return src.handshake(ctx, conn, host, []string{"h2", "http/1.1"})
		},
		ForceAttemptHTTP2:   true,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     2 * time.Minute,
	}
}

// newNetHTTPProber builds a prober that sends its requests through client.
func newNetHTTPProber(client *http.Client, s *HTTPSpec) *httpProber {
	p := &httpProber{
		client: client,
		method: s.Method,
		url:    s.URL,
		header: make(http.Header, len(s.Headers)+1),
		body:   s.Body,
		expect: newHTTPExpect(s),
	}
	if p.method == "" {
		p.method = http.MethodGet
	}
	for _, name := range slices.Sorted(maps.Keys(s.Headers)) {
		if http.CanonicalHeaderKey(name) == "Host" {
			p.host = s.Headers[name]
			continue
		}
		p.header.Add(name, s.Headers[name])
	}
	if p.header.Get("User-Agent") == "" {
		p.header.Set("User-Agent", userAgent)
	}
	return p
}

// Probe sends the request and checks the answer. It reads at most
// maxBodyBytes of the body (or the spec's BodyLimit when more), keeping
// what the body checks read; an error reading the body fails only a probe
// that checks it.
func (p *httpProber) Probe(ctx context.Context) error {
	var body io.Reader
	if p.body != "" {
		body = strings.NewReader(p.body)
	}
	req, err := http.NewRequestWithContext(ctx, p.method, p.url, body)
	if err != nil {
		return err
	}
	req.Header = p.header.Clone()
	if p.host != "" {
		req.Host = p.host
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return withContext(ctx, err)
	}
	sink := newBodySink(p.expect)
	// One byte past the cap, so that a body of exactly the cap is read to
	// EOF and its connection reused.
	_, rerr := io.Copy(sinkWriter(sink), io.LimitReader(resp.Body, readCap(p.expect)+1))
	_ = resp.Body.Close()
	if !p.expect.statusPasses(resp.StatusCode) {
		return &StatusError{Code: resp.StatusCode}
	}
	if rerr != nil && sink != nil && len(sink.buf) < sink.limit {
		return withContext(ctx, fmt.Errorf("reading the body: %w", rerr))
	}
	if err := p.expect.check(resp.Header.Values, sink.bytes()); err != nil {
		return err
	}
	return p.checkTLS(resp.TLS)
}

// checkTLS checks the expiry of the certificates of an answer's
// connection.
func (p *httpProber) checkTLS(cs *tls.ConnectionState) error {
	return p.expiry.check(cs, time.Now())
}

// LastCertExpiry implements CertExpiryReporter.
func (p *httpProber) LastCertExpiry() (time.Time, *ExpiryError) { return p.expiry.lastSeen() }

// NewCertWarning implements CertExpiryReporter.
func (p *httpProber) NewCertWarning() *ExpiryError { return p.expiry.newWarning() }

// Close closes the idle connections of the prober's own transport, if it
// has one. It is idempotent.
func (p *httpProber) Close() error {
	if p.own != nil {
		p.own.CloseIdleConnections()
	}
	return nil
}

// sinkWriter returns s as a writer, or io.Discard when s is nil.
func sinkWriter(s *bodySink) io.Writer {
	if s == nil {
		return io.Discard
	}
	return s
}
