package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeConfig writes a config file in the test's own config directory
// (XDG_CONFIG_HOME), where pulsectl looks by default.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	path := filepath.Join(dir, "pulse", "pulsectl.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// viewLine returns config view's line for setting name, its columns
// split.
func viewLine(t *testing.T, out, name string) []string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		f := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), 3)
		if len(f) == 3 && f[0] == name {
			return f
		}
	}
	t.Fatalf("no %s line in\n%s", name, out)
	return nil
}

// Each setting comes from the first of flag, environment, config context,
// default, and config view says which.
func TestConfigViewSources(t *testing.T) {
	path := writeConfig(t, `
current-context: prod
contexts:
  prod:
    addr: 10.0.0.1:50051,10.0.0.2:50051
    tls-ca: /etc/pulse/ca.crt
    token-file: /etc/pulse/token
    output: json
  local:
    addr: 127.0.0.1:50051
`)
	out := mustRun(t, "config", "view")
	for _, want := range [][]string{
		{"addr", "10.0.0.1:50051,10.0.0.2:50051", "config " + path + " (context prod)"},
		{"tls-ca", "/etc/pulse/ca.crt", "config " + path + " (context prod)"},
		{"token-file", "/etc/pulse/token", "config " + path + " (context prod)"},
		{"tls-cert", "-", "unset"},
		{"o", "json", "config " + path + " (context prod)"},
	} {
		if got := viewLine(t, out, want[0]); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: %q, want %q", want[0], got, want)
		}
	}

	// The environment beats the file; a flag beats both, before the
	// command or after it.
	t.Setenv("PULSE_ADDR", "10.9.9.9:50051")
	t.Setenv("PULSE_OUTPUT", "yaml")
	t.Setenv("PULSE_TOKEN", "s3cret")
	out = mustRun(t, "config", "view")
	if got := viewLine(t, out, "addr"); got[1] != "10.9.9.9:50051" || got[2] != "env PULSE_ADDR" {
		t.Errorf("addr with PULSE_ADDR: %q", got)
	}
	if got := viewLine(t, out, "o"); got[1] != "yaml" || got[2] != "env PULSE_OUTPUT" {
		t.Errorf("o with PULSE_OUTPUT: %q", got)
	}
	if got := viewLine(t, out, "token"); got[1] != "<redacted>" || got[2] != "env PULSE_TOKEN" {
		t.Errorf("token: %q", got)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("config view shows the token:\n%s", out)
	}
	if got := viewLine(t, out, "token-file"); got[2] != "unset" {
		t.Errorf("token-file with PULSE_TOKEN set: %q, want the environment's token to come first", got)
	}
	for _, args := range [][]string{
		{"--addr", "127.0.0.7:1", "config", "view"},
		{"config", "view", "--addr", "127.0.0.7:1"},
		{"--addr=127.0.0.7:1", "config", "view"},
	} {
		if got := viewLine(t, mustRun(t, args...), "addr"); got[1] != "127.0.0.7:1" || got[2] != "flag --addr" {
			t.Errorf("%q: addr %q", args, got)
		}
	}

	// --context and PULSE_CONTEXT pick another context.
	t.Setenv("PULSE_ADDR", "")
	if got := viewLine(t, mustRun(t, "--context", "local", "config", "view"), "addr"); got[1] != "127.0.0.1:50051" || !strings.Contains(got[2], "(context local)") {
		t.Errorf("--context local: addr %q", got)
	}
	t.Setenv("PULSE_CONTEXT", "local")
	if got := viewLine(t, mustRun(t, "config", "view"), "addr"); got[1] != "127.0.0.1:50051" {
		t.Errorf("PULSE_CONTEXT=local: addr %q", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		config string
		args   []string
		want   string
	}{
		{"contexts: {a: {addr: x:1}}\n", []string{"--context", "b", "config", "view"}, `no context "b" (it has a)`},
		{"contexts: {a: {adr: x:1}}\n", []string{"config", "view"}, `line 1: unknown key "adr"`},
		{"", []string{"--config", "/nonexistent/pulsectl.yaml", "config", "view"}, `/nonexistent/pulsectl.yaml: no such file`},
		{"", []string{"--bogus", "ls"}, `flag --bogus is not a global flag; put it after the command`},
		{"", []string{"--addr"}, `flag --addr needs a value`},
		{"", []string{"--addr", "x:1"}, `no command after the global flags`},
	} {
		writeConfig(t, tt.config)
		r := pulsectl(t, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) || !strings.HasPrefix(r.stderr, "pulsectl: ") {
			t.Errorf("%q with config %q: exit %d, stderr %q; want exit %d and %q", tt.args, tt.config, r.code, r.stderr, exitUsage, tt.want)
		}
	}
	// Without a config file, the default is in force and said so.
	writeConfig(t, "")
	if got := viewLine(t, mustRun(t, "config", "view"), "addr"); got[1] != defaultAddr || got[2] != "default" {
		t.Errorf("no settings: addr %q", got)
	}
}

// The settings reach the real calls: an address from the environment, one
// from the config's context, global flags before the command, and a list
// of replicas whose first is down.
func TestConfigReachesPulsed(t *testing.T) {
	p := startPulsed(t)
	writeConfig(t, "current-context: here\ncontexts:\n  here:\n    addr: "+p.Addr+"\n    output: json\n")
	if out := mustRun(t, "ls"); !strings.Contains(out, `"targets"`) {
		t.Errorf("ls with the config's context (output json): %s", out)
	}
	writeConfig(t, "")
	t.Setenv("PULSE_ADDR", closedAddr(t)+","+p.Addr)
	mustRun(t, "add", "--name", "web-1", "--tcp", closedAddr(t))
	if out := mustRun(t, "ls"); !strings.Contains(out, "web-1") {
		t.Errorf("ls through PULSE_ADDR's second replica: %s", out)
	}
	t.Setenv("PULSE_ADDR", "")
	if out := mustRun(t, "--addr", p.Addr, "-o", "json", "state", "web-1"); !regexp.MustCompile(`"name":\s+"web-1"`).MatchString(out) {
		t.Errorf("global flags before state: %s", out)
	}
}

// A config file's mistake is named by its line and key as the file
// spells them, the closest key suggested, or the keys listed when none is
// close; never a Go type. Every command that reads the file says so, and
// use-context leaves such a file as it is.
func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		body, want string // want: after "pulsectl: config PATH "
	}{
		{"current-context: prod\ncontexts:\n  prod:\n    adr: 127.0.0.1:50051\n", "line 4: unknown key \"adr\"\nDid you mean \"addr\"?\n"},
		{"current-contxt: prod\n", "line 1: unknown key \"current-contxt\"\nDid you mean \"current-context\"?\n"},
		{"contexts:\n  prod:\n    colour: blue\n", "line 3: unknown key \"colour\"; a context's keys are: addr, tls, tls-ca, tls-cert, tls-key, tls-server-name, token-file, output\n"},
		{"servers: []\n", "line 1: unknown key \"servers\"; the file's keys are: current-context, contexts\n"},
		{"contexts:\n  prod:\n    tls: maybe\n", "line 3: tls: want true or false, got \"maybe\"\n"},
		{"contexts:\n  prod:\n    addr: [127.0.0.1:50051]\n", "line 3: addr: want a single value\n"},
		{"contexts:\n  prod: 127.0.0.1:50051\n", "line 2: context \"prod\": want a mapping of its settings (addr, tls, tls-ca, tls-cert, tls-key, tls-server-name, token-file, output)\n"},
		{"contexts: prod\n", "line 1: contexts: want the contexts by name, each a mapping of its settings\n"},
		{"- prod\n", "line 1: want a mapping of current-context and contexts\n"},
		{"contexts:\n  prod:\n    addr: a\n    addr: b\n", "line 4: mapping key \"addr\" already defined at line 3\n"},
	} {
		path := writeConfig(t, tc.body)
		want := "pulsectl: config " + path + " " + tc.want
		for _, args := range [][]string{{"ls"}, {"config", "view"}, {"config", "get-contexts"}, {"config", "use-context", "prod"}} {
			r := pulsectl(t, args...)
			if r.code != exitUsage || r.stderr != want || r.stdout != "" {
				t.Errorf("%q with\n%s: exit %d\nstdout: %s\nstderr: %q\nwant exit %d and %q", args, tc.body, r.code, r.stdout, r.stderr, exitUsage, want)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != tc.body {
				t.Errorf("%q rewrote the file: %q, %v", args, b, err)
			}
		}
	}
}
