package main

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A numeric flag's value that does not parse says what the flag takes,
// and one too large to send says the flag's bound where its help states
// one, else the limit of its type; never a bare "parse error". Nothing is
// sent: no pulsed listens at the default address here.
func TestNumericFlagErrors(t *testing.T) {
	tcp := []string{"add", "--name", "x", "--tcp", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string // stderr's first line
	}{
		{append(tcp, "--rise", "abc"), `invalid value "abc" for flag --rise: want a whole number`},
		{append(tcp, "--rise", "99999999999"), `invalid value "99999999999" for flag --rise: too large: want a whole number up to 2147483647`},
		{append(tcp, "--fall", "-99999999999999999999"), `invalid value "-99999999999999999999" for flag --fall: too small: want a whole number from -2147483648`},
		{append(tcp, "--vantages", "99999999999"), `invalid value "99999999999" for flag --vantages: too large: want a whole number up to 9`},
		{append(tcp, "--flap-threshold", "many"), `invalid value "many" for flag --flap-threshold: want a whole number from 0 to 256`},
		{[]string{"set", "x", "--passive-rate", "1.5"}, `invalid value "1.5" for flag --passive-rate: want a whole number`},
		{[]string{"policy", "set", "edge", "--vantages", "-99999999999"}, `invalid value "-99999999999" for flag --vantages: too small: want a whole number from 0`},
		{[]string{"policy", "set", "edge", "--outlier-max-ejection-percent", "4294967296"}, `invalid value "4294967296" for flag --outlier-max-ejection-percent: too large: want a whole number up to 100`},
		{[]string{"policy", "set", "edge", "--max-unhealthy-fraction", "half"}, `invalid value "half" for flag --max-unhealthy-fraction: want a number such as 0.5`},
		{[]string{"watch", "--since", "abc"}, `invalid value "abc" for flag --since: want a revision`},
		{[]string{"watch", "--since", "-1"}, `invalid value "-1" for flag --since: want a revision`},
		{[]string{"watch", "--since", "99999999999999999999"}, `invalid value "99999999999999999999" for flag --since: too large: want a revision up to 18446744073709551615`},
		{[]string{"check", "--workers", "abc", "t.yaml"}, `invalid value "abc" for flag --workers: want a whole number`},
		{[]string{"check", "--retries", "99999999999999999999", "t.yaml"}, `invalid value "99999999999999999999" for flag --retries: too large: want a whole number up to 9223372036854775807`},
	} {
		r := pulsectl(t, tc.args...)
		first, _, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || first != "pulsectl: "+tc.want || r.stdout != "" {
			t.Errorf("pulsectl %q: exit %d\nstdout: %s\nstderr: %s\nwant exit %d and %q", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}
}

// A duration too large to read is refused with the flag's bound, as a
// value past it is, or with the longest duration there is when the flag
// states none; every duration flag takes a Go duration or seconds, and
// says so when given neither.
func TestDurationFlagErrors(t *testing.T) {
	tcp := []string{"add", "--name", "x", "--tcp", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string // stderr's first line
	}{
		{append(tcp, "--interval", "99999999h"), `invalid value "99999999h" for flag --interval: too large: must be at most 24h0m0s`},
		{append(tcp, "--interval", "1e30"), `invalid value "1e30" for flag --interval: too large: must be at most 24h0m0s`},
		{append(tcp, "--interval", "-1e30"), `invalid value "-1e30" for flag --interval: must be positive, got -1e30`},
		{append(tcp, "--timeout", "3000000000000000h"), `invalid value "3000000000000000h" for flag --timeout: too large: must be at most 1h0m0s`},
		{[]string{"set", "x", "--remove-after-unhealthy", "99999999h"}, `invalid value "99999999h" for flag --remove-after-unhealthy: too large: must be at most 720h0m0s`},
		{[]string{"policy", "set", "edge", "--outlier-interval", "99999999h"}, `invalid value "99999999h" for flag --outlier-interval: too large: must be at most 1h0m0s`},
		{[]string{"outcome", "x", "--ok", "--latency", "99999999h"}, `invalid value "99999999h" for flag --latency: too large: must be at most 2562047h47m16.854775807s`},
		{[]string{"rm", "x", "--drain", "abc"}, `invalid value "abc" for flag --drain: want a duration such as 20s or a number of seconds, got "abc"`},
		{[]string{"rm", "x", "--drain", "99999999h"}, `invalid value "99999999h" for flag --drain: too large: must be at most 24h0m0s`},
		{[]string{"wait", "x", "--for", "healthy", "--timeout", "abc"}, `invalid value "abc" for flag --timeout: want a duration such as 20s or a number of seconds, got "abc"`},
		{[]string{"wait", "x", "--for", "healthy", "--timeout", "-1s"}, `invalid value "-1s" for flag --timeout: must be 0 or more, got -1s`},
		{[]string{"watch", "--reconnect", "99999999h"}, `invalid value "99999999h" for flag --reconnect: too large: must be at most 24h0m0s`},
		{[]string{"drain", "x", "--until", "99999999h"}, `--until: too large: must be at most 720h0m0s ahead`},
	} {
		r := pulsectl(t, tc.args...)
		first, _, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || first != "pulsectl: "+tc.want || r.stdout != "" {
			t.Errorf("pulsectl %q: exit %d\nstdout: %s\nstderr: %s\nwant exit %d and %q", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}
	// Seconds, and 0 where it means none: the flags take them, and the
	// command goes on to find no pulsed.
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"rm", "x", "--drain", "30"},
		{"wait", "x", "--for", "healthy", "--timeout", "0s"},
		{"watch", "--reconnect", "0.0"},
	} {
		if r := pulsectl(t, append(args, "--addr", addr)...); r.code != exitServer {
			t.Errorf("pulsectl %q: exit %d, want %d\nstderr: %s", args, r.code, exitServer, r.stderr)
		}
	}
}

// Every duration flag's help names its value "duration".
func TestDurationFlagsHelp(t *testing.T) {
	for _, c := range commands() {
		var fs *flag.FlagSet
		c.run(t.Context(), &env{inspect: func(f *flag.FlagSet) { fs = f }}, c, nil)
		if fs == nil {
			continue
		}
		fs.VisitAll(func(f *flag.Flag) {
			switch f.Value.(type) {
			case *bounded, *secondsFlag, *zeroSecondsFlag:
			default:
				if g, ok := f.Value.(flag.Getter); !ok || reflect.TypeOf(g.Get()) != reflect.TypeFor[time.Duration]() {
					return
				}
			}
			if name, _ := flag.UnquoteUsage(f); name != "duration" {
				t.Errorf("pulsectl %s --help: --%s %s, want --%s duration", c.name, f.Name, name, f.Name)
			}
		})
	}
	for _, tc := range [][2]string{{"wait", "--timeout duration\n"}, {"watch", "--reconnect duration\n"}} {
		if out := mustRun(t, tc[0], "--help"); !strings.Contains(out, tc[1]) {
			t.Errorf("pulsectl %s --help lacks %q:\n%s", tc[0], tc[1], out)
		}
	}
}
