package probe

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Limits on an HTTPSpec's expectations and request body, checked by
// Validate.
const (
	// MaxStatusRanges bounds HTTPSpec.ExpectedStatusRanges.
	MaxStatusRanges = 16
	// MaxPatternLen bounds HTTPSpec.BodyContains, BodyNotContains,
	// BodyRegex and each HeaderMatch's Regex, in bytes.
	MaxPatternLen = 1024
	// MaxHeaderMatches bounds HTTPSpec.HeaderMatches.
	MaxHeaderMatches = 16
	// MaxBodyLimit bounds HTTPSpec.BodyLimit, in bytes.
	MaxBodyLimit = 1 << 20
	// DefaultBodyLimit is the part of a body the expectations read when
	// HTTPSpec.BodyLimit is 0.
	DefaultBodyLimit = 64 << 10
	// MaxRequestBodyLen bounds HTTPSpec.Body, in bytes.
	MaxRequestBodyLen = 64 << 10
	// MaxRedirects is how many redirects a probe with FollowRedirects
	// follows before it fails.
	MaxRedirects = 10
)

// HeaderMatch expects a response header: the probe passes when one of the
// values of header Name matches Regex (RE2 syntax, unanchored: write
// "^...$" to match a whole value).
type HeaderMatch struct {
	Name  string `json:",omitzero"`
	Regex string `json:",omitzero"`
}

// ExpectError is a probe's failure because the answer was not the one
// expected: a body without the text it must contain, a header that does not
// match, a TCP reply other than the one awaited, a DNS answer. Its text says
// exactly what did not match, e.g. `body: "ready" not found in first 64 KiB`.
type ExpectError struct {
	Text string
}

// Error returns the text.
func (e *ExpectError) Error() string { return e.Text }

// expectErrorf returns an *ExpectError.
func expectErrorf(format string, args ...any) error {
	return &ExpectError{Text: fmt.Sprintf(format, args...)}
}

// statusRange is an inclusive range of status codes.
type statusRange struct{ lo, hi int }

// parseStatusRange parses "200-399", or a lone code "404".
func parseStatusRange(s string) (statusRange, bool) {
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	l, err1 := strconv.Atoi(strings.TrimSpace(lo))
	h, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || l < 100 || h > 599 || l > h {
		return statusRange{}, false
	}
	return statusRange{l, h}, true
}

// httpExpect is what an HTTP answer must hold beyond its status codes: a
// prober without status ranges, body or header expectations has none (a
// nil *httpExpect). It is read-only once built.
type httpExpect struct {
	statuses    []int // status codes that pass, with ranges'; both empty means any 2xx
	ranges      []statusRange
	contains    string
	notContains string
	re          *regexp.Regexp
	limit       int // bytes of the body the checks read; 0 when none reads it
	headers     []headerExpect
}

// headerExpect is one compiled HeaderMatch.
type headerExpect struct {
	name string // canonical
	re   *regexp.Regexp
}

// validateExpect checks the expectations and the request body of h.
func (h *HTTPSpec) validateExpect() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: "http." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if n := len(h.ExpectedStatusRanges); n > MaxStatusRanges {
		return bad("expected_status_ranges", "must list at most %d ranges, got %d", MaxStatusRanges, n)
	}
	for i, r := range h.ExpectedStatusRanges {
		if _, ok := parseStatusRange(r); !ok {
			return bad("expected_status_ranges", `each must be "LOW-HIGH" with 100 <= LOW <= HIGH <= 599, e.g. "200-399", got %.40q at index %d`, r, i)
		}
	}
	for _, f := range []struct{ name, v string }{{"body_contains", h.BodyContains}, {"body_not_contains", h.BodyNotContains}, {"body_regex", h.BodyRegex}} {
		if len(f.v) > MaxPatternLen {
			return bad(f.name, "must be at most %d bytes, got %d", MaxPatternLen, len(f.v))
		}
	}
	if h.BodyRegex != "" {
		if _, err := regexp.Compile(h.BodyRegex); err != nil {
			return bad("body_regex", "is not a valid RE2 regular expression: %v", err)
		}
	}
	if h.BodyLimit < 0 || h.BodyLimit > MaxBodyLimit {
		return bad("body_limit", "must be between 0 (%d bytes) and %d bytes, got %d", DefaultBodyLimit, MaxBodyLimit, h.BodyLimit)
	}
	if h.Method == http.MethodHead && h.readsBody() {
		return bad("method", "HEAD answers have no body: use GET (or no body_contains, body_not_contains or body_regex)")
	}
	if n := len(h.HeaderMatches); n > MaxHeaderMatches {
		return bad("header_matches", "must list at most %d headers, got %d", MaxHeaderMatches, n)
	}
	for i, m := range h.HeaderMatches {
		if !isToken(m.Name) {
			return bad("header_matches", "name %.80q at index %d is not a valid HTTP token, e.g. \"X-Status\"", m.Name, i)
		}
		if len(m.Regex) > MaxPatternLen {
			return bad("header_matches", "regex of %q must be at most %d bytes, got %d", m.Name, MaxPatternLen, len(m.Regex))
		}
		if m.Regex == "" {
			return bad("header_matches", "regex of %q is empty: write \".\" to require any value", m.Name)
		}
		if _, err := regexp.Compile(m.Regex); err != nil {
			return bad("header_matches", "regex of %q is not a valid RE2 regular expression: %v", m.Name, err)
		}
	}
	if len(h.Body) > MaxRequestBodyLen {
		return bad("body", "must be at most %d bytes, got %d", MaxRequestBodyLen, len(h.Body))
	}
	if h.Body != "" && h.Method != http.MethodPost {
		return bad("body", "is sent with POST only: set method to POST")
	}
	return nil
}

// readsBody reports whether an expectation reads the body.
func (h *HTTPSpec) readsBody() bool {
	return h.BodyContains != "" || h.BodyNotContains != "" || h.BodyRegex != ""
}

// newHTTPExpect compiles the expectations of a validated spec, or returns
// nil when it has none: any 2xx passes.
func newHTTPExpect(h *HTTPSpec) *httpExpect {
	if len(h.ExpectedStatus) == 0 && len(h.ExpectedStatusRanges) == 0 && !h.readsBody() && len(h.HeaderMatches) == 0 {
		return nil
	}
	x := &httpExpect{statuses: slices.Clone(h.ExpectedStatus), contains: h.BodyContains, notContains: h.BodyNotContains}
	for _, r := range h.ExpectedStatusRanges {
		sr, _ := parseStatusRange(r)
		x.ranges = append(x.ranges, sr)
	}
	if h.BodyRegex != "" {
		x.re = regexp.MustCompile(h.BodyRegex) // validated
	}
	if h.readsBody() {
		x.limit = h.BodyLimit
		if x.limit == 0 {
			x.limit = DefaultBodyLimit
		}
	}
	for _, m := range h.HeaderMatches {
		x.headers = append(x.headers, headerExpect{name: http.CanonicalHeaderKey(m.Name), re: regexp.MustCompile(m.Regex)})
	}
	return x
}

// statusPasses reports whether code is one of x's statuses or in one of
// its ranges, or a 2xx when neither lists any (or x is nil).
func (x *httpExpect) statusPasses(code int) bool {
	if x == nil || len(x.statuses) == 0 && len(x.ranges) == 0 {
		return code >= 200 && code <= 299
	}
	if slices.Contains(x.statuses, code) {
		return true
	}
	for _, r := range x.ranges {
		if code >= r.lo && code <= r.hi {
			return true
		}
	}
	return false
}

// readsBody reports whether x needs the body; a nil x does not.
func (x *httpExpect) readsBody() bool { return x != nil && x.limit > 0 }

// check returns the first expectation the answer fails, as an
// *ExpectError, or nil. values returns a response header's values; body
// is at most x.limit bytes of the body.
func (x *httpExpect) check(values func(name string) []string, body []byte) error {
	if x == nil {
		return nil
	}
	for _, h := range x.headers {
		vs := values(h.name)
		if len(vs) == 0 {
			return expectErrorf("header %s: missing, want a value matching /%s/", h.name, h.re)
		}
		if !slices.ContainsFunc(vs, h.re.MatchString) {
			return expectErrorf("header %s: no value matches /%s/", h.name, h.re)
		}
	}
	if x.limit == 0 {
		return nil
	}
	within := "first " + byteSize(x.limit)
	if x.contains != "" && !bytes.Contains(body, []byte(x.contains)) {
		return expectErrorf("body: %q not found in %s", x.contains, within)
	}
	if x.notContains != "" {
		if i := bytes.Index(body, []byte(x.notContains)); i >= 0 {
			return expectErrorf("body: %q found at byte %d, in %s", x.notContains, i, within)
		}
	}
	if x.re != nil && !x.re.Match(body) {
		return expectErrorf("body: no match for /%s/ in %s", x.re, within)
	}
	return nil
}

// byteSize writes n bytes as people do: "64 KiB", "1 MiB", "300 bytes".
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// headValues returns a function that finds a header's values in a raw
// response head, as parseHead accepted it: "Name: value" lines after the
// status line, names compared case-insensitively.
func headValues(head []byte) func(string) []string {
	return func(name string) []string {
		var out []string
		_, rest, _ := bytes.Cut(head, []byte("\n"))
		for len(rest) > 0 {
			var line []byte
			line, rest, _ = bytes.Cut(rest, []byte("\n"))
			line = bytes.TrimSuffix(line, []byte("\r"))
			k, v, ok := bytes.Cut(line, []byte(":"))
			if ok && asciiEqualFold(k, name) {
				out = append(out, string(bytes.Trim(v, " \t")))
			}
		}
		return out
	}
}

// bodySink keeps the first limit bytes written to it and discards the
// rest. A nil *bodySink keeps nothing.
type bodySink struct {
	buf   []byte
	limit int
}

// newBodySink returns a sink for x's checks, or nil when x reads no body.
func newBodySink(x *httpExpect) *bodySink {
	if !x.readsBody() {
		return nil
	}
	return &bodySink{limit: x.limit}
}

// Write keeps what fits under the limit; it never fails.
func (s *bodySink) Write(p []byte) (int, error) {
	if s == nil {
		return len(p), nil
	}
	if room := s.limit - len(s.buf); room > 0 {
		s.buf = append(s.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// bytes returns what was kept.
func (s *bodySink) bytes() []byte {
	if s == nil {
		return nil
	}
	return s.buf
}

// readCap is how much of a body a probe with x reads: maxBodyBytes, or
// more when x reads more of it.
func readCap(x *httpExpect) int64 {
	if x.readsBody() && x.limit > maxBodyBytes {
		return int64(x.limit)
	}
	return maxBodyBytes
}
