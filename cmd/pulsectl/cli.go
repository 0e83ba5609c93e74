package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	"github.com/pulsehealth/pulse/internal/version"
)

// Exit codes; see the package comment.
const (
	exitOK           = 0
	exitUsage        = 1
	exitCriticalDown = 2
	exitNotFound     = 3
	exitServer       = 4
	exitNoneRoutable = 5
	exitTimeout      = 6
	exitRefused      = 7
)

// defaultAddr is where `make run` serves pulsed.
const defaultAddr = "127.0.0.1:50051"

// env is what a command writes to, and the bounds it runs under.
type env struct {
	stdout, stderr io.Writer
	// inspect, when set, receives a command's flags in place of running
	// it: completion reads them so.
	inspect func(*flag.FlagSet)
	// connectTimeout bounds getting a connection to pulsed, in each call;
	// zero: connectTimeout.
	connectTimeout time.Duration
	// limit is the time the command was given, when its context has a
	// deadline (run sets it, to the millisecond); zero: none. A call cut
	// short by it names it, not the call's own bound.
	limit time.Duration
}

// errorf prints "pulsectl: <message>" on stderr.
func (e *env) errorf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "pulsectl: "+format+"\n", args...)
}

// command is one subcommand.
type command struct {
	name    string
	args    string // the synopsis after the name, e.g. "[flags] NAME"
	summary string // one line for `pulsectl --help`
	about   string // paragraphs for `pulsectl <name> --help`
	example string // lines of examples
	run     func(ctx context.Context, e *env, c *command, args []string) int
}

// commands returns every subcommand, in the order help lists them.
func commands() []*command {
	return []*command{addCommand(), setCommand(), rmCommand(), drainCommand(), maintCommand(), activateCommand(), stateCommand(), lsCommand(), healthyCommand(), historyCommand(), watchCommand(), waitCommand(), probeCommand(), policyCommand(), discoveryCommand(), outcomeCommand(), reloadCommand(), checkCommand(), configCommand(), completionCommand()}
}

// run runs pulsectl with args (without the program name) and returns the
// exit code. ctx ends watch and cancels check (main cancels it on SIGINT
// and SIGTERM).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return (&env{stdout: stdout, stderr: stderr}).run(ctx, args)
}

// run runs pulsectl with args in e; see run.
func (e *env) run(ctx context.Context, args []string) int {
	if dl, ok := ctx.Deadline(); ok {
		e.limit = time.Until(dl).Round(time.Millisecond)
	}
	if len(args) == 0 {
		e.errorf("name a command; the commands are:\n")
		usage(e.stderr)
		return exitUsage
	}
	args, err := hoistGlobalFlags(args)
	if err != nil {
		e.errorf("%v", err)
		fmt.Fprintln(e.stderr, "Run 'pulsectl --help' for usage.")
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-version", "--version", "version":
		fmt.Fprintln(e.stdout, version.Line("pulsectl"))
		return exitOK
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			if c := lookup(args[1]); c != nil {
				return c.run(ctx, e, c, []string{"--help"}) // the command's own flags
			}
			return unknownCommand(e, args[1])
		}
		usage(e.stdout)
		return exitOK
	}
	if name == completeCommand.name { // hidden: for the completion scripts
		return completeCommand.run(ctx, e, &completeCommand, args[1:])
	}
	c := lookup(name)
	if c == nil {
		return unknownCommand(e, name)
	}
	return c.run(ctx, e, c, args[1:])
}

// aliases are other names of commands, as kubectl and etcdctl users type
// them.
var aliases = map[string]string{"get": "state", "list": "ls", "delete": "rm"}

func lookup(name string) *command {
	if real, ok := aliases[name]; ok {
		name = real
	}
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// unknownCommand says name is no command, suggests the closest ones, and
// returns exitUsage.
func unknownCommand(e *env, name string) int {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	names = append(names, slices.Collect(maps.Keys(aliases))...)
	canonical := func(n string) string {
		if real, ok := aliases[n]; ok {
			return real
		}
		return n
	}
	e.errorf("unknown command %q; run 'pulsectl --help' for the list%s", name, didYouMean(suggest.Closest(name, names, canonical)))
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `pulsectl is the client of pulsed, the Pulse health-checking server, and a
one-shot health checker.

Usage:
  pulsectl [global flags] <command> [flags] [args]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nAliases: get (state), list (ls), delete (rm).\n")
	fmt.Fprintf(w, `
Client commands talk to pulsed at --addr (default %s,
where 'make run' serves it), or at PULSE_ADDR, or at the address of the config
file's context; 'pulsectl config view' shows the settings in force and where
each came from. The connection flags (--addr, --config, --context, --tls*,
--token*, -o) may come before the command. 'check' needs no server.

Exit codes: 0 success; 1 usage error (bad flags or arguments, an invalid check
file, a request pulsed rejected as invalid); 2 check found a critical target
down; 3 unknown target or group; 4 pulsed unreachable or failed; 5 healthy
found no routable target; 6 wait timed out; 7 pulsed refused the token, or the
TLS handshake failed for a certificate or for TLS on one side only (retrying
does not help until the settings change).

Run 'pulsectl <command> --help' for a command's flags and examples, and
'pulsectl --version' for the version.
`, defaultAddr)
}

// flags returns a new FlagSet for c. Parse errors and help are printed by
// parse, not by the flag package.
func (c *command) flags(*env) *flag.FlagSet {
	fs := flag.NewFlagSet("pulsectl "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// printHelp writes c's full help with fs's flags to w.
func (c *command) printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: pulsectl %s %s\n\n%s\n\nExamples:\n", c.name, c.args, strings.TrimSpace(c.about))
	for line := range strings.SplitSeq(strings.TrimSpace(c.example), "\n") {
		fmt.Fprintf(w, "  %s\n", strings.TrimSpace(line))
	}
	fmt.Fprint(w, "\nFlags:\n")
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprint(w, "  none\n")
		return
	}
	// The flag package writes -name; pulsectl's flags are typed --name
	// (but -o), as its errors and completion name them.
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, helpFlagLine.ReplaceAllString(b.String(), "$1--$2"))
}

// helpFlagLine matches a flag's name at the start of its line in
// PrintDefaults's output, when it has two letters or more.
var helpFlagLine = regexp.MustCompile(`(?m)^(  )-([A-Za-z0-9][A-Za-z0-9-]+)`)

// parse parses args with fs, allowing flags after positional arguments
// (pulsectl state web-1 -o json) until a "--". ok is false when the
// command must stop and exit with code: 0 after --help, exitUsage after a
// bad flag (said on stderr, "pulsectl: " first, as every error).
func (c *command) parse(e *env, fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	if e.inspect != nil {
		e.inspect(fs)
		return nil, exitOK, false
	}
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp(e.stdout, fs)
			return nil, exitOK, false
		}
		if err != nil {
			return nil, c.usageError(e, "%s", flagError(fs, err)), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, exitOK, true
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), exitOK, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// undefinedFlag is the flag package's error for a flag a command lacks.
const undefinedFlag = "flag provided but not defined: -"

// flagDash matches a flag as the flag package names it in its errors.
var flagDash = regexp.MustCompile(`(\bflag |argument: )-([A-Za-z0-9][A-Za-z0-9-]+)`)

// flagError rewrites a parse error of fs for a person: flags named with
// the dashes they are typed with (--interval, -o), a value a numeric flag
// cannot read followed by what it takes, and an unknown flag followed by
// the closest flags fs has.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if said, ok := numericValueError(fs, msg); ok {
		return said
	}
	if name, ok := strings.CutPrefix(msg, undefinedFlag); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return "unknown flag " + flagName(name) + didYouMean(suggest.Closest(name, names, flagName))
	}
	return flagDash.ReplaceAllString(msg, "${1}--$2")
}

// usageError prints a usage problem and returns exitUsage.
func (c *command) usageError(e *env, format string, args ...any) int {
	e.errorf(format, args...)
	fmt.Fprintf(e.stderr, "Run 'pulsectl %s --help' for usage.\n", c.name)
	return exitUsage
}

// outputFlag is -o: "text", "json", and for some commands "yaml" or
// "wide".
type outputFlag struct {
	v       string
	allowed []string
}

func (o *outputFlag) String() string { return o.v }

func (o *outputFlag) Set(v string) error {
	if slices.Contains(o.allowed, v) {
		o.v = v
		return nil
	}
	return fmt.Errorf("must be %s, got %q", orList(o.allowed), v)
}

func (o *outputFlag) json() bool { return o.v == "json" }

func (o *outputFlag) wide() bool { return o.v == "wide" }

// structured is true for -o json and -o yaml: the response as it is.
func (o *outputFlag) structured() bool { return o.v == "json" || o.v == "yaml" }

// addOutputFlag registers -o on fs, taking text, json and the extra
// formats given ("yaml", "wide").
func addOutputFlag(fs *flag.FlagSet, what string, extra ...string) *outputFlag {
	o := &outputFlag{v: "text", allowed: append([]string{"text", "json"}, extra...)}
	fs.Var(o, "o", "output `format`: "+orList(o.allowed)+" ("+what+")")
	return o
}

// orList joins words as "a, b or c".
func orList(words []string) string { return joinWords(words, "or") }

// andList joins words as "a, b and c".
func andList(words []string) string { return joinWords(words, "and") }

func joinWords(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}
