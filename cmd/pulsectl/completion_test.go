package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pulsehealth/pulse/internal/pulsedproc"
)

// bashComplete returns a function that runs the bash completion script in
// a real bash for the words of a command line (the last one being
// completed) and returns the words offered. PATH is path first, so that
// the script's "pulsectl __complete" runs the binary there.
func bashComplete(t *testing.T, path string) func(words ...string) []string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script := mustRun(t, "completion", "bash")
	return func(words ...string) []string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = strconv.Quote(w)
		}
		prog := script + "COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "; _pulsectl; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.CommandContext(t.Context(), bash, "--norc", "--noprofile", "-c", prog)
		cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
}

// shellComplete returns a function that completes the last of words in a
// real fish or zsh (shell), with the script "pulsectl completion SHELL"
// prints loaded, and returns the words offered; it skips the test when the
// shell is not installed. PATH is path first, as for bashComplete. zsh
// runs the bash function through its bashcompinit, which leaves matching
// the word typed so far to zsh's compadd: the helper does that match.
func shellComplete(t *testing.T, shell, path string) func(words ...string) []string {
	t.Helper()
	bin, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("%s is not installed (Debian: apt-get install %s): its completion is checked only as text", shell, shell)
	}
	script := mustRun(t, "completion", shell)
	return func(words ...string) []string {
		t.Helper()
		var cmd *exec.Cmd
		switch shell {
		case "fish":
			cmd = exec.CommandContext(t.Context(), bin, "--no-config", "-c", "source; complete -C (string join ' ' -- $argv)", "--")
			cmd.Args = append(cmd.Args, words...)
		case "zsh":
			quoted := make([]string, len(words))
			for i, w := range words {
				quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
			}
			prog := "autoload -U compinit && compinit -u -d \"$TMPDIR/zcompdump\"\nsource /dev/stdin\nsetopt ksharrays\nCOMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n_pulsectl\nprint -l -- \"${COMPREPLY[@]}\"\n"
			cmd = exec.CommandContext(t.Context(), bin, "-f", "-c", prog)
		}
		cmd.Stdin = strings.NewReader(script)
		cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
		var stderr strings.Builder
		cmd.Stderr = &stderr // the shell's own complaints, e.g. no pulsectl on PATH for names
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", shell, err, out, stderr.String())
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			w, _, _ := strings.Cut(line, "\t") // fish: word<TAB>description
			if w != "" && strings.HasPrefix(w, words[len(words)-1]) {
				got = append(got, w)
			}
		}
		slices.Sort(got)
		return got
	}
}

// acceptedFlags returns the flags c accepts, sorted, with the dashes they
// are typed with.
func acceptedFlags(t *testing.T, c *command) []string {
	var fs *flag.FlagSet
	c.run(t.Context(), &env{inspect: func(f *flag.FlagSet) { fs = f }}, c, nil)
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, flagName(f.Name)) })
	slices.Sort(flags)
	return flags
}

// The completion scripts offer each command exactly the flags it accepts,
// with the dashes they are typed with, and the values of the flags that
// have a fixed set.
func TestCompletion(t *testing.T) {
	complete := bashComplete(t, t.TempDir())
	if zsh, bash := mustRun(t, "completion", "zsh"), mustRun(t, "completion", "bash"); !strings.HasPrefix(zsh, "#compdef pulsectl\n") || !strings.HasSuffix(zsh, bash) {
		t.Errorf("the zsh script is not the bash one behind bashcompinit:\n%s", zsh)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"pulsectl", "s"}, "set state"},
		{[]string{"pulsectl", "li"}, "list"},
		{[]string{"pulsectl", "w"}, "wait watch"},
		{[]string{"pulsectl", "ls", "--st"}, "--state"},
		{[]string{"pulsectl", "list", "--st"}, "--state"},
		{[]string{"pulsectl", "--addr", "127.0.0.1:1", "ls", "--st"}, "--state"},
		{[]string{"pulsectl", "ls", "--state", "fl"}, "flapping"},
		{[]string{"pulsectl", "ls", "-o", ""}, "text json yaml wide"},
		{[]string{"pulsectl", "state", "-o", ""}, "text json yaml"},
		{[]string{"pulsectl", "wait", "web-1", "--for", ""}, "healthy removed routable unhealthy"},
		{[]string{"pulsectl", "add", "--model", ""}, "rise_fall three_state"},
		{[]string{"pulsectl", "check", "--no"}, "--no-follow-redirects"},
		{[]string{"pulsectl", "completion", ""}, "bash zsh fish"},
		{[]string{"pulsectl", "config", ""}, "view get-contexts use-context"},
		{[]string{"pulsectl", "policy", ""}, "get set"},
		{[]string{"pulsectl", "--co"}, "--config --context"},
	} {
		if got := strings.Join(complete(tc.words...), " "); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.words, got, tc.want)
		}
	}
	fish := mustRun(t, "completion", "fish")
	for _, c := range commands() {
		want := acceptedFlags(t, c)
		got := complete("pulsectl", c.name, "-")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("bash offers %s the flags %q, want %q", c.name, got, want)
		}
		for _, f := range got {
			if !regexp.MustCompile(`^(-[a-z]|--[a-z][a-z0-9-]+)$`).MatchString(f) {
				t.Errorf("bash offers %s the flag %q", c.name, f)
			}
		}
		// fish: -s o for a one-letter flag, -l name for the others.
		var fishFlags []string
		for _, m := range regexp.MustCompile(`(?m)^complete -c pulsectl -n '__fish_seen_subcommand_from `+regexp.QuoteMeta(c.name)+`(?: [a-z]+)*' (-[sl]) (\S+)`).FindAllStringSubmatch(fish, -1) {
			if m[1] == "-s" {
				fishFlags = append(fishFlags, "-"+m[2])
			} else {
				fishFlags = append(fishFlags, "--"+m[2])
			}
		}
		slices.Sort(fishFlags)
		if !slices.Equal(fishFlags, want) {
			t.Errorf("fish offers %s the flags %q, want %q", c.name, fishFlags, want)
		}
	}
	if r := pulsectl(t, "completion", "tcsh"); r.code != exitUsage {
		t.Errorf("completion tcsh: %+v", r)
	}
}

// The fish and zsh scripts, loaded in the real shells, offer each command
// exactly the flags it accepts, and the values of a flag with a fixed set.
func TestCompletionFishAndZsh(t *testing.T) {
	for _, shell := range []string{"fish", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			complete := shellComplete(t, shell, t.TempDir())
			for _, c := range commands() {
				want := acceptedFlags(t, c)
				if got := complete("pulsectl", c.name, "-"); !slices.Equal(got, want) {
					t.Errorf("%s offers %s the flags %q, want %q", shell, c.name, got, want)
				}
			}
			for _, tc := range []struct {
				words []string
				want  string
			}{
				{[]string{"pulsectl", "ls", "--st"}, "--state"},
				{[]string{"pulsectl", "ls", "--state", "fl"}, "flapping"},
				{[]string{"pulsectl", "add", "--model", ""}, "rise_fall three_state"},
				{[]string{"pulsectl", "wait", "web-1", "--for", ""}, "healthy removed routable unhealthy"},
			} {
				if got := strings.Join(complete(tc.words...), " "); got != tc.want {
					t.Errorf("%s: %q: %q, want %q", shell, tc.words, got, tc.want)
				}
			}
		})
	}
}

// Target, group and context names come from pulsed, and from the config
// file, through the hidden __complete command, at the address on the
// line; with pulsed unreachable, nothing is offered and nothing said.
func TestCompletionNames(t *testing.T) {
	dir := t.TempDir()
	if _, err := pulsedproc.Build(t.Context(), dir, "."); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pulsectl")); err != nil {
		t.Fatal(err)
	}
	complete := bashComplete(t, dir)
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	quiet(t, p.Addr,
		[]string{"--name", "web-1", "--group", "edge", "--tcp", closedAddr(t)},
		[]string{"--name", "web-2", "--group", "edge", "--tcp", closedAddr(t)},
		[]string{"--name", "db-1", "--group", "core", "--tcp", closedAddr(t)},
	)
	writeConfig(t, "current-context: prod\ncontexts:\n  prod: {addr: 192.0.2.1:50051}\n  local: {addr: 127.0.0.1:50051}\n")
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"pulsectl", "state", addr, "w"}, "web-1 web-2"},
		{[]string{"pulsectl", "--addr", p.Addr, "rm", ""}, "db-1 web-1 web-2"},
		{[]string{"pulsectl", "wait", "--addr", p.Addr, "web-1", "w"}, "web-1 web-2"},
		{[]string{"pulsectl", "ls", addr, "--group", ""}, "core edge"},
		{[]string{"pulsectl", "healthy", addr, "e"}, "edge"},
		{[]string{"pulsectl", "policy", "get", addr, ""}, "core edge"},
		{[]string{"pulsectl", "watch", addr, "--name", "d"}, "db-1"},
		{[]string{"pulsectl", "config", "use-context", ""}, "local prod"},
		{[]string{"pulsectl", "--context", ""}, "local prod"},
		{[]string{"pulsectl", "state", "--addr", closedAddr(t), ""}, ""},
	} {
		if got := strings.Join(complete(tc.words...), " "); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.words, got, tc.want)
		}
	}
	for _, shell := range []string{"fish", "zsh"} {
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("%s is not installed (Debian: apt-get install %s): its name completion is not checked", shell, shell)
			continue
		}
		complete := shellComplete(t, shell, dir)
		for _, tc := range []struct {
			words []string
			want  string
		}{
			{[]string{"pulsectl", "state", "--addr", p.Addr, "w"}, "web-1 web-2"},
			{[]string{"pulsectl", "ls", "--addr", p.Addr, "--group", ""}, "core edge"},
			{[]string{"pulsectl", "healthy", "--addr", p.Addr, "e"}, "edge"},
		} {
			if got := strings.Join(complete(tc.words...), " "); got != tc.want {
				t.Errorf("%s: %q: %q, want %q", shell, tc.words, got, tc.want)
			}
		}
	}
	if r := pulsectl(t, "__complete", "targets", "--addr", closedAddr(t)); r.stdout != "" || r.stderr != "" || r.code == exitOK {
		t.Errorf("__complete with pulsed unreachable: %+v", r)
	}
	if out := mustRun(t, "__complete", "groups", addr); out != "core\nedge\n" {
		t.Errorf("__complete groups: %q", out)
	}
}
