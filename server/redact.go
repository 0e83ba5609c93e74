package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Errors that quote a client's input, and the secrets a request carries:
// every error a call ends with goes through scrubError before it is logged
// or sent, so that neither the log nor the client's own error output
// holds a probe's credential or megabytes of echoed input.

// MaxQuoted bounds how many bytes of a client's input an error message
// quotes: past it the quote is cut and followed by "... (N bytes)".
const MaxQuoted = 128

// maxMessage bounds a whole error message, whatever it quotes.
const maxMessage = 4 << 10

// Masked stands for a secret in an error message or a log line, as
// net/url's URL.Redacted writes a password.
const Masked = "xxxxx"

// minBareSecret is the shortest secret masked outside the quotes of a
// message: a shorter one would mask words of the message itself. Inside
// quotes (where input is echoed) every secret is masked.
const minBareSecret = 4

// Quote returns s quoted as %q does, at most MaxQuoted bytes of it (cut at
// a rune boundary), followed by "... (N bytes)" when cut. Every error
// message that quotes a client's input quotes it with Quote.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// scrubMessage returns msg with each of secrets masked and every quoted
// string in it (as %q writes them) no longer than MaxQuoted bytes; the
// whole is cut at maxMessage bytes.
func scrubMessage(msg string, secrets []string) string {
	var b strings.Builder
	for rest := msg; rest != ""; {
		i := strings.IndexByte(rest, '"')
		if i < 0 {
			b.WriteString(maskBare(rest, secrets))
			break
		}
		b.WriteString(maskBare(rest[:i], secrets))
		rest = rest[i:]
		q, err := strconv.QuotedPrefix(rest)
		if err != nil { // a lone quote: the rest is not a quoted string
			b.WriteString(maskBare(rest, secrets))
			break
		}
		s, _ := strconv.Unquote(q)
		b.WriteString(Quote(mask(s, secrets)))
		rest = rest[len(q):]
	}
	out := b.String()
	if len(out) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = fmt.Sprintf("%s... (message cut at %d of %d bytes)", out[:cut], cut, len(out))
	}
	return out
}

// mask replaces every secret in s with Masked.
func mask(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Masked)
		}
	}
	return s
}

// maskBare is mask for text outside quotes: secrets shorter than
// minBareSecret stay.
func maskBare(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= minBareSecret {
			s = strings.ReplaceAll(s, sec, Masked)
		}
	}
	return s
}

// secretsOf returns the secrets req carries, longest first, each also in
// the escaped forms an error message may quote it in: a URL's password and
// its query values of secret names, header and gRPC metadata values, a
// request body and an inline TLS key.
func secretsOf(req any) []string {
	var t *pb.Target
	switch r := req.(type) {
	case *pb.AddTargetRequest:
		t = r.GetTarget()
	case *pb.UpdateTargetRequest:
		t = r.GetTarget()
	}
	var sc secretSet
	if h := t.GetHttp(); h != nil {
		sc.http(h.GetUrl(), h.GetHeaders(), h.GetBody())
		sc.add(h.GetTls().GetKeyPem())
	}
	if g := t.GetGrpc(); g != nil {
		sc.values(g.GetMetadata())
		sc.add(g.GetTlsOptions().GetKeyPem())
	}
	sc.add(t.GetTcp().GetTls().GetKeyPem())
	return sc.sorted()
}

// secretSet collects secrets, each in the forms a message may quote it in.
type secretSet []string

func (sc *secretSet) add(s string) {
	if u, err := url.PathUnescape(s); s == "" || err == nil && u == Redacted {
		return // the placeholder stands for a stored value: no secret
	}
	*sc = append(*sc, s)
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		*sc = append(*sc, q[1:len(q)-1])
	}
	if u, err := url.PathUnescape(s); err == nil && u != s {
		*sc = append(*sc, u)
	}
	if e := url.QueryEscape(s); e != s {
		*sc = append(*sc, e)
	}
}

func (sc *secretSet) values(m map[string]string) {
	for _, v := range m {
		sc.add(v)
	}
}

func (sc *secretSet) http(rawURL string, headers map[string]string, body string) {
	for _, s := range urlSecrets(rawURL) {
		sc.add(s)
	}
	sc.values(headers)
	sc.add(body)
}

// sorted returns the secrets longest first (so that a secret holding
// another is masked whole), without duplicates.
func (sc secretSet) sorted() []string {
	slices.SortFunc(sc, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(sc)
}

// ScrubTargetError returns err with its message scrubbed of t's secrets
// and its quotes bounded, as the API's errors are; errors.As and errors.Is
// still see err. For errors about a target read from a file, before they
// are printed or logged.
func ScrubTargetError(t *pb.Target, err error) error {
	return scrubbed(err, secretsOf(&pb.AddTargetRequest{Target: t}))
}

func scrubbed(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := scrubMessage(err.Error(), secrets)
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

// scrubbedError is an error whose message is scrubbed of its secrets.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// urlSecrets returns the password of raw's user info and the values of
// its query parameters whose names look secret (see SecretParam). raw
// need not parse: a URL refused for its port still has its password
// masked.
func urlSecrets(raw string) []string {
	var out []string
	rest := raw
	if _, after, ok := strings.Cut(rest, "://"); ok {
		rest = after
	}
	authority := rest
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		if _, pw, ok := strings.Cut(authority[:i], ":"); ok {
			out = append(out, pw)
		}
	}
	_, query, ok := strings.Cut(raw, "?")
	if !ok {
		return out
	}
	query, _, _ = strings.Cut(query, "#")
	for pair := range strings.SplitSeq(query, "&") {
		name, value, _ := strings.Cut(pair, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if SecretParam(name) {
			out = append(out, value)
		}
	}
	return out
}

// secretParams are the words that make a URL query parameter's name look
// secret (see SecretParam).
var secretParams = []string{
	"token", "key", "secret", "password", "passwd", "pass", "pwd", "auth",
	"signature", "sig", "credential", "session", "jwt", "bearer",
}

// SecretParam reports whether a URL query parameter of this name may hold
// a credential: its name, lowercased, contains one of token, key, secret,
// password, passwd, pass, pwd, auth, signature, sig, credential, session,
// jwt or bearer (so apikey, api_key, access_token, X-Amz-Signature,
// X-Goog-Credential and client_secret all do).
func SecretParam(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretParams {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// scrubError returns err with its message scrubbed (see scrubMessage) of
// the secrets req carries, its status code kept.
func scrubError(req any, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		st = status.Convert(err)
	}
	msg := st.Message()
	clean := scrubMessage(msg, secretsOf(req))
	if clean == msg {
		return err
	}
	p := st.Proto()
	p.Message = clean
	return status.ErrorProto(p)
}

// scrubUnary scrubs the error a unary call ends with.
func scrubUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, scrubError(req, err)
}

// scrubStream bounds the quotes of the error a stream ends with. No
// stream of the API receives a target, so there is no secret to mask; and
// a stream's messages may be received on another goroutine than this one
// (the xDS server's are).
func scrubStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return scrubError(nil, handler(srv, ss))
}
