package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Prober runs one probe against one target. Probe returns nil when the
// target passes and an error saying why when it does not.
//
// Probe must return by ctx's deadline and as soon as ctx is cancelled, and
// must do all its I/O under ctx (never context.Background). When it fails
// because ctx ended, the error satisfies errors.Is(err, context.DeadlineExceeded)
// or errors.Is(err, context.Canceled), so the caller can say "timeout after
// 1s" itself.
type Prober interface {
	Probe(ctx context.Context) error
}

// StatusError is returned by an HTTP Prober when the response status is not
// one that passes. Code is the status code received.
type StatusError struct {
	Code int
}

// Error returns "status <code>", e.g. "status 503".
func (e *StatusError) Error() string {
	return "status " + strconv.Itoa(e.Code)
}

// userAgent is sent by HTTP probes (unless the spec overrides it) and gRPC
// probes.
const userAgent = "pulse-probe/1"

// Factory builds Probers from Specs. An HTTP Prober for an http:// URL
// keeps one connection of its own to its target from one probe to the
// next; the others (https://, and the few http:// requests only net/http
// can send as specified) share one *http.Transport, whose keep-alive
// connections are reused likewise; an https:// prober with TLS options has
// a transport of its own, configured by them. None ever uses a proxy
// (proxy environment variables are ignored) or asks for compressed bodies;
// without TLS options TLS is verified against the system roots.
//
// Every connection its Probers open, HTTP, TCP, gRPC and DNS alike, goes
// through one dialer that enforces the Factory's EgressPolicy on the
// address it is about to connect to, after looking up host names with the
// Factory's Resolver; New also rejects a Spec whose host (or DNS server)
// is an IP address the policy denies. Redirects are followed only by
// probes whose spec asks (HTTPSpec.FollowRedirects), each hop dialled
// through the same dialer.
//
// A Factory is safe for concurrent use. The zero Factory is ready to use and
// behaves like one from NewFactory; a Factory must not be copied after first
// use.
type Factory struct {
	egress   *EgressPolicy // nil means DefaultEgressPolicy; never modified once set
	resolver Resolver      // nil means net.DefaultResolver

	// rootCAs verifies TLS servers; nil means the system roots. dial, when
	// set, replaces the guarded dialer's connect step (the policy has been
	// checked by then). Only tests set them, before first use.
	rootCAs *x509.CertPool
	dial    func(ctx context.Context, network, address string) (net.Conn, error)

	once      sync.Once
	dialer    *guardedDialer
	transport *http.Transport
	client    *http.Client

	leanMu sync.Mutex // protects lean
	lean   map[*leanProber]struct{}

	// keptMax bounds the connections http:// probers keep between probes,
	// all together; kept counts them.
	keptMax int64
	kept    atomic.Int64
	rank    keepRank // which probers keep theirs when not all can

	async asyncState // the loop of asynchronous http:// probes
}

// FactoryOptions configure NewFactoryWith. The zero FactoryOptions give a
// Factory like NewFactory's.
type FactoryOptions struct {
	// Egress decides which addresses probes may connect to. If nil,
	// DefaultEgressPolicy() is used. The Factory keeps a copy: changing
	// the policy afterwards does not affect it.
	Egress *EgressPolicy
	// Resolver looks up the host names of every probe kind. If nil,
	// net.DefaultResolver is used.
	Resolver Resolver
	// MaxIdleConns bounds the connections kept open between probes, by
	// the http:// probers together and by the shared https pool: past it,
	// a probe closes its connection and the next one dials. If 0, three
	// quarters of the process's open-file limit (so that a fleet larger
	// than the limit still probes, dialing each time, instead of failing
	// with "too many open files"); negative keeps none.
	MaxIdleConns int
}

// NewFactory returns a Factory that verifies TLS servers against the system
// roots and denies probes the addresses of DefaultEgressPolicy.
func NewFactory() *Factory {
	return &Factory{}
}

// NewFactoryWith returns a Factory configured by opts.
func NewFactoryWith(opts FactoryOptions) *Factory {
	f := &Factory{resolver: opts.Resolver, keptMax: int64(opts.MaxIdleConns)}
	if opts.Egress != nil {
		f.egress = opts.Egress.clone()
	}
	return f
}

// init builds the dialer, the shared transport and the client on first use.
func (f *Factory) init() {
	f.once.Do(func() {
		if f.egress == nil {
			f.egress = DefaultEgressPolicy()
		}
		if f.resolver == nil {
			f.resolver = net.DefaultResolver
		}
		switch {
		case f.keptMax < 0:
			f.keptMax = 0
		case f.keptMax == 0:
			f.keptMax = defaultMaxIdle(openFileLimit())
		}
		f.dialer = newGuardedDialer(f.egress, f.resolver)
		if f.dial != nil {
			f.dialer.dial = f.dial
		}
		f.transport = &http.Transport{
			Proxy:              nil, // probe the target itself, whatever HTTP_PROXY says
			DialContext:        f.dialer.DialContext,
			TLSClientConfig:    f.tlsConfig(),
			ForceAttemptHTTP2:  true, // needed, with a DialContext of our own, for HTTP/2 over TLS
			DisableCompression: true,
			// No limit on the whole pool: a bound below the number of
			// targets closes the least recently used connection before
			// its target's next probe, so past it every probe dials. A
			// target probes once at a time and keeps at most one idle
			// connection, so the pool holds about one descriptor per
			// target it serves, and a few more per host for targets that
			// share one; IdleConnTimeout gives back those of targets
			// probed less often than that (or removed).
			// The Factory's bound keeps a fleet larger than the open-file
			// limit probing.
			MaxIdleConns:        int(f.keptMax),
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     2 * time.Minute,
		}
		f.lean = make(map[*leanProber]struct{})
		f.client = &http.Client{
			Transport: f.transport,
			// A redirect is an answer like any other: report its status.
			// Following it would also reach an address nobody checked
			// when the target was added.
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	})
}

// defaultMaxIdle is three quarters of an open-file limit: the rest is
// for connections in flight, pulsed's clients and its files. An unknown
// limit keeps at most 4,096 and none is kept past a million.
func defaultMaxIdle(limit uint64) int64 {
	switch {
	case limit == 0:
		return 4096
	case limit > 1<<20:
		return 3 << 18
	}
	return max(int64(limit*3/4), 1)
}

// keep reserves room for one kept connection, and reports whether there
// was any.
func (f *Factory) keep() bool {
	if f.kept.Add(1) > f.keptMax {
		f.kept.Add(-1)
		return false
	}
	return true
}

// KeptConns returns how many connections the http:// probers keep open
// between probes now, the most they may (FactoryOptions.MaxIdleConns, by
// default three quarters of the open-file limit), and the process's
// open-file limit (0 when unknown). Past the most, a probe dials for
// itself and closes its connection after.
func (f *Factory) KeptConns() (kept, most int64, fileLimit uint64) {
	f.init()
	return f.kept.Load(), f.keptMax, openFileLimit()
}

// OpenFileLimit returns the process's soft limit on open files (Go raises
// it to the hard limit at start), or 0 if unknown.
func OpenFileLimit() uint64 { return openFileLimit() }

// unkeep gives back the room of a kept connection.
func (f *Factory) unkeep() { f.kept.Add(-1) }

// tlsConfig returns a new TLS client configuration for one connection pool.
func (f *Factory) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: f.rootCAs, MinVersion: tls.VersionTLS12}
}

// New validates s and returns a Prober for it. When s is invalid, or its
// host is an IP address the Factory's EgressPolicy denies, it returns a
// *FieldError (see EgressPolicy.CheckSpec).
//
// The Prober is safe for concurrent use and keeps no reference to s. A gRPC
// Prober holds its own *grpc.ClientConn, reused between probes, and an
// HTTP Prober for an http:// URL keeps its own connection to the target
// between probes (see newHTTPProber); both implement io.Closer, and the
// caller must Close them when the target is removed. Other HTTP Probers
// (https://) share the Factory's connection pool, and TCP Probers hold
// nothing; they too implement io.Closer or not as documented here, so
// callers should close every Prober that implements it.
func (f *Factory) New(s Spec) (Prober, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	f.init()
	if err := f.egress.checkSpec(s); err != nil {
		return nil, err
	}
	switch {
	case s.HTTP != nil:
		return f.newHTTPProber(s.HTTP)
	case s.TCP != nil:
		return f.newTCPProber(s.TCP)
	case s.DNS != nil:
		return newDNSProber(s.DNS, f.dialer), nil
	default:
		return newGRPCProber(s.GRPC, f.tlsConfig(), f.rootCAs, f.dialer)
	}
}

// Close closes the idle connections of the shared HTTP transport and the
// connections http:// Probers keep between probes, and ends their
// asynchronous probes (see leanProber.ProbeAsync). It is idempotent.
// Probers built earlier keep working (they open new connections as
// needed); gRPC Probers are not affected and must be closed on their own.
func (f *Factory) Close() {
	f.init()
	f.closeAsync()
	f.transport.CloseIdleConnections()
	f.leanMu.Lock()
	probers := make([]*leanProber, 0, len(f.lean))
	for p := range f.lean {
		probers = append(probers, p)
	}
	f.leanMu.Unlock()
	for _, p := range probers { // not under leanMu: closeIdle takes p.mu
		p.closeIdle()
	}
}

// remember records p, so that Close can close its kept connection.
func (f *Factory) remember(p *leanProber) {
	f.rank.join(&p.period)
	f.leanMu.Lock()
	f.lean[p] = struct{}{}
	f.leanMu.Unlock()
}

// forget drops p, closed, from the Probers Close reaches.
func (f *Factory) forget(p *leanProber) {
	f.leanMu.Lock()
	_, ok := f.lean[p]
	delete(f.lean, p)
	f.leanMu.Unlock()
	if ok {
		f.rank.leave(&p.period)
	}
}

// OwnFault reports whether err is the checker's own failure rather than
// the target's answer: the probe could not open a socket because the
// process (EMFILE) or the system (ENFILE) has no file descriptor free. Such
// a probe says nothing about its target.
func OwnFault(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// withContext returns err, made to satisfy errors.Is(err, ctx.Err()) when
// ctx has ended and err does not already say so. Its text stays err's.
func withContext(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return &contextError{ctxErr: cerr, err: err}
	}
	return err
}

// contextError is an error that happened because its context ended.
type contextError struct {
	ctxErr error
	err    error
}

// Error returns the underlying error's text.
func (e *contextError) Error() string { return e.err.Error() }

// Unwrap returns both the context's error and the underlying one.
func (e *contextError) Unwrap() []error { return []error{e.ctxErr, e.err} }

// maxDescription is the most bytes Describe returns.
const maxDescription = 200

// Describe turns an error returned by a Prober into short text for a person:
// "timeout" when the deadline passed, "canceled", "connection refused",
// "status 503", a gRPC serving status such as "NOT_SERVING", the
// *EgressError's text ("... denied by egress policy (deny 169.254.0.0/16)")
// when the policy stopped the probe, and otherwise the error's own text
// without Go's "Get \"url\": dial tcp addr:" prefixes and gRPC's transport
// wrapping. Describe(nil) is "".
//
// The text is safe to show anyone who may see the target's state: it is at
// most maxDescription bytes of printable UTF-8 (longer text ends in "...",
// control characters become spaces or "?"), and it never quotes what a
// server sent beyond a gRPC status message, so an HTTP probe aimed at a
// gRPC port says "malformed HTTP response (not HTTP?)", not the bytes.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	return tidy(describe(err))
}

// describe is Describe before tidying.
func describe(err error) string {
	var (
		statusErr  *StatusError
		servingErr *servingError
		egressErr  *EgressError
		netErr     net.Error
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &statusErr):
		return statusErr.Error()
	case errors.As(err, &servingErr):
		return servingErr.Error()
	case errors.As(err, &egressErr):
		return egressErr.Error()
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK {
		return describeStatus(st)
	}
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection closed by the server"
	}
	return withoutEcho(goNoiseless(err))
}

// withoutEcho drops the bytes net/http and net/textproto quote from a
// response they could not parse: `net/http: HTTP/1.x transport connection
// broken: malformed HTTP response "\x00\x00\x06..."` becomes "malformed
// HTTP response (not HTTP?)", and `malformed MIME header line: <line>`
// becomes "malformed MIME header line". It also names net/http's
// "readLoopPeekFailLocked: %!w(<nil>)", which is what a server that speaks
// first (a gRPC server sends its settings at once) may get instead.
func withoutEcho(msg string) string {
	if i := strings.Index(msg, "remote error: tls: "); i >= 0 {
		// A TLS 1.3 server refuses a client certificate after the
		// handshake: net/http meets the alert as it waits for an answer.
		return msg[i:]
	}
	if strings.Contains(msg, "readLoopPeekFailLocked") {
		return "unsolicited response (not HTTP?)"
	}
	i := strings.Index(msg, "malformed ")
	if i < 0 {
		return msg
	}
	msg = msg[i:]
	if j := strings.IndexAny(msg, `":`); j >= 0 {
		msg = strings.TrimSpace(msg[:j])
	}
	if msg == "malformed HTTP response" {
		msg += " (not HTTP?)"
	}
	return msg
}

// tidy trims s and makes it safe to show: tabs and line breaks become
// spaces, other control and non-printable characters and invalid UTF-8
// become '?', and text longer than maxDescription bytes is cut to end in
// "...".
func tidy(s string) string {
	s = strings.TrimSpace(s)
	var b strings.Builder
	cut := false
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			r = ' '
		case r == utf8.RuneError || !unicode.IsPrint(r):
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > maxDescription {
			cut = true
			break
		}
		b.WriteRune(r)
	}
	out := b.String()
	if cut {
		end := min(maxDescription-len("..."), len(out))
		for end > 0 && end < len(out) && !utf8.RuneStart(out[end]) {
			end--
		}
		out = out[:end] + "..."
	}
	return out
}

// goNoiseless returns err's text without the request and socket addresses
// that net/http and net put in front of the cause.
func goNoiseless(err error) string {
	for {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.Name != "" {
			return "lookup " + dnsErr.Name + ": " + dnsErr.Err
		}
		switch e := err.(type) {
		case *contextError:
			err = e.err
		case *url.Error:
			err = e.Err
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		default:
			return err.Error()
		}
	}
}

// describeStatus shortens a gRPC status: "Code: message", where the message
// loses the transport's "connection error: desc = ..." wrapping, and
// Unavailable shows only the cause.
func describeStatus(st *status.Status) string {
	if st.Code() == codes.DeadlineExceeded {
		return "timeout"
	}
	msg := st.Message()
	if strings.Contains(msg, "connection refused") {
		return "connection refused"
	}
	for _, prefix := range []string{
		"last connection error: ",
		"connection error: ",
		"desc = ",
		`"`,
		"transport: ",
		"Error while dialing: ",
		"authentication handshake failed: ",
	} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	if rest, ok := strings.CutPrefix(msg, "dial "); ok {
		// "dial tcp 10.0.0.5:50051: connect: no route to host"
		if _, cause, ok := strings.Cut(rest, ": "); ok {
			msg = strings.TrimPrefix(cause, "connect: ")
		}
	}
	msg = strings.TrimSpace(strings.TrimSuffix(msg, `"`))
	if st.Code() == codes.Unavailable && msg != "" {
		return msg
	}
	return st.Code().String() + ": " + msg
}
