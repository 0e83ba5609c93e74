package doctest

import (
	"fmt"
	"testing"
)

func TestParse(t *testing.T) {
	page := "# A page\n\n```sh run background=pulsed ready=127.0.0.1:9090\npulsed\n```\n\n" +
		"```sh run exit=5\npulsectl healthy edge\n```\n\n```text output\nno target\n```\n\n" +
		"```sh\nnot run\n```\n<!-- run: stop pulsed exit=0 -->\n<!-- run: sh curl -s x -->\n" +
		"<!-- run: start target 127.0.0.1:8080 make target -->\n<!-- run: wait target route to: [] -->\n"
	steps, err := Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Kind: Background, Line: 3, Body: "pulsed", Name: "pulsed", Ready: "127.0.0.1:9090"},
		{Kind: Run, Line: 7, Body: "pulsectl healthy edge", Exit: 5, Output: []string{"no target"}},
		{Kind: Stop, Line: 18, Name: "pulsed", Exit: 0, CheckExit: true},
		{Kind: Run, Line: 19, Body: "curl -s x"},
		{Kind: Background, Line: 20, Name: "target", Ready: "127.0.0.1:8080", Body: "make target"},
		{Kind: Wait, Line: 21, Name: "target", Body: "route to: []"},
	}
	if len(steps) != len(want) {
		t.Fatalf("got %d steps %+v, want %d", len(steps), steps, len(want))
	}
	for i := range want {
		g, w := steps[i], want[i]
		if g.Kind != w.Kind || g.Line != w.Line || g.Body != w.Body || g.Name != w.Name || g.Ready != w.Ready ||
			g.Exit != w.Exit || g.CheckExit != w.CheckExit || len(g.Output) != len(w.Output) {
			t.Errorf("step %d: got %+v, want %+v", i, g, w)
		}
	}
	for _, bad := range []string{
		"```text output\nx\n```\n",            // output with no run before it
		"```sh run color=red\nx\n```\n",       // unknown attribute
		"```sh run\nx\n",                      // never closed
		"<!-- run: stop -->\n",                // stop without a name
		"<!-- run: dance -->\n",               // unknown comment
		"```sh run background=\nx\n```\n",     // background without a name
		"<!-- run: start x 127.0.0.1:1 -->\n", // start without a command
		"<!-- run: wait x -->\n",              // wait without a text
		"```sh norun\nx\n```\n",               // norun without a reason
		"```sh norun reason=\nx\n```\n",       // norun with an empty reason
		"```sh norun because\nx\n```\n",       // norun without reason=
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestUnmarked(t *testing.T) {
	page := "```sh run\nok\n```\n" + // 1
		"```sh norun reason=fetches a module from the network\nok\n```\n" + // 4
		"```sh\nunmarked\n```\n" + // 7
		"```go\nnot shell\n```\n" + // 10
		"- a list item:\n\n  ```bash\n  unmarked\n  ```\n" + // 15
		"````console\n```sh\ninside a longer fence\n```\n````\n" + // 18
		"~~~shell\nunmarked\n~~~\n" + // 23
		"```\nno language\n```\n"
	if _, err := Parse(page); err != nil {
		t.Fatal(err)
	}
	got := Unmarked(page)
	want := []int{7, 15, 18, 23}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Unmarked = %v, want %v", got, want)
	}
}

func TestMatch(t *testing.T) {
	out := "go: downloading x\nNAME   GROUP  STATE\n\nweb-1  edge   healthy  active  pass 2/2\nweb-2  edge   unhealthy\n"
	for _, c := range []struct {
		want []string
		ok   bool
	}{
		{[]string{"...", "NAME GROUP STATE", "web-1 edge healthy ..."}, true},
		{[]string{"...", "web-1  edge  healthy ...", "web-2 ..."}, true},
		{[]string{"NAME GROUP STATE"}, false},                     // the first line is not it, and no ... before
		{[]string{"...", "web-2 ...", "web-1 ..."}, false},        // out of order
		{[]string{"...", "web-1 edge unhealthy ..."}, false},      // not there
		{[]string{"...", "web-1 edge healthy"}, false},            // the whole line must match
		{[]string{"...", "...web-2..."}, true},                    // ... within a line
		{[]string{"...", "NAME GROUP STATE", "web-2 ..."}, false}, // a line skipped without ...
	} {
		if ok, missing := Match(c.want, out); ok != c.ok {
			t.Errorf("Match(%q) = %v (missing %q), want %v", c.want, ok, missing, c.ok)
		}
	}
}
