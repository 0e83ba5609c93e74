package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each setting of config view, from each of its sources: flag, env
// (where it has a variable), the config's context, the default. The
// context sets every setting, so a flag or variable shows it loses.
func TestConfigViewEachSource(t *testing.T) {
	const ctx = `
current-context: c
contexts:
  c:
    addr: 192.0.2.1:50051
    tls: true
    tls-ca: ctx-ca.pem
    tls-cert: ctx-cert.pem
    tls-key: ctx-key.pem
    tls-server-name: ctx.internal
    token-file: ctx.token
    output: yaml
`
	type source struct {
		args      []string
		env       []string // name, value
		value, by string
	}
	for _, tc := range []struct {
		setting                 string
		flag, env, context, def source
	}{
		{"addr", source{[]string{"--addr", "127.0.0.2:1"}, nil, "127.0.0.2:1", "flag --addr"},
			source{nil, []string{envAddr, "127.0.0.3:1"}, "127.0.0.3:1", "env " + envAddr},
			source{value: "192.0.2.1:50051"}, source{value: defaultAddr, by: "default"}},
		{"tls-ca", source{[]string{"--tls-ca", "f.pem"}, nil, "f.pem", "flag --tls-ca"},
			source{nil, []string{envCACert, "e.pem"}, "e.pem", "env " + envCACert},
			source{value: "ctx-ca.pem"}, source{value: "-", by: "unset"}},
		{"tls-cert", source{[]string{"--tls-cert", "f.pem"}, nil, "f.pem", "flag --tls-cert"},
			source{nil, []string{envCert, "e.pem"}, "e.pem", "env " + envCert},
			source{value: "ctx-cert.pem"}, source{value: "-", by: "unset"}},
		{"tls-key", source{[]string{"--tls-key", "f.pem"}, nil, "f.pem", "flag --tls-key"},
			source{nil, []string{envKey, "e.pem"}, "e.pem", "env " + envKey},
			source{value: "ctx-key.pem"}, source{value: "-", by: "unset"}},
		{"tls-server-name", source{[]string{"--tls-server-name", "f.internal"}, nil, "f.internal", "flag --tls-server-name"},
			source{}, source{value: "ctx.internal"}, source{value: "-", by: "unset"}},
		{"token-file", source{[]string{"--token-file", "f.token"}, nil, "f.token", "flag --token-file"},
			source{}, source{value: "ctx.token"}, source{value: "-", by: "unset"}},
		{"token", source{[]string{"--token", "s3cret"}, nil, "<redacted>", "flag --token"},
			source{nil, []string{"PULSE_TOKEN", "s3cret"}, "<redacted>", "env PULSE_TOKEN"},
			source{value: "-", by: "unset"}, source{value: "-", by: "unset"}},
		{"tls", source{[]string{"--tls"}, nil, "on", "flag --tls"},
			source{}, source{value: "on"}, source{value: "off", by: "implied by tls-ca/tls-cert, else off"}},
		{"o", source{[]string{"-o", "wide"}, nil, "wide", "flag -o"},
			source{nil, []string{envOutput, "json"}, "json", "env " + envOutput},
			source{value: "yaml"}, source{value: "text", by: "default"}},
	} {
		for _, s := range []struct {
			name   string
			src    source
			config string
		}{{"flag", tc.flag, ctx}, {"env", tc.env, ctx}, {"context", tc.context, ctx}, {"default", tc.def, ""}} {
			if s.name == "env" && s.src.env == nil {
				continue // no variable
			}
			t.Run(tc.setting+"/"+s.name, func(t *testing.T) {
				path := writeConfig(t, s.config)
				if s.src.env != nil {
					t.Setenv(s.src.env[0], s.src.env[1])
				}
				want := s.src.by
				if s.name == "context" && want == "" {
					want = "config " + path + " (context c)"
				}
				out := mustRun(t, append([]string{"config", "view"}, s.src.args...)...)
				if got := viewLine(t, out, tc.setting); got[1] != s.src.value || got[2] != want {
					t.Errorf("%s: %q, want value %q from %q\n%s", tc.setting, got, s.src.value, want, out)
				}
				if strings.Contains(out, "s3cret") {
					t.Errorf("config view shows the token:\n%s", out)
				}
			})
		}
	}
}

// get-contexts lists the contexts, marking the one in force; use-context
// switches the file's current-context and keeps the rest of it; an
// unknown context changes nothing.
func TestConfigContexts(t *testing.T) {
	body := "# pulsectl's contexts\ncurrent-context: prod # the usual\ncontexts:\n  prod:\n    addr: 192.0.2.1:50051\n  local:\n    addr: 127.0.0.1:50051\n"
	path := writeConfig(t, body)
	want := "CURRENT  NAME   ADDR\n         local  127.0.0.1:50051\n*        prod   192.0.2.1:50051\n"
	if out := mustRun(t, "config", "get-contexts"); out != want {
		t.Errorf("get-contexts:\n%s\nwant\n%s", out, want)
	}
	if out := mustRun(t, "--context", "local", "config", "get-contexts"); !strings.Contains(out, "*        local") {
		t.Errorf("get-contexts with --context local:\n%s", out)
	}

	for _, args := range [][]string{
		{"config", "use-context", "locl"},
		{"config", "use-context"},
		{"config", "use-context", "a", "b"},
		{"config", "get-contexts", "x"},
		{"config", "use-contexts", "local"},
	} {
		r := pulsectl(t, args...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "pulsectl: ") || r.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
		if b, _ := os.ReadFile(path); string(b) != body {
			t.Errorf("%q changed the file:\n%s", args, b)
		}
	}
	if r := pulsectl(t, "config", "use-context", "locl"); !strings.Contains(r.stderr, `no context "locl" (it has local or prod)`) || !strings.Contains(r.stderr, `Did you mean "local"?`) {
		t.Errorf("use-context of an unknown context: %q", r.stderr)
	}

	if out := mustRun(t, "config", "use-context", "local"); out != `switched to context "local" (`+path+")\n" {
		t.Errorf("use-context printed %q", out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(body, "prod # the usual", "local # the usual", 1); string(b) != want {
		t.Errorf("after use-context the file is\n%s\nwant\n%s", b, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file's mode: %v %v", fi.Mode(), err)
	}
	if got := viewLine(t, mustRun(t, "config", "view"), "addr"); got[1] != "127.0.0.1:50051" {
		t.Errorf("config view after use-context local: addr %q", got)
	}

	// A file without current-context gets one; no file at all is an error.
	noCurrent := writeConfig(t, "contexts:\n  a:\n    addr: 127.0.0.1:1\n")
	mustRun(t, "config", "use-context", "a")
	if b, _ := os.ReadFile(noCurrent); !strings.HasPrefix(string(b), "current-context: a\ncontexts:\n") {
		t.Errorf("use-context on a file without current-context:\n%s", b)
	}
	missing := filepath.Join(t.TempDir(), "none.yaml")
	for _, args := range [][]string{{"config", "use-context", "a", "--config", missing}, {"config", "get-contexts", "--config", missing}} {
		if r := pulsectl(t, args...); r.code != exitUsage || !strings.Contains(r.stderr, "none.yaml") {
			t.Errorf("%q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("use-context made %s", missing)
	}
}

// Without a config file, get-contexts and use-context say that the file
// does not exist, where they look for it, not that it has no contexts or
// what open(2) said.
func TestConfigContextsNoFile(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	path := defaultConfigPath()
	for _, args := range [][]string{{"config", "get-contexts"}, {"config", "use-context", "local"}} {
		r := pulsectl(t, args...)
		want := "pulsectl: no config file: " + path + " does not exist; write one with your contexts (pulsectl config --help shows its form)\n"
		if r.code != exitUsage || r.stderr != want || r.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stderr %q", args, r.code, r.stdout, r.stderr, exitUsage, want)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("use-context made %s", path)
	}
}

// A context named by --context or PULSE_CONTEXT with no config file is an
// error that says so, not the default address: pulsectl --context prod
// must never answer from the local pulsed.
func TestContextWithoutConfigFile(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	want := `pulsectl: context "prod": no config file: ` + defaultConfigPath() + " does not exist"
	for _, tc := range []struct {
		env  string
		args []string
	}{
		{"", []string{"--context", "prod", "ls"}},
		{"prod", []string{"ls"}},
		{"prod", []string{"config", "view"}},
	} {
		t.Setenv(envContext, tc.env)
		if r := pulsectl(t, tc.args...); r.code != exitUsage || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("%s=%q %q: exit %d, stderr %q; want exit %d, stderr %q...", envContext, tc.env, tc.args, r.code, r.stderr, exitUsage, want)
		}
	}
}
