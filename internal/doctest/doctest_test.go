package doctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// root is the repository's top, two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pages lists every Markdown page of the documentation, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	r := root(t)
	out := []string{"README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"}
	err := filepath.WalkDir(filepath.Join(r, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(r, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6} (.*)$`)
)

// anchors returns the GitHub anchors of a page's headings.
func anchors(page string) map[string]bool {
	a := map[string]bool{}
	infence := false
	for _, l := range strings.Split(page, "\n") {
		if fenceRE.MatchString(l) {
			infence = !infence
			continue
		}
		if m := headingRE.FindStringSubmatch(l); m != nil && !infence {
			s := strings.ToLower(strings.TrimSpace(m[1]))
			s = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`).ReplaceAllString(s, "")
			a[strings.ReplaceAll(s, " ", "-")] = true
		}
	}
	return a
}

// links returns a page's relative links outside code blocks.
func links(page string) []string {
	var out []string
	infence := false
	for _, l := range strings.Split(page, "\n") {
		if fenceRE.MatchString(l) {
			infence = !infence
			continue
		}
		if infence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// TestLinks: every relative link of the documentation reaches a file, and
// a heading when it names one; every page is reachable from the README in
// at most two clicks.
func TestLinks(t *testing.T) {
	r := root(t)
	all := pages(t)
	text := map[string]string{}
	for _, p := range all {
		b, err := os.ReadFile(filepath.Join(r, p))
		if err != nil {
			t.Fatal(err)
		}
		text[p] = string(b)
	}
	edges := map[string][]string{}
	for _, p := range all {
		for _, l := range links(text[p]) {
			file, anchor, _ := strings.Cut(l, "#")
			target := p
			if file != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(p), file))
			}
			if _, err := os.Stat(filepath.Join(r, target)); err != nil {
				t.Errorf("%s: link %q: %v", p, l, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") {
				if !anchors(text[target])[anchor] {
					t.Errorf("%s: link %q: %s has no heading #%s", p, l, target, anchor)
				}
			}
			edges[p] = append(edges[p], target)
		}
	}
	depth := map[string]int{"README.md": 0}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range edges[p] {
			if _, seen := depth[q]; !seen {
				depth[q] = depth[p] + 1
				queue = append(queue, q)
			}
		}
	}
	for _, p := range all {
		d, ok := depth[p]
		if !ok || d > 2 {
			t.Errorf("%s is not reachable from README.md in two clicks (depth %d, reached %v)", p, d, ok)
		}
	}
}

var ipv4RE = regexp.MustCompile(`(^|[^0-9.])((\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3}))($|[^0-9.])`)

// TestExampleAddresses: the addresses in the documentation's code blocks are
// loopback, unspecified or RFC 5737 documentation addresses, so that
// nothing pasted from the docs probes a real network. Lines about the egress
// policy name the ranges it denies, and may.
func TestExampleAddresses(t *testing.T) {
	r := root(t)
	for _, p := range pages(t) {
		b, err := os.ReadFile(filepath.Join(r, p))
		if err != nil {
			t.Fatal(err)
		}
		infence := false
		for i, l := range strings.Split(string(b), "\n") {
			if fenceRE.MatchString(l) {
				infence = !infence
				continue
			}
			if !infence || strings.Contains(l, "deny") || strings.Contains(l, "metadata") {
				continue
			}
			for _, m := range ipv4RE.FindAllStringSubmatch(l, -1) {
				if !exampleAddr(m[2]) {
					t.Errorf("%s:%d: %s is not loopback or a documentation address (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24)", p, i+1, m[2])
				}
			}
		}
	}
}

func exampleAddr(s string) bool {
	ip := net.ParseIP(s)
	if ip == nil {
		return true // a version number or the like, not an address
	}
	for _, c := range []string{"127.0.0.0/8", "0.0.0.0/32", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"} {
		_, n, _ := net.ParseCIDR(c)
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// runnablePages are the pages whose runnable steps TestPagesRun runs.
var runnablePages = []string{
	"README.md",
	"docs/getting-started.md",
	"docs/guides/discovery.md",
	"docs/guides/draining.md",
	"docs/guides/history.md",
	"docs/guides/policies.md",
	"docs/guides/replicas.md",
	"docs/guides/targets.md",
	"docs/integrations/dns.md",
	"docs/integrations/go.md",
	"docs/integrations/grpc-health.md",
	"docs/integrations/prometheus.md",
	"docs/integrations/pulse-lb.md",
	"docs/integrations/watch.md",
	"docs/integrations/xds.md",
	"docs/operations/durability.md",
	"docs/operations/limits.md",
	"docs/operations/liveness.md",
	"docs/operations/security.md",
	"docs/reference/api.md",
	"docs/reference/pulsectl.md",
}

// TestShellBlocksMarked: every shell block of a page in runnablePages runs
// in TestPagesRun, or says why not with "norun reason=...", so that no
// command a reader copies from these pages goes unchecked by oversight.
func TestShellBlocksMarked(t *testing.T) {
	r := root(t)
	for _, p := range runnablePages {
		b, err := os.ReadFile(filepath.Join(r, p))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(string(b)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
		for _, l := range Unmarked(string(b)) {
			t.Errorf("%s:%d: a shell block that neither runs (```sh run ...) nor says why not (```sh norun reason=...)", p, l)
		}
	}
}

// TestPagesRun runs the runnable steps of each page in runnablePages, in
// order, each page in a fresh copy of the repository, against the real binaries and
// processes the page starts, and checks the output the page shows.
func TestPagesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documentation's commands against real processes; not with -short")
	}
	r := root(t)
	isolated := canIsolate()
	if !isolated {
		t.Log("not root, or no unshare: the pages run on this machine's own loopback")
		for _, ports := range []string{"127.0.0.1:50051", "127.0.0.1:9090", "127.0.0.1:8080"} {
			if c, err := net.DialTimeout("tcp", ports, time.Second); err == nil {
				c.Close()
				t.Fatalf("something already listens on %s, which the documentation's examples use: stop it and run again", ports)
			}
		}
	}
	// In a network namespace the pages' commands cannot fetch modules:
	// fetch every one the pages' go commands may need first.
	for _, dir := range []string{r, filepath.Join(r, "examples")} {
		cmd := exec.CommandContext(t.Context(), "go", "mod", "download")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go mod download in %s: %v\n%s", dir, err, out)
		}
	}
	// Every page gets a fresh copy at the same path: the go command's
	// cache keys the module's own packages by their directory, so a copy
	// elsewhere recompiles all of them (about 60s of CPU a page), and one
	// here only links the binaries the page builds.
	tree := filepath.Join(t.TempDir(), "pulse")
	for _, p := range runnablePages {
		t.Run(strings.ReplaceAll(p, "/", "_"), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(r, p))
			if err != nil {
				t.Fatal(err)
			}
			steps, err := Parse(string(b))
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if len(steps) == 0 {
				t.Fatalf("%s has no runnable steps", p)
			}
			var ns *netns
			if isolated {
				ns = newNetns(t)
			}
			runPage(t, p, copyTree(t, r, tree), steps, ns)
		})
	}
}

// copyTree copies the repository's files (tracked, and new ones not
// ignored) into dst, emptied first, so that the pages' commands write
// their binaries and data there.
func copyTree(t *testing.T, r, dst string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", r, "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		t.Skipf("git ls-files: %v: the documentation's commands run in a copy of a Git checkout", err)
	}
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(r, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a plain file
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(d, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	seen int // how far a wait step has read out
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runPage runs one page's steps in dir. Each step's shell starts from the
// environment and directory the previous one ended with, as a reader's
// terminal would.
func runPage(t *testing.T, page, dir string, steps []Step, ns *netns) {
	var missing []string
	for _, s := range steps {
		if s.Kind != Needs {
			continue
		}
		for _, prog := range strings.Fields(s.Body) {
			if _, err := exec.LookPath(prog); err != nil {
				missing = append(missing, prog)
			}
		}
	}
	if len(missing) > 0 {
		pkgs := map[string]string{"dig": "dnsutils", "promtool": "prometheus"}
		var install []string
		for _, m := range missing {
			if p, ok := pkgs[m]; ok {
				m = p
			}
			install = append(install, m)
		}
		t.Skipf("SKIPPED: %s needs %s: apt-get install %s (as .ci/run does), then run again", page, strings.Join(missing, ", "), strings.Join(install, " "))
	}
	state := t.TempDir()
	envFile, cwdFile := filepath.Join(state, "env"), filepath.Join(state, "cwd")
	if err := os.WriteFile(cwdFile, []byte(dir), 0o644); err != nil {
		t.Fatal(err)
	}
	// The reader's own pulsectl config must not steer the commands.
	// A temporary directory a page makes (mktemp) goes with the test's own.
	env := append(os.Environ(), "XDG_CONFIG_HOME="+state, "PULSE_ADDR=", "PULSE_CONTEXT=", "PULSE_CONFIG=", "TMPDIR="+t.TempDir())
	bg := map[string]*proc{}
	defer func() {
		for name, p := range bg {
			stopProc(t, name, p)
		}
	}()
	for _, s := range steps {
		where := fmt.Sprintf("%s:%d", page, s.Line)
		script := fmt.Sprintf("[ -f %q ] && . %q\ncd \"$(cat %q)\"\n", envFile, envFile, cwdFile)
		switch s.Kind {
		case Run:
			// set -a: a variable a step sets is there for the next ones, as
			// in the reader's shell.
			script += fmt.Sprintf("trap 'export -p > %q; pwd > %q' EXIT\nset -ea\n%s\n", envFile, cwdFile, s.Body)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-c", script)
			ns.wrap(cmd)
			cmd.Env = env
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			err := cmd.Run()
			cancel()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if code != s.Exit {
				t.Fatalf("%s: exit status %d, the page says %d:\n%s\noutput:\n%s", where, code, s.Exit, s.Body, buf.String())
			}
			if s.Output != nil {
				if ok, missing := Match(s.Output, buf.String()); !ok {
					t.Fatalf("%s: the output lacks %q, in the order the page shows:\n%s\noutput:\n%s", where, missing, s.Body, buf.String())
				}
			}
		case Background:
			script += "exec bash -c " + shellQuote(s.Body) + "\n"
			cmd := exec.Command("bash", "-c", script)
			ns.wrap(cmd)
			cmd.Env = env
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			p := &proc{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
			cmd.Stdout, cmd.Stderr = p.out, p.out
			if err := cmd.Start(); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			go func() { _ = cmd.Wait(); close(p.done) }()
			bg[s.Name] = p
			if s.Ready != "" {
				waitReady(t, where, s.Ready, p, ns)
			}
		case Needs:
			// checked before the first step
		case Wait:
			p, ok := bg[s.Name]
			if !ok {
				t.Fatalf("%s: wait %s: no background step of that name", where, s.Name)
			}
			deadline := time.Now().Add(5 * time.Minute) // go run may build first
			// Each wait looks past what the previous one on this process
			// found, as a reader watches a terminal for the next line.
			for {
				out := p.out.String()
				if i := strings.Index(out[p.seen:], s.Body); i >= 0 {
					p.seen += i + len(s.Body)
					break
				}
				select {
				case <-p.done:
					t.Fatalf("%s: %s exited before it printed %q:\n%s", where, s.Name, s.Body, p.out.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s did not print %q within 5 minutes:\n%s", where, s.Name, s.Body, p.out.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		case Stop:
			p, ok := bg[s.Name]
			if !ok {
				t.Fatalf("%s: stop %s: no background step of that name", where, s.Name)
			}
			delete(bg, s.Name)
			stopProc(t, s.Name, p)
			if code := p.cmd.ProcessState.ExitCode(); s.CheckExit && code != s.Exit {
				t.Fatalf("%s: %s exited %d after Ctrl-C, the page says %d:\n%s", where, s.Name, code, s.Exit, p.out.String())
			}
			if s.Output != nil {
				if ok, missing := Match(s.Output, p.out.String()); !ok {
					t.Fatalf("%s: %s's output lacks %q, in the order the page shows:\n%s", where, s.Name, missing, p.out.String())
				}
			}
		}
	}
}

func waitReady(t *testing.T, where, addr string, p *proc, ns *netns) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute) // a cold build of the binaries first
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s: exited before %s accepted connections:\n%s", where, addr, p.out.String())
		default:
		}
		if ns.dial(addr) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %s accepted no connection within 10 minutes:\n%s", where, addr, p.out.String())
}

// stopProc sends SIGINT to a background step's process group, as Ctrl-C in
// its terminal does, and waits for it; SIGKILL after 30 s.
func stopProc(t *testing.T, name string, p *proc) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		t.Errorf("%s did not stop within 30s of SIGINT:\n%s", name, p.out.String())
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// canIsolate reports whether the pages can run in network namespaces of
// their own: as root, with unshare, nsenter and ip.
func canIsolate() bool {
	if os.Geteuid() != 0 {
		return false
	}
	for _, prog := range []string{"unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(prog); err != nil {
			return false
		}
	}
	return true
}

// netns is a network namespace with only its own loopback, held open by a
// process: a page's commands run in it, so that two runs of the tests do
// not share ports and nothing a page runs reaches any network. A nil
// netns runs commands in the test's own namespace.
type netns struct {
	holder *exec.Cmd
}

func newNetns(t *testing.T) *netns {
	t.Helper()
	holder := exec.Command("unshare", "--net", "--", "sh", "-c", "ip link set lo up && echo up && exec sleep 86400")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare --net: %v", err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "up\n" {
		_ = holder.Process.Kill()
		_ = holder.Wait()
		t.Fatalf("the network namespace's loopback did not come up: %q %v", buf, err)
	}
	ns := &netns{holder: holder}
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	return ns
}

// wrap makes cmd run in the namespace.
func (ns *netns) wrap(cmd *exec.Cmd) {
	if ns == nil {
		return
	}
	args := append([]string{"-t", strconv.Itoa(ns.holder.Process.Pid), "-n", "--", cmd.Path}, cmd.Args[1:]...)
	cmd.Path, _ = exec.LookPath("nsenter")
	cmd.Args = append([]string{"nsenter"}, args...)
}

// dial reports whether addr accepts a TCP connection in the namespace.
func (ns *netns) dial(addr string) bool {
	if ns == nil {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	cmd := exec.Command("bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port))
	ns.wrap(cmd)
	return cmd.Run() == nil
}
