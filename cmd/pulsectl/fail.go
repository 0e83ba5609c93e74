package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker/probe"
	pulse "github.com/pulsehealth/pulse/client"
)

// fail reports a failed call and returns its exit code. name is the target
// the call was about, for NOT_FOUND; empty when none.
func (c *client) fail(e *env, err error, name string) int {
	st := status.Convert(err)
	st = status.New(st.Code(), cliHint(escape(st.Message()), name))
	switch st.Code() {
	case codes.Unavailable:
		if strings.Contains(st.Message(), "store") { // pulsed answered: its store cannot write
			e.errorf("pulsed at %s cannot answer now: %s", c.addr, st.Message())
			return exitServer
		}
		return c.unreachable(e, err)
	case codes.DeadlineExceeded:
		return c.noAnswer(e, err)
	case codes.Canceled:
		e.errorf("canceled")
		return exitServer
	case codes.NotFound:
		if name != "" {
			e.errorf("no target named %q (pulsectl ls lists them)", name)
		} else {
			e.errorf("%s", st.Message())
		}
		return exitNotFound
	case codes.Unauthenticated, codes.PermissionDenied:
		e.errorf("pulsed at %s refused the call: %s\n%s", c.addr, st.Message(), c.tokenHint(st.Code()))
		return exitRefused
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		// The server's message starts with the field to fix.
		e.errorf("%s", st.Message())
		return exitUsage
	default:
		e.errorf("pulsed at %s answered %s: %s", c.addr, st.Code(), st.Message())
		return exitServer
	}
}

// tokenHint says what to change for a token pulsed refused with code,
// naming the token by where it came from. UNAUTHENTICATED is no token or
// one pulsed does not know: another token is the fix. PERMISSION_DENIED
// is a token pulsed knows whose role does not allow the call: a token
// with another role is.
func (c *client) tokenHint(code codes.Code) string {
	token, known := c.tokenSource()
	switch {
	case code == codes.PermissionDenied && token != "":
		return fmt.Sprintf("pulsed knows %s, but its role does not allow this call: pass a token with the role this command needs.", token)
	case code == codes.PermissionDenied:
		return "pulsed knows the token, but its role does not allow this call: pass a token with the role this command needs."
	case token != "":
		return fmt.Sprintf("pulsed does not know %s: pass a token listed in pulsed's -token-file.", token)
	case known:
		return "pulsectl sent no token: pass one listed in pulsed's -token-file with --token-file, PULSE_TOKEN or a config context's token-file."
	default:
		return "Pass a token listed in pulsed's -token-file with --token-file, PULSE_TOKEN or a config context's token-file."
	}
}

// tokenSource names the token pulsectl sent by where it came from: "the
// token from flag --token", "the token from env PULSE_TOKEN", "the token
// in FILE (from flag --token-file)", "the token in FILE (from config PATH
// (context prod))"; "" when it sent none. known is false when the
// settings are not known.
func (c *client) tokenSource() (token string, known bool) {
	if c.cf == nil || c.cf.sources == nil {
		return "", false
	}
	if src := c.cf.sources["token"]; src != "" {
		return "the token from " + src, true
	}
	if src := c.cf.sources["token-file"]; src != "" && c.cf.conn.TokenFile != "" {
		return fmt.Sprintf("the token in %s (from %s)", c.cf.conn.TokenFile, src), true
	}
	return "", true
}

// refused reports whether err is one no retry can fix until the settings
// change: pulsed refused the token, or the TLS handshake failed for a
// certificate or for TLS on one side only. It reads err's message only;
// fail may learn more (see unreachable).
func (c *client) refused(err error) bool {
	switch st := status.Convert(err); st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	case codes.Unavailable, codes.DeadlineExceeded:
		kind, _ := readHandshake(st.Message(), c.tlsOn())
		return kind != handshakeOK
	}
	return false
}

// unreachable reports a call that found no pulsed to answer it. A TLS
// handshake that failed for a certificate, or for TLS on one side only,
// is exitRefused; anything else (a refused connection, a reset) may pass,
// and is exitServer.
//
// gRPC's message does not always say why a connection closed: TLS 1.3
// refuses a client certificate after the client's side of the handshake is
// done, so the call may meet a broken pipe before pulsed's alert arrives,
// and a pulsed that speaks TLS closes a plaintext connection without a
// word. For those, one TLS handshake made to see why tells.
func (c *client) unreachable(e *env, err error) int {
	msg := status.Convert(err).Message()
	kind, said := readHandshake(msg, c.tlsOn())
	checked := false
	if kind == handshakeOK && closedEarly(msg) {
		kind, said = c.checkHandshake()
		checked = true
	}
	if kind == handshakeOK {
		e.errorf("cannot reach pulsed at %s: %s\n%s", c.addr, probe.Describe(err), c.unreachableHint())
		return exitServer
	}
	c.handshakeFailed(e, kind, said)
	if checked {
		fmt.Fprintf(e.stderr, "(The call saw only \"%s\"; a TLS handshake made to see why got the answer above.)\n", escape(probe.Describe(err)))
	}
	return exitRefused
}

// noAnswer reports a call that did not end within its bound. When no
// connection was made in time (connectFirst's bound ran out, or gRPC had
// not received pulsed's HTTP/2 preface), pulsed may not be running there;
// when one was, pulsed is running, and the hint says what tells whether
// it is stalled.
func (c *client) noAnswer(e *env, err error) int {
	msg := status.Convert(err).Message()
	if kind, said := readHandshake(msg, c.tlsOn()); kind != handshakeOK {
		c.handshakeFailed(e, kind, said)
		return exitRefused
	}
	within := c.bound()
	var nc *noConnection
	if errors.As(err, &nc) {
		within = nc.within
	}
	if nc != nil || strings.Contains(msg, "waiting for connections to become ready") || strings.HasPrefix(msg, "latest balancer error") {
		e.errorf("no connection to pulsed at %s within %v: nothing answered, or the TLS or HTTP/2 handshake did not finish\n%s", c.addr, within, c.unreachableHint())
		return exitServer
	}
	e.errorf("pulsed at %s accepted the connection but did not answer within %v: it may be stalled or overloaded\n%s", c.addr, within, stalledHint)
	return exitServer
}

// bound returns the time the last call was given: the bound of its
// context (callCtx, listCtx, writeCtx), or the command's when that is
// shorter.
func (c *client) bound() time.Duration {
	d := cmp.Or(c.timeout, callTimeout)
	if c.limit > 0 {
		d = min(d, c.limit)
	}
	return d
}

// stalledHint is what tells whether a pulsed that does not answer calls is
// stalled: what pulsed says of its own liveness.
const stalledHint = `pulsed's /healthz (on its -http-listen address, 127.0.0.1:9090 by default) answers 503 naming the stalled part, and its log says "pulsed is not live: ..." while a part is stalled; /readyz says whether it is starting or shutting down.`

// unreachableHint is what to try when pulsed at c.addr does not answer.
// 'make run' serves the default address only: an address the user gave
// (flag, environment, context) is theirs to check.
func (c *client) unreachableHint() string {
	if c.addrSource == "" || c.addrSource == "default" {
		return "Is pulsed running? Start it with 'make run', or point --addr at it."
	}
	return fmt.Sprintf("Is pulsed running there? The address came from %s; 'pulsectl config view' shows the settings in force.", c.addrSource)
}

// handshakeKind is how a TLS handshake with pulsed failed, for good.
type handshakeKind int

const (
	handshakeOK        handshakeKind = iota // it did not fail, or not in a way a retry cannot fix
	handshakeRefused                        // pulsed refused pulsectl's client certificate, or its lack of one
	handshakeUntrusted                      // pulsectl does not accept pulsed's certificate
	handshakeNotTLS                         // pulsectl speaks TLS, pulsed does not
	handshakeWantsTLS                       // pulsed speaks TLS, pulsectl does not
)

// readHandshake finds in a gRPC error's message a TLS handshake that
// failed for good, and returns its kind and what it said, e.g. "remote
// error: tls: certificate required". A handshake that failed otherwise (a
// reset, a timeout, a connection closed at accept) is handshakeOK: a retry
// may get through.
func readHandshake(msg string, tlsOn bool) (handshakeKind, string) {
	cut := func(i int) string {
		// gRPC quotes the transport's error: `desc = "transport: ... \"x\" ..."`.
		return strings.ReplaceAll(strings.TrimSuffix(msg[i:], `"`), `\"`, `"`)
	}
	if i := strings.Index(msg, "remote error: tls: "); i >= 0 && tlsOn {
		return handshakeRefused, cut(i)
	}
	if i := strings.Index(msg, "tls: failed to verify certificate: "); i >= 0 {
		return handshakeUntrusted, cut(i)
	}
	if i := strings.Index(msg, "x509: "); i >= 0 {
		return handshakeUntrusted, cut(i)
	}
	if i := strings.Index(msg, "tls: first record does not look like a TLS handshake"); i >= 0 {
		return handshakeNotTLS, cut(i)
	}
	return handshakeOK, ""
}

// closedEarly reports whether a connection error says only that the
// connection closed, not why.
func closedEarly(msg string) bool {
	return strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.HasSuffix(strings.TrimSuffix(msg, `"`), "EOF")
}

// handshakeFailed says how the TLS handshake with pulsed failed, and what
// to change.
func (c *client) handshakeFailed(e *env, kind handshakeKind, said string) {
	said = escape(said)
	var hint string
	switch kind {
	case handshakeRefused:
		e.errorf("pulsed at %s refused the TLS handshake: %s", c.addr, said)
		switch {
		case !strings.Contains(said, "certificate") && !strings.Contains(said, "handshake failure"):
			hint = "Check pulsectl's TLS settings (--tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name); 'pulsectl config view' shows them and where each came from."
		case c.setting("tls-cert") == "":
			hint = "pulsed asks for a client certificate (its -client-ca) and pulsectl sent none: pass one that CA signed with --tls-cert and --tls-key (or PULSE_CERT and PULSE_KEY)."
		default:
			hint = fmt.Sprintf("pulsed did not accept the client certificate %s%s: it must be signed by a CA of pulsed's -client-ca, for client authentication, and be valid now.", c.setting("tls-cert"), c.from("tls-cert"))
		}
	case handshakeUntrusted:
		e.errorf("pulsectl does not accept the certificate of pulsed at %s: %s", c.addr, said)
		switch {
		case strings.Contains(said, "unknown authority") && c.setting("tls-ca") != "":
			hint = fmt.Sprintf("The CA file %s%s did not sign it: pass the CA that signed pulsed's -tls-cert with --tls-ca.", c.setting("tls-ca"), c.from("tls-ca"))
		case strings.Contains(said, "unknown authority"):
			hint = "pulsectl checked it against the system's CAs: pass the CA that signed pulsed's -tls-cert with --tls-ca (or PULSE_CACERT)."
		case strings.Contains(said, "valid for") || strings.Contains(said, "wanted to match") || strings.Contains(said, "SANs"):
			hint = "It does not name the host pulsectl checked it for (the address's, or --tls-server-name's): set --tls-server-name to a name it carries."
		case strings.Contains(said, "expired or is not yet valid"):
			hint = "It is expired or not yet valid: renew pulsed's -tls-cert, or check both machines' clocks."
		default:
			hint = "Check --tls-ca and --tls-server-name; 'pulsectl config view' shows them and where each came from."
		}
	case handshakeNotTLS:
		e.errorf("pulsed at %s does not speak TLS, and pulsectl connected with TLS: %s", c.addr, said)
		hint = "Connect without --tls, --tls-ca and --tls-cert ('pulsectl config view' shows where each came from), or start pulsed with -tls-cert and -tls-key."
	case handshakeWantsTLS:
		e.errorf("pulsed at %s speaks TLS, and pulsectl connected without it", c.addr)
		hint = "Pass the CA that signed pulsed's certificate with --tls-ca (or PULSE_CACERT), or --tls to check it against the system's CAs."
	}
	fmt.Fprintln(e.stderr, hint)
}

// tlsOn reports whether pulsectl connects with TLS.
func (c *client) tlsOn() bool {
	return c.cf != nil && c.cf.conn.TLSOn()
}

// setting returns the value in force of a TLS setting: "tls-ca",
// "tls-cert"; "" when unset or unknown.
func (c *client) setting(name string) string {
	if c.cf == nil {
		return ""
	}
	switch name {
	case "tls-ca":
		return c.cf.conn.CA
	case "tls-cert":
		return c.cf.conn.Cert
	}
	return ""
}

// from is " (from <source>)" for a setting whose source is known.
func (c *client) from(name string) string {
	if c.cf == nil || c.cf.sources[name] == "" {
		return ""
	}
	return " (from " + c.cf.sources[name] + ")"
}

// handshakeCheckTimeout bounds checkHandshake, every address included.
const handshakeCheckTimeout = 2 * time.Second

// checkHandshake makes a TLS handshake with pulsed, as gRPC would, to learn
// why a connection closed: with pulsectl's TLS settings, or, when it
// connects in plaintext, only to learn whether pulsed speaks TLS. It sends
// nothing after the handshake, and waits for pulsed's first bytes: pulsed
// sends its HTTP/2 settings to a client it accepted, and a TLS 1.3 alert to
// one whose certificate it refused. It tries each address until one says
// why, and returns handshakeOK when none does.
func (c *client) checkHandshake() (handshakeKind, string) {
	if c.cf == nil {
		return handshakeOK, ""
	}
	tlsOn := c.tlsOn()
	cfg := &tls.Config{
		// Plaintext: only whether pulsed answers in TLS matters, and
		// nothing is sent after the handshake, so its certificate is not
		// checked.
		InsecureSkipVerify: true,
	}
	if tlsOn {
		var err error
		if cfg, err = (pulse.TLSFiles{CA: c.cf.conn.CA, Cert: c.cf.conn.Cert, Key: c.cf.conn.Key, ServerName: c.cf.conn.ServerName}).Config(); err != nil {
			return handshakeOK, ""
		}
	}
	cfg.NextProtos = []string{"h2"} // gRPC's, which a gRPC server requires
	addrs := c.cf.addrs()
	if cfg.ServerName == "" && len(addrs) > 0 {
		// gRPC checks every replica's certificate against the first
		// address's host.
		_, _, cfg.ServerName, _ = dialTarget(addrs[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeCheckTimeout)
	defer cancel()
	for _, a := range addrs {
		network, address, _, ok := dialTarget(a)
		if !ok {
			continue
		}
		kind, said := handshakeWith(ctx, network, address, cfg, tlsOn)
		if kind != handshakeOK {
			return kind, said
		}
	}
	return handshakeOK, ""
}

// handshakeWith makes one TLS handshake with cfg and reads pulsed's first
// bytes; see checkHandshake.
func handshakeWith(ctx context.Context, network, address string, cfg *tls.Config, tlsOn bool) (handshakeKind, string) {
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, network, address)
	if err != nil {
		if !tlsOn {
			if strings.Contains(err.Error(), "remote error: tls: ") {
				return handshakeWantsTLS, "" // it answered in TLS
			}
			return handshakeOK, ""
		}
		return readHandshake(err.Error(), tlsOn)
	}
	defer conn.Close()
	if !tlsOn {
		return handshakeWantsTLS, ""
	}
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(deadline)
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return readHandshake(err.Error(), tlsOn)
	}
	return handshakeOK, ""
}

// dialTarget returns how to dial an address of pulsed, and the host gRPC
// names it by: host:port, dns:///host:port, passthrough:///host:port or
// unix:PATH. ok is false for a scheme it does not know.
func dialTarget(a string) (network, address, host string, ok bool) {
	if u, err := url.Parse(a); err == nil && u.Scheme != "" && resolver.Get(u.Scheme) != nil {
		switch u.Scheme {
		case "unix":
			path := u.Opaque
			if path == "" {
				path = u.Path
			}
			return "unix", path, "localhost", true
		case "dns", "passthrough":
			a = u.Opaque
			if a == "" {
				a = strings.TrimPrefix(u.Path, "/")
			}
		default:
			return "", "", "", false
		}
	}
	host, _, err := net.SplitHostPort(a)
	if err != nil {
		return "", "", "", false
	}
	return "tcp", a, host, true
}
