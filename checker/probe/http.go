package probe

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
)

// maxBodyBytes caps how much of a response body an HTTP probe reads. A body
// that fits is read to its end, so the connection goes back to the pool; a
// longer one is cut off, which costs an HTTP/1.1 connection (HTTP/2 only
// resets the stream).
const maxBodyBytes = 64 << 10

// httpProber sends one request per probe through the Factory's shared
// client. Its fields are set once by newHTTPProber and only read afterwards,
// so Probe is safe for concurrent use.
type httpProber struct {
	client   *http.Client
	method   string
	url      string
	host     string      // request Host when the spec sets one, else ""
	header   http.Header // never modified after construction
	expected []int       // empty means any 2xx
}

// newHTTPProber builds a prober for a validated spec: a leanProber, which
// keeps its own connection, for a plain http:// request it can send
// exactly as net/http would, and otherwise an httpProber on the shared
// client.
func (f *Factory) newHTTPProber(s *HTTPSpec) Prober {
	p := newNetHTTPProber(f.client, s)
	if f.follow > 0 {
		return p // a lean prober does not follow redirects
	}
	if lp := newLeanProber(f, p); lp != nil {
		f.remember(lp)
		return lp
	}
	return p
}

// newNetHTTPProber builds a prober that sends its requests through client.
func newNetHTTPProber(client *http.Client, s *HTTPSpec) *httpProber {
	p := &httpProber{
		client:   client,
		method:   s.Method,
		url:      s.URL,
		header:   make(http.Header, len(s.Headers)+1),
		expected: slices.Clone(s.ExpectedStatus),
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

// Probe sends the request and checks the status. It reads at most
// maxBodyBytes of the body and discards it; the body's content and any error
// reading it do not affect the result.
func (p *httpProber) Probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, p.method, p.url, nil)
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
	// One byte past the cap, so that a body of exactly maxBodyBytes is read
	// to EOF and its connection reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyBytes+1))
	_ = resp.Body.Close()
	if p.passes(resp.StatusCode) {
		return nil
	}
	return &StatusError{Code: resp.StatusCode}
}

// passes reports whether code is an expected status.
func (p *httpProber) passes(code int) bool {
	return statusPasses(p.expected, code)
}

// statusPasses reports whether code is one of expected, or a 2xx when
// expected is empty.
func statusPasses(expected []int, code int) bool {
	if len(expected) == 0 {
		return code >= 200 && code <= 299
	}
	return slices.Contains(expected, code)
}
