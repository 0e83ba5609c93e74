package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/discovery/dns"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/http"
)

const goodConfig = `
groups:
  - name: api
    file_sd_configs:
      - files: [targets/*.json]
        refresh_interval: 1m
    http_sd_configs:
      - url: http://127.0.0.1:9999/sd
        authorization:
          credentials: s3cr3t-token
    dns_sd_configs:
      - names: [_api._tcp.example.test]
        type: SRV
    relabel_configs:
      - source_labels: [__meta_filepath]
        regex: .*canary.*
        action: drop
    template:
      tcp: {}
      interval: 2s
      rise: 1
    on_disappear: drain 10s
  - name: web
    file_sd_configs:
      - files: [/abs/web.yaml]
    template:
      http: {url: /healthz}
    on_disappear: remove
`

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(goodConfig), "/etc/pulse/")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Groups) != 2 {
		t.Fatalf("got %d groups, want 2", len(cfg.Groups))
	}
	api := cfg.Groups[0]
	if api.Name != "api" || api.Drain != 10*time.Second || len(api.SDConfigs) != 3 || len(api.RelabelConfigs) != 1 {
		t.Fatalf("api group: %+v", api)
	}
	var sawFile, sawHTTP, sawDNS bool
	for _, c := range api.SDConfigs {
		switch c := c.(type) {
		case *file.SDConfig:
			sawFile = true
			if c.Files[0] != "/etc/pulse/targets/*.json" {
				t.Errorf("file_sd path %q, want it taken from the config's directory", c.Files[0])
			}
		case *http.SDConfig:
			sawHTTP = true
		case *dns.SDConfig:
			sawDNS = c.Type == "SRV"
		}
	}
	if !sawFile || !sawHTTP || !sawDNS {
		t.Errorf("sources: file %v http %v dns %v", sawFile, sawHTTP, sawDNS)
	}
	if api.Template.GetTcp() == nil || api.Template.GetRise() != 1 || api.Template.GetInterval().AsDuration() != 2*time.Second {
		t.Errorf("api template: %v", api.Template)
	}
	web := cfg.Groups[1]
	if web.Drain != 0 || web.Template.GetHttp().GetUrl() != "/healthz" {
		t.Errorf("web group: drain %v template %v", web.Drain, web.Template)
	}
}

func TestParseConfigDefaultDrain(t *testing.T) {
	cfg, err := ParseConfig([]byte("groups:\n  - name: a\n    file_sd_configs: [{files: [x.json]}]\n    template: {tcp: {}}\n"), "./")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Groups[0].Drain != DefaultDrain {
		t.Errorf("drain %v, want the default %v", cfg.Groups[0].Drain, DefaultDrain)
	}
}

// TestParseConfigErrors: each bad config is refused with an error naming
// the group and the field, and never quoting a secret.
func TestParseConfigErrors(t *testing.T) {
	const src = "    file_sd_configs: [{files: [x.json]}]\n"
	const tmpl = "    template: {tcp: {}}\n"
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown mechanism", "groups:\n  - name: a\n    consul_sd_configs: [{server: 127.0.0.1:8500}]\n" + tmpl, []string{"consul_sd_configs"}},
		{"no source", "groups:\n  - name: a\n" + tmpl, []string{`groups[0] ("a")`, "no source"}},
		{"bad name", "groups:\n  - name: A_B\n" + src + tmpl, []string{"groups[0]", "name:", "A_B"}},
		{"duplicate name", "groups:\n  - name: a\n" + src + tmpl + "  - name: a\n" + src + tmpl, []string{"groups[1]", "already the name of groups[0]"}},
		{"no template", "groups:\n  - name: a\n" + src, []string{"template: missing"}},
		{"template name", "groups:\n  - name: a\n" + src + "    template: {name: x, tcp: {}}\n", []string{"template.name"}},
		{"template unknown field", "groups:\n  - name: a\n" + src + "    template: {tcp: {}, rize: 2}\n", []string{"template", "rize"}},
		{"bad relabel", "groups:\n  - name: a\n" + src + tmpl + "    relabel_configs: [{action: replace}]\n", []string{"relabel_configs[0]", "target_label"}},
		{"bad relabel regex", "groups:\n  - name: a\n" + src + tmpl + "    relabel_configs: [{regex: '(', target_label: x}]\n", []string{"regex"}},
		{"template bad interval", "groups:\n  - name: a\n" + src + "    template: {tcp: {}, interval: 900h}\n", []string{"template", "interval"}},
		{"template no probe", "groups:\n  - name: a\n" + src + "    template: {rise: 2}\n", []string{"template: has no probe"}},
		{"template tcp address", "groups:\n  - name: a\n" + src + "    template: {tcp: {address: '127.0.0.1:1'}}\n", []string{"template.tcp.address"}},
		{"template http full url", "groups:\n  - name: a\n" + src + "    template: {http: {url: 'http://x/'}}\n", []string{"template.http.url", "must start with '/'"}},
		{"bad on_disappear", "groups:\n  - name: a\n" + src + tmpl + "    on_disappear: later\n", []string{"on_disappear", "later"}},
		{"drain too long", "groups:\n  - name: a\n" + src + tmpl + "    on_disappear: drain 2h\n", []string{"on_disappear", "at most 1h0m0s"}},
		{"unknown key", "groups:\n  - name: a\n" + src + tmpl + "    extra: 1\n", []string{"extra"}},
		{"http sd bad url with secret", "groups:\n  - name: a\n    http_sd_configs: [{url: 'ftp://x', authorization: {credentials: hunter2}}]\n" + tmpl, []string{"URL scheme must be"}},
		{"secret in a bad line", "groups:\n  - name: a\n    http_sd_configs: [{url: 'http://127.0.0.1/', basic_auth: {username: u, password: hunter2, bogus: 1}}]\n" + tmpl, []string{"bogus"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(c.yaml), "./")
			if err == nil {
				t.Fatalf("accepted: %+v", cfg)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q quotes a secret", err)
			}
		})
	}
}

func TestLoadConfigNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "discovery.yaml")
	if err := os.WriteFile(path, []byte("groups:\n  - name: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") {
		t.Fatalf("error %v does not start with the file's path", err)
	}
}

func TestScrub(t *testing.T) {
	for in, want := range map[string]string{
		`password: hunter2`:          `password: <secret>`,
		`credentials: "a b"`:         `credentials: <secret>`,
		`{password: x, username: u}`: `{password: <secret>, username: u}`,
		`bearer_token=abc`:           `bearer_token=<secret>`,
	} {
		if got := scrub(in); got != want {
			t.Errorf("scrub(%q) = %q, want %q", in, got, want)
		}
	}
}
