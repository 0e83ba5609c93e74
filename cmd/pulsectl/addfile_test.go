package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// add --file registers a targets file larger than one AddTargets call
// takes, names the target pulsed refuses with the reason, exits 1 for it,
// and registers the others.
func TestAddFile(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	var b strings.Builder
	b.WriteString("targets:\n")
	n := 10005
	for i := range n {
		rise := 2
		if i == 10002 {
			rise = 0
		}
		fmt.Fprintf(&b, "  - {name: t%05d, group: g%d, tcp: {address: \"127.0.0.1:%d\"}, interval: 1h, rise: %d}\n", i, i%2, 1+i%60000, rise)
	}
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r := pulsectl(t, "add", addr, "--file", path)
	want := "refused t10002: rise: must be at least 1, got 0\n10005 targets: 10004 added, 0 updated or unchanged, 1 refused\n"
	if r.code != exitUsage || r.stdout != want {
		t.Fatalf("add --file: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 and:\n%s", r.code, r.stdout, r.stderr, want)
	}
	if ls := mustRun(t, "ls", addr, "--group", "g0"); !strings.Contains(ls, "t10004") || strings.Contains(ls, "t10002") {
		t.Errorf("ls --group g0 lacks t10004 or shows the refused t10002:\n%.300s", ls)
	}
	// Again: nothing new; the bad one is refused again.
	r = pulsectl(t, "add", addr, "--file", path)
	if !strings.Contains(r.stdout, "0 added, 10004 updated or unchanged, 1 refused") {
		t.Errorf("again: %s", r.stdout)
	}
	r = pulsectl(t, "add", addr, "--file", path, "--name", "x")
	if r.code != exitUsage || !strings.Contains(r.stderr, "drop --name") {
		t.Errorf("--file with --name: exit %d, stderr %s", r.code, r.stderr)
	}
}

// add --file names a field the file's message lacks with the closest
// fields of that message, when one is close; nothing is sent.
func TestAddFileUnknownField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	body := "targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\", adress: x}\n    intervall: 5s\n    colour: blue\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	r := pulsectl(t, "add", "--file", path, "--addr", closedAddr(t))
	want := "pulsectl: " + path + `:3:35 unknown field "adress", expected one of [address steps tls]
   3 |     tcp: {address: "127.0.0.1:1", adress: x}
   3 | ..................................^
Did you mean "address"?
` + path + `:4:5 unknown field "intervall", expected one of [name group http tcp grpc dns interval ...]
   4 |     intervall: 5s
   4 | ....^
Did you mean "interval"?
` + path + `:5:5 unknown field "colour", expected one of [name group http tcp grpc dns interval ...]
   5 |     colour: blue
   5 | ....^
Run 'pulsectl add --help' for usage.
`
	if r.code != exitUsage || r.stderr != want || r.stdout != "" {
		t.Errorf("add --file with unknown fields: exit %d\nstdout: %s\nstderr:\n%s\nwant exit %d and:\n%s", r.code, r.stdout, r.stderr, exitUsage, want)
	}
}
