package doctest

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/reference/pulsed-flags.md from pulsed --help")

// build builds the named commands into a temporary directory.
func build(t *testing.T, cmds ...string) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + "/"}
	for _, c := range cmds {
		args = append(args, "../../cmd/"+c)
	}
	if out, err := exec.CommandContext(t.Context(), "go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

const (
	flagsPage  = "docs/reference/pulsed-flags.md"
	flagsBegin = "<!-- pulsed --help begins -->\n```text\n"
	flagsEnd   = "```\n<!-- pulsed --help ends -->"
)

// TestFlagsReference: the flags page shows exactly what pulsed --help
// prints, so no flag is missing or stale. `go test ./internal/doctest -run
// TestFlagsReference -update` rewrites it.
func TestFlagsReference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pulsed")
	}
	dir := build(t, "pulsed")
	help, err := exec.CommandContext(t.Context(), filepath.Join(dir, "pulsed"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("pulsed --help: %v\n%s", err, help)
	}
	path := filepath.Join(root(t), flagsPage)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i, j := strings.Index(page, flagsBegin), strings.Index(page, flagsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", flagsPage, flagsBegin, flagsEnd)
	}
	got := page[i+len(flagsBegin) : j]
	if got == string(help) {
		return
	}
	if *update {
		page = page[:i+len(flagsBegin)] + string(help) + page[j:]
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s differs from pulsed --help; run: go test ./internal/doctest -run TestFlagsReference -update", flagsPage)
}

// TestAPIReference: every RPC of the proto is in the API reference.
func TestAPIReference(t *testing.T) {
	r := root(t)
	proto, err := os.ReadFile(filepath.Join(r, "proto/pulse/v1/pulse.proto"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(r, "docs/reference/api.md"))
	if err != nil {
		t.Fatal(err)
	}
	rpcs := regexp.MustCompile(`(?m)^\s*rpc (\w+)\(`).FindAllStringSubmatch(string(proto), -1)
	if len(rpcs) < 10 {
		t.Fatalf("found %d RPCs in the proto", len(rpcs))
	}
	for _, m := range rpcs {
		if !strings.Contains(string(doc), "| `"+m[1]+"` |") {
			t.Errorf("docs/reference/api.md has no row for %s", m[1])
		}
	}
}

// TestMetricsReference: every pulse_ series named in pulsed's source is in
// the metrics reference.
func TestMetricsReference(t *testing.T) {
	r := root(t)
	doc, err := os.ReadFile(filepath.Join(r, "docs/reference/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	nameRE := regexp.MustCompile(`"(pulse_[a-z0-9_]+)"`)
	seen := map[string]bool{}
	for _, d := range []string{"server", "cmd/pulsed", "checker"} {
		_ = filepath.WalkDir(filepath.Join(r, d), func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range nameRE.FindAllStringSubmatch(string(b), -1) {
				seen[m[1]] = true
			}
			return nil
		})
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 10 {
		t.Fatalf("found only %v in the source", names)
	}
	for _, n := range names {
		if !strings.Contains(string(doc), "`"+n+"`") && !strings.Contains(string(doc), "`"+strings.TrimSuffix(n, "_total")+"`") {
			t.Errorf("docs/reference/metrics.md does not list %s", n)
		}
	}
}
