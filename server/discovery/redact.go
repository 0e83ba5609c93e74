package discovery

import (
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/config"
	"github.com/prometheus/prometheus/discovery"
)

// secretType is the type Prometheus gives every secret of an SD config:
// authorization credentials, a basic_auth password, an oauth2
// client_secret, a bearer_token, secret http_headers.
var secretType = reflect.TypeFor[config.Secret]()

// secretQuery matches the names of URL query parameters that may carry a
// token.
var secretQuery = regexp.MustCompile(`(?i)token|key|secret|pass|auth|sig|cred`)

// secretsOf returns the secret values written in SD configs: every
// config.Secret they hold, the password of a URL, and the values of query
// parameters whose name suggests a token. A secret read from a file
// (credentials_file, password_file) is not known, and never shown either:
// only errors could quote it, and they do not.
func secretsOf(cs discovery.Configs) []string {
	var out []string
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		if !v.IsValid() {
			return
		}
		if v.Type() == secretType {
			if s := v.String(); s != "" {
				out = append(out, s)
			}
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			if v.CanInterface() {
				if u, ok := v.Interface().(*url.URL); ok {
					out = append(out, urlSecrets(u)...)
					return
				}
			}
			walk(v.Elem())
		case reflect.Interface:
			walk(v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i))
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(it.Value())
			}
		case reflect.String:
			// A URL written as a string (http_sd_configs' url).
			if s := v.String(); strings.Contains(s, "://") {
				if u, err := url.Parse(s); err == nil {
					out = append(out, urlSecrets(u)...)
				}
			}
		}
	}
	for _, c := range cs {
		walk(reflect.ValueOf(c))
	}
	return out
}

func urlSecrets(u *url.URL) []string {
	var out []string
	if p, ok := u.User.Password(); ok && p != "" {
		out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
	}
	for k, vs := range u.Query() {
		if secretQuery.MatchString(k) {
			for _, v := range vs {
				if v != "" {
					out = append(out, v, url.QueryEscape(v))
				}
			}
		}
	}
	return out
}

// newRedactor returns a function that replaces each secret with
// "<secret>", longest first, so that a secret containing another is
// replaced whole.
func newRedactor(secrets []string) func(string) string {
	secrets = slices.Compact(slices.SortedFunc(slices.Values(secrets), func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	}))
	if len(secrets) == 0 {
		return func(s string) string { return s }
	}
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, "<secret>")
	}
	r := strings.NewReplacer(pairs...)
	return r.Replace
}
