// Package doctest reads the runnable steps out of Pulse's Markdown pages, so
// that a test can run a page's commands in order against real processes and
// check the output the page shows.
//
// A page marks what runs; everything else is prose a reader may skip:
//
//	```sh run                                       run the block with bash; it must exit 0
//	```sh run exit=5                                it must exit 5
//	```sh run background=pulsed ready=127.0.0.1:9090   start it and keep it running (a terminal of its own),
//	                                                then wait until the address accepts connections
//	```sh norun reason=TEXT                         a shell block that does not run, and why (TEXT, to the
//	                                                end of the line): rare, for what this machine cannot do,
//	                                                such as fetching a module from the network
//	```text output                                  lines the previous run block must print, in order
//	<!-- run: stop NAME -->                          send SIGINT to a background block (Ctrl-C in its terminal);
//	                                                an output block after it is matched against all it printed
//	<!-- run: stop NAME exit=N -->                   the same, and it must exit N
//	<!-- run: sh COMMAND -->                         a step the reader does by other means, e.g. in a browser
//	<!-- run: wait NAME TEXT -->                     wait until a background step has printed TEXT (what a
//	                                                reader watches for in its terminal)
//	<!-- run: needs COMMAND... -->                   the page needs these programs (Debian packages it names
//	                                                in prose); without them its steps are skipped, saying so
//	<!-- run: start NAME HOST:PORT COMMAND -->       a background step the page takes as done (set-up a
//	                                                page names in prose, such as "with pulsed running")
//
// GitHub shows the info string's first word as the block's language and
// hides the comments, so a reader sees a plain page.
//
// On a page whose steps run, every shell block (sh, bash, shell, console,
// zsh) is "run" or "norun reason=...": Unmarked finds the others, which a
// reader would take for commands that work as shown though nothing checks
// them.
//
// In an output block each line is matched against one line of the output,
// in order, after runs of spaces are made one and empty lines dropped: "..."
// alone skips any number of lines, and "..." within a line matches any text.
package doctest

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kind is what a Step does.
type Kind int

// The kinds of Step.
const (
	// Run runs Body with bash and waits for it.
	Run Kind = iota
	// Background starts Body with bash and leaves it running as Name.
	Background
	// Stop sends SIGINT to the background step called Name and waits for it.
	Stop
	// Wait waits until the background step called Name has printed Body.
	Wait
	// Needs names, in Body, the programs the page's steps need.
	Needs
)

// Step is one runnable thing on a page.
type Step struct {
	Kind Kind
	// Line is the 1-based line of the page where the step starts.
	Line int
	// Body is the shell text to run (Run and Background).
	Body string
	// Name names a background step (Background and Stop).
	Name string
	// Ready is the host:port a background step must accept connections on
	// before the next step runs; empty means no wait.
	Ready string
	// Exit is the exit status a Run step must end with, or a Stop step's
	// process when CheckExit is set.
	Exit int
	// CheckExit says a Stop step checks the process's exit status.
	CheckExit bool
	// Output holds the lines a Run step must print, or a Stop step's
	// background process must have printed; nil means no check.
	Output []string
}

var fenceRE = regexp.MustCompile("^(```+|~~~+)(.*)$")

// Parse returns the runnable steps of a Markdown page, in page order.
func Parse(page string) ([]Step, error) {
	var (
		steps []Step
		sc    = bufio.NewScanner(strings.NewReader(page))
		n     int
	)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "<!-- run:"); ok {
			d, ok = strings.CutSuffix(d, "-->")
			if !ok {
				return nil, fmt.Errorf("line %d: a run comment must end on its line", n)
			}
			s, err := directive(strings.TrimSpace(d), n)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s)
			continue
		}
		m := fenceRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fence, info, start := m[1], strings.Fields(m[2]), n
		var body []string
		closed := false
		for sc.Scan() {
			n++
			if strings.TrimSpace(sc.Text()) == fence {
				closed = true
				break
			}
			body = append(body, sc.Text())
		}
		if !closed {
			return nil, fmt.Errorf("line %d: the code block is never closed", start)
		}
		switch {
		case len(info) >= 2 && info[1] == "norun":
			if _, why, _ := strings.Cut(m[2], "reason="); len(info) < 3 || !strings.HasPrefix(info[2], "reason=") || strings.TrimSpace(why) == "" {
				return nil, fmt.Errorf("line %d: a norun block says why, as norun reason=TEXT", start)
			}
		case len(info) >= 2 && info[1] == "run":
			s, err := runStep(info[2:], strings.Join(body, "\n"), start)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s)
		case len(info) >= 2 && info[1] == "output":
			if len(steps) == 0 || steps[len(steps)-1].Kind == Background || steps[len(steps)-1].Output != nil {
				return nil, fmt.Errorf("line %d: an output block must follow a run block or a stop", start)
			}
			steps[len(steps)-1].Output = append([]string{}, body...)
		}
	}
	return steps, sc.Err()
}

func runStep(attrs []string, body string, line int) (Step, error) {
	s := Step{Kind: Run, Line: line, Body: body}
	for _, a := range attrs {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "background":
			s.Kind, s.Name = Background, v
		case "ready":
			s.Ready = v
		case "exit":
			e, err := strconv.Atoi(v)
			if err != nil {
				return s, fmt.Errorf("line %d: exit=%q is not a number", line, v)
			}
			s.Exit = e
		default:
			return s, fmt.Errorf("line %d: unknown run attribute %q", line, a)
		}
	}
	if s.Kind == Background && s.Name == "" {
		return s, fmt.Errorf("line %d: background= needs a name", line)
	}
	return s, nil
}

func directive(d string, line int) (Step, error) {
	verb, rest, _ := strings.Cut(d, " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "stop":
		f := strings.Fields(rest)
		if len(f) == 0 || len(f) > 2 {
			return Step{}, fmt.Errorf("line %d: stop takes a background step's name and an optional exit=N", line)
		}
		s := Step{Kind: Stop, Line: line, Name: f[0]}
		if len(f) == 2 {
			v, ok := strings.CutPrefix(f[1], "exit=")
			e, err := strconv.Atoi(v)
			if !ok || err != nil {
				return Step{}, fmt.Errorf("line %d: stop: %q is not exit=N", line, f[1])
			}
			s.Exit, s.CheckExit = e, true
		}
		return s, nil
	case "sh":
		return Step{Kind: Run, Line: line, Body: rest}, nil
	case "needs":
		if rest == "" {
			return Step{}, fmt.Errorf("line %d: needs takes the programs' names", line)
		}
		return Step{Kind: Needs, Line: line, Body: rest}, nil
	case "wait":
		name, text, _ := strings.Cut(rest, " ")
		if name == "" || text == "" {
			return Step{}, fmt.Errorf("line %d: wait takes a background step's name and a text", line)
		}
		return Step{Kind: Wait, Line: line, Name: name, Body: text}, nil
	case "start":
		f := strings.SplitN(rest, " ", 3)
		if len(f) < 3 {
			return Step{}, fmt.Errorf("line %d: start takes a name, an address to wait for and a command", line)
		}
		return Step{Kind: Background, Line: line, Name: f[0], Ready: f[1], Body: f[2]}, nil
	}
	return Step{}, fmt.Errorf("line %d: unknown run comment %q", line, verb)
}

// shellLangs are the languages of shell blocks, which Unmarked checks.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "zsh": true}

var anyFenceRE = regexp.MustCompile("^\\s*(```+|~~~+)(.*)$")

// Unmarked returns the 1-based lines where a page opens a shell block that
// is neither "run" nor "norun reason=...", indented ones (in a list) too.
func Unmarked(page string) []int {
	var out []int
	open := ""
	for i, l := range strings.Split(page, "\n") {
		m := anyFenceRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if open != "" {
			if strings.TrimSpace(l) == open {
				open = ""
			}
			continue
		}
		open = m[1]
		info := strings.Fields(m[2])
		if len(info) == 0 || !shellLangs[strings.ToLower(info[0])] {
			continue
		}
		if len(info) >= 2 && (info[1] == "run" || info[1] == "norun") {
			continue
		}
		out = append(out, i+1)
	}
	return out
}

// Match reports whether out shows the lines of want, as an output block
// describes them, and if not, the first line of want it could not find.
func Match(want []string, out string) (ok bool, missing string) {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if l = squeeze(l); l != "" {
			got = append(got, l)
		}
	}
	skip := false
	j := 0
	for _, w := range want {
		w = squeeze(w)
		if w == "..." {
			skip = true
			continue
		}
		re := pattern(w)
		found := false
		for j < len(got) {
			g := got[j]
			j++
			if re.MatchString(g) {
				found = true
				break
			}
			if !skip {
				return false, w
			}
		}
		if !found {
			return false, w
		}
		skip = false
	}
	return true, ""
}

func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

func pattern(w string) *regexp.Regexp {
	parts := strings.Split(w, "...")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}
