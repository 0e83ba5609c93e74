package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A mistyped flag or a value that does not parse gets one line that names
// the flag, what it takes or the closest flag, and where the list is; the
// usage is printed for -h alone.
func TestParseFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-grpc-listen", "127.0.0.1:1"}, "flag provided but not defined: -grpc-listen; did you mean -listen? (pulsed -h lists the flags)"},
		{[]string{"-intervl", "5s"}, "flag provided but not defined: -intervl; did you mean -interval? (pulsed -h lists the flags)"},
		{[]string{"-xyzzy"}, "flag provided but not defined: -xyzzy (pulsed -h lists the flags)"},
		{[]string{"-interval", "soon"}, `invalid value "soon" for flag -interval: parse error: want a duration such as 5s, 250ms or 1m30s (pulsed -h lists the flags)`},
		{[]string{"-rise", "many"}, `invalid value "many" for flag -rise: parse error: want a whole number (pulsed -h lists the flags)`},
	} {
		var stderr bytes.Buffer
		_, err := parseFlags(tt.args, &stderr)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
		if stderr.Len() != 0 {
			t.Errorf("%q: printed %q, want nothing (main prints the error)", tt.args, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(stderr.String(), "Usage: pulsed [flags]") || !strings.Contains(stderr.String(), "-data-dir directory") {
		t.Errorf("-h: %v, printed %.80q, want the usage", err, stderr.String())
	}
}

// A relative -data-dir depends on where pulsed starts: the log names the
// store by its absolute path, and says when it was created empty.
func TestStoreLoggedByAbsolutePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for i, want := range []string{"store created: no targets yet", "store opened"} {
		var logs bytes.Buffer
		st, err := openStore("pulse-data", slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		abs := filepath.Join(dir, "pulse-data", "pulse.db")
		if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "path="+abs) {
			t.Errorf("open %d logged %q, want %q and path=%s", i+1, logs.String(), want, abs)
		}
	}
}

// An address in use stops pulsed before it opens anything: the error names
// the flag, and no store is created.
func TestAddressInUseStopsBeforeTheStore(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyUDP.Close()
	for _, tt := range []struct{ flag, addr string }{
		{"-listen", busy.Addr().String()},
		{"-http-listen", busy.Addr().String()},
		{"-dns-listen", busyUDP.LocalAddr().String()},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := []string{"-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-data-dir", dir, tt.flag, tt.addr}
		err := run(args, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tt.flag+": ") || !strings.Contains(err.Error(), "address already in use") {
			t.Errorf("%s %s in use: %v, want an error that names the flag", tt.flag, tt.addr, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s %s in use: the data directory was made (%v); want nothing opened", tt.flag, tt.addr, err)
		}
	}
}
