package probe

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"time"
)

// Limits on a TCPSpec's steps, checked by Validate.
const (
	// MaxTCPSteps bounds TCPSpec.Steps.
	MaxTCPSteps = 16
	// MaxTCPSendLen bounds what one step sends, in bytes (after hex
	// decoding).
	MaxTCPSendLen = 4096
	// MaxTCPReadLimit bounds TCPStep.ReadLimit, in bytes.
	MaxTCPReadLimit = 64 << 10
	// DefaultTCPReadLimit is TCPStep.ReadLimit when it is 0.
	DefaultTCPReadLimit = 4 << 10
)

// TCPStep is one step of a TCP conversation: exactly one of its send and
// expect fields is set.
type TCPStep struct {
	// Send writes this text; SendHex writes the bytes these hex digits
	// spell ("2a310d0a" or "2a 31 0d 0a").
	Send    string `json:",omitzero"`
	SendHex string `json:",omitzero"`
	// Expect awaits exactly these bytes next, and ExpectHex the bytes
	// these hex digits spell (a binary greeting such as MySQL's);
	// ExpectContains awaits bytes that contain this text; ExpectRegex
	// awaits bytes that match this RE2 regular expression. What they
	// match, and what came before it, is consumed; later bytes are left to
	// the next step.
	Expect         string `json:",omitzero"`
	ExpectHex      string `json:",omitzero"`
	ExpectContains string `json:",omitzero"`
	ExpectRegex    string `json:",omitzero"`
	// ReadLimit bounds the bytes an expect step reads looking for its
	// match, at most MaxTCPReadLimit. Zero means DefaultTCPReadLimit.
	ReadLimit int `json:",omitzero"`
}

// validate checks a TCP spec.
func (s *TCPSpec) validate() error {
	if err := validateHostPort("tcp.address", s.Address); err != nil {
		return err
	}
	if len(s.Steps) > MaxTCPSteps {
		return &FieldError{Field: "tcp.steps", Reason: fmt.Sprintf("must be at most %d steps, got %d", MaxTCPSteps, len(s.Steps))}
	}
	for i := range s.Steps {
		if err := s.Steps[i].validate(fmt.Sprintf("tcp.steps[%d]", i)); err != nil {
			return err
		}
	}
	if s.TLS != nil {
		return s.TLS.validate("tcp.tls")
	}
	return nil
}

// validate checks one step; field is its path.
func (st *TCPStep) validate(field string) error {
	bad := func(sub, format string, args ...any) error {
		f := field
		if sub != "" {
			f += "." + sub
		}
		return &FieldError{Field: f, Reason: fmt.Sprintf(format, args...)}
	}
	var set []string
	for _, f := range []struct{ name, v string }{
		{"send", st.Send}, {"send_hex", st.SendHex}, {"expect", st.Expect}, {"expect_hex", st.ExpectHex},
		{"expect_contains", st.ExpectContains}, {"expect_regex", st.ExpectRegex},
	} {
		if f.v != "" {
			set = append(set, f.name)
		}
	}
	switch len(set) {
	case 0:
		return bad("", "set one of send, send_hex, expect, expect_hex, expect_contains or expect_regex; an empty step sends and awaits nothing")
	case 1:
	default:
		return bad("", "set one of send, send_hex, expect, expect_hex, expect_contains or expect_regex; got %s", strings.Join(set, " and "))
	}
	if len(st.Send) > MaxTCPSendLen {
		return bad("send", "must be at most %d bytes, got %d", MaxTCPSendLen, len(st.Send))
	}
	if st.SendHex != "" {
		b, err := decodeHex(st.SendHex)
		if err != nil {
			return bad("send_hex", "%v", err)
		}
		if len(b) > MaxTCPSendLen {
			return bad("send_hex", "must be at most %d bytes once decoded, got %d", MaxTCPSendLen, len(b))
		}
	}
	if st.ExpectHex != "" {
		b, err := decodeHex(st.ExpectHex)
		if err != nil {
			return bad("expect_hex", "%v", err)
		}
		if len(b) > MaxPatternLen {
			return bad("expect_hex", "must be at most %d bytes once decoded, got %d", MaxPatternLen, len(b))
		}
		if len(b) > st.readLimit() {
			return bad("read_limit", "must be at least the length of expect_hex (%d bytes), got %d", len(b), st.ReadLimit)
		}
	}
	for _, f := range []struct{ name, v string }{{"expect", st.Expect}, {"expect_contains", st.ExpectContains}, {"expect_regex", st.ExpectRegex}} {
		if len(f.v) > MaxPatternLen {
			return bad(f.name, "must be at most %d bytes, got %d", MaxPatternLen, len(f.v))
		}
	}
	if st.ExpectRegex != "" {
		if _, err := regexp.Compile(st.ExpectRegex); err != nil {
			return bad("expect_regex", "is not a valid RE2 regular expression: %v", err)
		}
	}
	if st.ReadLimit < 0 || st.ReadLimit > MaxTCPReadLimit {
		return bad("read_limit", "must be between 0 (%d bytes) and %d bytes, got %d", DefaultTCPReadLimit, MaxTCPReadLimit, st.ReadLimit)
	}
	if st.Expect != "" && len(st.Expect) > st.readLimit() {
		return bad("read_limit", "must be at least the length of expect (%d bytes), got %d", len(st.Expect), st.ReadLimit)
	}
	return nil
}

// readLimit is the step's read limit with its default.
func (st *TCPStep) readLimit() int {
	if st.ReadLimit == 0 {
		return DefaultTCPReadLimit
	}
	return st.ReadLimit
}

// decodeHex decodes hex digits, ignoring spaces between them.
func decodeHex(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		return nil, fmt.Errorf("is not hex digits such as \"2a310d0a\": %v", err)
	}
	return b, nil
}

// tcpStep is a validated TCPStep, ready to run.
type tcpStep struct {
	send    []byte // nil for an expect step
	exact   []byte
	substr  []byte
	re      *regexp.Regexp
	limit   int
	display string // the expectation as the spec wrote it, for errors
}

// tcpProber connects to address and runs its steps. It holds no
// connection between probes and is safe for concurrent use.
type tcpProber struct {
	address string
	host    string
	dialer  *guardedDialer
	steps   []tcpStep
	tls     *tlsSource // nil: plain TCP
	expiry  expiryWatch
}

// newTCPProber builds a prober for a validated spec.
func (f *Factory) newTCPProber(s *TCPSpec) (*tcpProber, error) {
	p := &tcpProber{address: s.Address, dialer: f.dialer}
	p.host, _, _ = net.SplitHostPort(s.Address)
	for _, st := range s.Steps {
		ts := tcpStep{limit: st.readLimit()}
		switch {
		case st.Send != "":
			ts.send = []byte(st.Send)
		case st.SendHex != "":
			ts.send, _ = decodeHex(st.SendHex) // validated
		case st.Expect != "":
			ts.exact, ts.display = []byte(st.Expect), fmt.Sprintf("%q", st.Expect)
		case st.ExpectHex != "":
			ts.exact, _ = decodeHex(st.ExpectHex) // validated
			ts.display = "hex " + hex.EncodeToString(ts.exact)
		case st.ExpectContains != "":
			ts.substr, ts.display = []byte(st.ExpectContains), fmt.Sprintf("%q", st.ExpectContains)
		default:
			ts.re, ts.display = regexp.MustCompile(st.ExpectRegex), "/"+st.ExpectRegex+"/"
		}
		p.steps = append(p.steps, ts)
	}
	if s.TLS != nil {
		src, err := newTLSSource("tcp.tls", s.TLS, f.rootCAs)
		if err != nil {
			return nil, err
		}
		p.tls = src
		p.expiry.src = src
	}
	return p, nil
}

// KeepsConn reports false: every TCP probe dials a new connection (see
// the checker's ConnKeeper).
func (p *tcpProber) KeepsConn() bool { return false }

// Probe connects to the address under ctx, makes the TLS handshake when
// asked to, runs the steps and closes the connection.
func (p *tcpProber) Probe(ctx context.Context) error {
	conn, err := p.dialer.DialContext(ctx, "tcp", p.address)
	if err != nil {
		return withContext(ctx, err)
	}
	defer conn.Close() // the answer is in; a close error says nothing about the target
	if p.tls != nil {
		tc, err := p.tls.handshake(ctx, conn, p.host, nil)
		if err != nil {
			return withContext(ctx, err)
		}
		conn = tc
		cs := tc.ConnectionState()
		if err := p.expiry.check(&cs, time.Now()); err != nil {
			return err
		}
	}
	if len(p.steps) == 0 {
		return nil
	}
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	var buf []byte // bytes read and not consumed yet
	for i, st := range p.steps {
		if st.send != nil {
			if _, err := conn.Write(st.send); err != nil {
				return withContext(ctx, fmt.Errorf("step %d: send: %w", i+1, err))
			}
			continue
		}
		var err error
		if buf, err = st.await(conn, buf); err != nil {
			var xe *ExpectError
			if errors.As(err, &xe) {
				xe.Text = fmt.Sprintf("step %d: %s", i+1, xe.Text)
				return err
			}
			return withContext(ctx, fmt.Errorf("step %d: awaiting %s: %w", i+1, st.display, err))
		}
	}
	return nil
}

// await reads from conn, after the bytes in buf, until the step's
// expectation is met, and returns the bytes after its match. Its failures
// are *ExpectErrors; a read error other than the end of the connection is
// returned as it is.
func (st *tcpStep) await(conn net.Conn, buf []byte) ([]byte, error) {
	chunk := make([]byte, 512)
	for {
		if end, done, err := st.match(buf); done {
			return buf[end:], err
		}
		if len(buf) >= st.limit {
			return nil, expectErrorf("%s not found in first %s", st.display, byteSize(st.limit))
		}
		n, err := conn.Read(chunk[:min(len(chunk), st.limit-len(buf))])
		buf = append(buf, chunk[:n]...)
		if err != nil {
			if end, done, merr := st.match(buf); done {
				return buf[end:], merr
			}
			if errors.Is(err, io.EOF) {
				return nil, expectErrorf("%s not found in %d bytes before the server closed the connection", st.display, len(buf))
			}
			return nil, err
		}
	}
}

// match looks for the expectation in buf: done once it is decided, with
// the end of the match and the error when it failed.
func (st *tcpStep) match(buf []byte) (end int, done bool, err error) {
	switch {
	case st.exact != nil:
		n := min(len(buf), len(st.exact))
		if !bytes.Equal(buf[:n], st.exact[:n]) {
			return 0, true, expectErrorf("expected %s, got different bytes", st.display)
		}
		return len(st.exact), n == len(st.exact), nil
	case st.substr != nil:
		if i := bytes.Index(buf, st.substr); i >= 0 {
			return i + len(st.substr), true, nil
		}
	default:
		if loc := st.re.FindIndex(buf); loc != nil {
			return loc[1], true, nil
		}
	}
	return 0, false, nil
}
