package server

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The read role's view. Every answer of the API redacts a probe's secrets
// (header and metadata values, a URL's password, an inline TLS key); the
// read role, which may watch targets but not change them, also sees the
// values of URL query parameters whose names look secret (see
// SecretParam) as Redacted, and an HTTP probe's request body as its size
// only. The write role sees both, as it must to read a spec, change it
// and write it back.

// roleKey is the context key of the caller's Role, set by Tokens.
type roleKey struct{}

// readOnly reports whether the call's token has the read role only. A
// server without tokens has no roles: every caller may write.
func readOnly(ctx context.Context) bool {
	r, ok := ctx.Value(roleKey{}).(Role)
	return ok && r == RoleRead
}

// ReadURL returns u as the read role and the status page show it: its
// password and the values of its query parameters of secret names
// Redacted. A URL that does not parse is returned with its password
// redacted only, as every answer of the API shows a probe's URL.
func ReadURL(u string) string {
	u = redactURL(u)
	base, query, ok := strings.Cut(u, "?")
	if !ok {
		return u
	}
	query, frag, hasFrag := strings.Cut(query, "#")
	pairs := strings.Split(query, "&")
	for i, pair := range pairs {
		name, value, _ := strings.Cut(pair, "=")
		n, err := url.QueryUnescape(name)
		if err != nil {
			n = name
		}
		if value != "" && SecretParam(n) {
			pairs[i] = name + "=" + url.QueryEscape(Redacted)
		}
	}
	out := base + "?" + strings.Join(pairs, "&")
	if hasFrag {
		out += "#" + frag
	}
	return out
}

// BodySize is how the read role sees a request body of n bytes.
func BodySize(n int) string { return fmt.Sprintf("<%d bytes>", n) }

// readView turns st, a status built for this answer alone, into the read
// role's view of it.
func readView(st *pb.TargetStatus) {
	h := st.GetSpec().GetHttp()
	if h == nil {
		return
	}
	h.Url = ReadURL(h.GetUrl())
	if b := h.GetBody(); b != "" {
		h.Body = BodySize(len(b))
	}
}

// readEvent is readView for the statuses a watch event carries.
func readEvent(ev *pb.WatchTransitionsResponse) *pb.WatchTransitionsResponse {
	readView(ev.GetSnapshot())
	readView(ev.GetAdded())
	readView(ev.GetUpdated())
	return ev
}
