package discovery

import (
	"slices"
	"strings"
	"testing"
)

// TestSecretsOf finds every kind of secret an http_sd config can hold,
// and the redactor replaces each of them whole.
func TestSecretsOf(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
groups:
  - name: a
    http_sd_configs:
      - url: http://u:url-pass-1@127.0.0.1:1/sd?token=query-tok-2&page=3
        basic_auth: {username: u, password: basic-pass-3}
        http_headers: {X-Key: {secrets: [header-secret-4]}}
      - url: http://127.0.0.1:2/sd
        bearer_token: bearer-5
      - url: http://127.0.0.1:3/sd
        oauth2: {client_id: id, client_secret: oauth-secret-6, token_url: "http://127.0.0.1:4/token"}
      - url: http://127.0.0.1:5/sd
        authorization: {credentials: cred-7}
    template: {tcp: {}}
`), ".")
	if err != nil {
		t.Fatal(err)
	}
	got := secretsOf(cfg.Groups[0].SDConfigs)
	for _, want := range []string{"url-pass-1", "query-tok-2", "basic-pass-3", "header-secret-4", "bearer-5", "oauth-secret-6", "cred-7"} {
		if !slices.Contains(got, want) {
			t.Errorf("secretsOf misses %q (found %q)", want, got)
		}
	}
	if slices.Contains(got, "3") {
		t.Errorf("a query value of no secret name taken for a secret: %q", got)
	}
	redact := newRedactor(got)
	text := "GET http://u:url-pass-1@x/?token=query-tok-2: bearer-5 cred-7 cred-7x page=3"
	if out := redact(text); strings.Contains(out, "pass-1") || strings.Contains(out, "tok-2") || strings.Contains(out, "bearer-5") || strings.Contains(out, "cred-7") || !strings.Contains(out, "page=3") {
		t.Errorf("redacted: %q", out)
	}
}
