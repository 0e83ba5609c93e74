package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func completionCommand() *command {
	return &command{
		name:    "completion",
		args:    "bash|zsh|fish",
		summary: "print a shell completion script for bash, zsh or fish",
		about: `
completion prints a script that completes pulsectl's commands, each command's
own flags, the values of -o, --state, --for, --model and --initial-state, and
the names of targets, groups and contexts. Names come from pulsed (at the
--addr, --context or --config on the line, else the settings in force)
through the hidden command 'pulsectl __complete', within 1s; when pulsed does
not answer, nothing is offered. Load the script in the shell's start-up file.`,
		example: `
pulsectl completion bash > ~/.local/share/bash-completion/completions/pulsectl
source <(pulsectl completion bash)
pulsectl completion zsh > "${fpath[1]}/_pulsectl"
pulsectl completion fish > ~/.config/fish/completions/pulsectl.fish`,
		run: runCompletion,
	}
}

// shells are the shells completion writes a script for.
var shells = []string{"bash", "zsh", "fish"}

func runCompletion(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || !slices.Contains(shells, pos[0]) {
		return c.usageError(e, "want %s, got %q%s", orList(shells), strings.Join(pos, " "), didYouMean(suggest.Closest(strings.Join(pos, " "), shells, nil)))
	}
	spec := completionSpecs(ctx)
	switch pos[0] {
	case "bash":
		fmt.Fprint(e.stdout, bashCompletion(spec))
	case "zsh":
		// zsh runs the bash function through its bash completion layer.
		fmt.Fprint(e.stdout, "#compdef pulsectl\nautoload -U +X bashcompinit && bashcompinit\n"+bashCompletion(spec))
	case "fish":
		fmt.Fprint(e.stdout, fishCompletion(spec))
	}
	return exitOK
}

// What a command's positional arguments are, for completion.
const (
	argsNone    = ""
	argsTargets = "targets"
	argsGroups  = "groups"
	argsFiles   = "files"
)

// positional says what each command's arguments are; the others take
// none, or words of their own (config, policy, completion).
var positional = map[string]string{
	"state": argsTargets, "rm": argsTargets, "set": argsTargets, "drain": argsTargets, "maint": argsTargets,
	"activate": argsTargets, "probe": argsTargets, "outcome": argsTargets, "wait": argsTargets,
	"healthy": argsGroups, "check": argsFiles,
}

// verbs are the first words of the commands that take one.
var verbs = map[string][]string{
	"config":     {"view", "get-contexts", "use-context"},
	"policy":     {"get", "set"},
	"completion": shells,
}

// cmdSpec is what completion knows of one command.
type cmdSpec struct {
	name    string
	names   []string            // name and aliases
	flags   []string            // as typed: --addr, -o
	values  map[string][]string // a flag's fixed values, by flag as typed
	valued  map[string]bool     // flags that take a value
	args    string              // argsTargets, ...
	outputs []string            // -o's values
}

// completionSpecs reads every command's flags.
func completionSpecs(ctx context.Context) []cmdSpec {
	var out []cmdSpec
	for _, c := range commands() {
		s := cmdSpec{name: c.name, names: []string{c.name}, values: map[string][]string{}, valued: map[string]bool{}, args: positional[c.name]}
		for _, a := range slices.Sorted(maps.Keys(aliases)) {
			if aliases[a] == c.name {
				s.names = append(s.names, a)
			}
		}
		var fs *flag.FlagSet
		c.run(ctx, &env{inspect: func(f *flag.FlagSet) { fs = f }}, c, nil)
		if fs != nil {
			fs.VisitAll(func(f *flag.Flag) {
				n := flagName(f.Name)
				s.flags = append(s.flags, n)
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
					s.valued[n] = true
				}
				if o, ok := f.Value.(*outputFlag); ok {
					s.values[n] = o.allowed
				}
			})
		}
		for flagName, vals := range map[string][]string{
			"--state": slices.Sorted(maps.Keys(stateFilters)), "--for": slices.Sorted(maps.Keys(waitConditions)),
			"--model": {"rise_fall", "three_state"}, "--initial-state": {"healthy", "unhealthy"},
		} {
			if slices.Contains(s.flags, flagName) {
				s.values[flagName] = vals
			}
		}
		out = append(out, s)
	}
	return out
}

// connFlags are the flags passed on to __complete, so that it asks the
// pulsed the line is about; each takes a value but --tls.
var connFlags = []string{"--addr", "--config", "--context", "--tls", "--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name", "--token", "--token-file"}

// bashCompletion is the bash completion script of pulsectl.
func bashCompletion(specs []cmdSpec) string {
	var names []string
	var cases strings.Builder
	for _, s := range specs {
		names = append(names, s.names...)
		var valued []string
		for _, f := range s.flags {
			if s.valued[f] {
				valued = append(valued, f)
			}
		}
		fmt.Fprintf(&cases, "    %s) flags=%q valued=%q args=%q verbs=%q ;;\n", strings.Join(s.names, "|"),
			strings.Join(s.flags, " "), " "+strings.Join(valued, " ")+" ", s.args, strings.Join(verbs[s.name], " "))
	}
	var values strings.Builder
	for _, s := range specs {
		for _, f := range slices.Sorted(maps.Keys(s.values)) {
			fmt.Fprintf(&values, "    %s:%s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", strings.Join(s.names, ":"+f+"|"), f, strings.Join(s.values[f], " "))
		}
	}
	slices.Sort(names)
	globalValued := []string{}
	for _, f := range slices.Sorted(maps.Keys(globalFlags)) {
		if globalFlags[f] {
			globalValued = append(globalValued, flagName(f))
		}
	}
	var global []string
	for _, f := range slices.Sorted(maps.Keys(globalFlags)) {
		global = append(global, flagName(f))
	}
	return `# bash completion of pulsectl; generated by 'pulsectl completion bash'.
_pulsectl_spec() {
  flags="" valued="" args="" verbs=""
  case $1 in
` + cases.String() + `  esac
}
# _pulsectl_names KIND lists targets, groups or contexts, asking the pulsed
# the line's connection flags name.
_pulsectl_names() {
  local -a conn=()
  local i w
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    case $w in
      --tls) conn+=("$w") ;;
      ` + strings.Join(connFlags, "=*|") + `=*) conn+=("$w") ;;
      ` + strings.Join(connFlags, "|") + `) conn+=("$w" "${COMP_WORDS[i+1]}"); i=$((i + 1)) ;;
    esac
  done
  "${COMP_WORDS[0]}" __complete "$1" "${conn[@]}" 2>/dev/null
}
_pulsectl() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local cmd="" flags valued args verbs i=1 w
  local -a pos=()
  # The command is the first word that is neither a global flag nor its value.
  while [ "$i" -lt "$COMP_CWORD" ]; do
    w=${COMP_WORDS[i]}
    case $w in
      ` + strings.Join(globalValued, "|") + `) i=$((i + 2)) ;;
      -*) i=$((i + 1)) ;;
      *) cmd=$w; i=$((i + 1)); break ;;
    esac
  done
  if [ -z "$cmd" ]; then
    case $prev in
      -o) COMPREPLY=($(compgen -W "text json yaml wide" -- "$cur")); return ;;
      --context) COMPREPLY=($(compgen -W "$(_pulsectl_names contexts)" -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
      COMPREPLY=($(compgen -W "` + strings.Join(global, " ") + ` --help --version" -- "$cur"))
    else
      COMPREPLY=($(compgen -W "` + strings.Join(names, " ") + `" -- "$cur"))
    fi
    return
  fi
  _pulsectl_spec "$cmd"
  # The words after the command that are not flags or their values.
  while [ "$i" -lt "$COMP_CWORD" ]; do
    w=${COMP_WORDS[i]}
    if [[ $w == -* ]]; then
      [[ $w != *=* && $valued == *" $w "* ]] && i=$((i + 1))
    else
      pos+=("$w")
    fi
    i=$((i + 1))
  done
  case $cmd:$prev in
` + values.String() + `  esac
  case $prev in
    --group) COMPREPLY=($(compgen -W "$(_pulsectl_names groups)" -- "$cur")); return ;;
    --context) COMPREPLY=($(compgen -W "$(_pulsectl_names contexts)" -- "$cur")); return ;;
    --name) [ "$cmd" = watch ] && COMPREPLY=($(compgen -W "$(_pulsectl_names targets)" -- "$cur")); return ;;
  esac
  if [[ $valued == *" $prev "* ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    return
  fi
  if [ -n "$verbs" ]; then
    if [ "${#pos[@]}" -eq 0 ]; then
      COMPREPLY=($(compgen -W "$verbs" -- "$cur"))
    elif [ "${#pos[@]}" -eq 1 ] && [ "$cmd" = policy ]; then
      COMPREPLY=($(compgen -W "$(_pulsectl_names groups)" -- "$cur"))
    elif [ "${#pos[@]}" -eq 1 ] && [ "${pos[0]}" = use-context ]; then
      COMPREPLY=($(compgen -W "$(_pulsectl_names contexts)" -- "$cur"))
    fi
    return
  fi
  case $args in
    targets) COMPREPLY=($(compgen -W "$(_pulsectl_names targets)" -- "$cur")) ;;
    groups) [ "${#pos[@]}" -eq 0 ] && COMPREPLY=($(compgen -W "$(_pulsectl_names groups)" -- "$cur")) ;;
    files) COMPREPLY=($(compgen -f -- "$cur")) ;;
  esac
}
complete -F _pulsectl pulsectl
`
}

// fishCompletion is the fish completion script of pulsectl.
func fishCompletion(specs []cmdSpec) string {
	var b strings.Builder
	b.WriteString(`# fish completion of pulsectl; generated by 'pulsectl completion fish'.
# __pulsectl_names KIND lists targets, groups or contexts, asking the pulsed
# the line's connection flags name.
function __pulsectl_names
    set -l words (commandline -opc)
    set -l conn
    set -l n (count $words)
    set -l i 2
    while test $i -le $n
        switch $words[$i]
            case --tls '` + strings.Join(connFlags, "=*' '") + `=*'
                set -a conn $words[$i]
            case ` + strings.Join(connFlags[:3], " ") + " " + strings.Join(connFlags[4:], " ") + `
                if test $i -lt $n
                    set -a conn $words[$i] $words[(math $i + 1)]
                    set i (math $i + 1)
                end
        end
        set i (math $i + 1)
    end
    $words[1] __complete $argv $conn 2>/dev/null
end
complete -c pulsectl -f
`)
	var all []string
	for _, s := range specs {
		all = append(all, s.names...)
		fmt.Fprintf(&b, "complete -c pulsectl -n __fish_use_subcommand -a '%s' -d '%s'\n", strings.Join(s.names, " "), fishQuote(commandSummary(s.name)))
	}
	for _, s := range specs {
		cond := "__fish_seen_subcommand_from " + strings.Join(s.names, " ")
		for _, f := range s.flags {
			opt := "-l " + strings.TrimPrefix(f, "--")
			if len(f) == 2 {
				opt = "-s " + f[1:]
			}
			val := ""
			switch {
			case s.values[f] != nil:
				val = " -x -a '" + strings.Join(s.values[f], " ") + "'"
			case f == "--group":
				val = " -x -a '(__pulsectl_names groups)'"
			case f == "--context":
				val = " -x -a '(__pulsectl_names contexts)'"
			case f == "--name" && s.name == "watch":
				val = " -x -a '(__pulsectl_names targets)'"
			case s.valued[f]:
				val = " -r -F"
			}
			fmt.Fprintf(&b, "complete -c pulsectl -n '%s' %s%s\n", cond, opt, val)
		}
		switch {
		case verbs[s.name] != nil:
			fmt.Fprintf(&b, "complete -c pulsectl -n '%s; and not __fish_seen_subcommand_from %s' -a '%s'\n", cond, strings.Join(verbs[s.name], " "), strings.Join(verbs[s.name], " "))
		case s.args == argsTargets:
			fmt.Fprintf(&b, "complete -c pulsectl -n '%s' -a '(__pulsectl_names targets)'\n", cond)
		case s.args == argsGroups:
			fmt.Fprintf(&b, "complete -c pulsectl -n '%s' -a '(__pulsectl_names groups)'\n", cond)
		case s.args == argsFiles:
			fmt.Fprintf(&b, "complete -c pulsectl -n '%s' -F\n", cond)
		}
	}
	b.WriteString("complete -c pulsectl -n '__fish_seen_subcommand_from policy; and __fish_seen_subcommand_from get set' -a '(__pulsectl_names groups)'\n")
	b.WriteString("complete -c pulsectl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from use-context' -a '(__pulsectl_names contexts)'\n")
	return b.String()
}

// commandSummary is the summary of the command called name.
func commandSummary(name string) string {
	if c := lookup(name); c != nil {
		return c.summary
	}
	return ""
}

// fishQuote escapes s for a single-quoted fish string.
func fishQuote(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

// completeTimeout bounds __complete's call: a shell waits for it.
const completeTimeout = time.Second

// completeCommand is the hidden command the completion scripts call:
// `pulsectl __complete targets|groups|contexts [connection flags]` prints
// the names, one a line. It says nothing on error: a completion that
// cannot reach pulsed offers nothing.
var completeCommand = command{
	name:    "__complete",
	args:    "targets|groups|contexts [flags]",
	summary: "list names for the completion scripts",
	about:   "__complete prints target, group or context names for the completion scripts.",
	example: "pulsectl __complete targets --addr 127.0.0.1:50051",
	run:     runComplete,
}

func runComplete(ctx context.Context, e *env, c *command, args []string) int {
	quiet := &env{stdout: e.stdout, stderr: discard{}, inspect: e.inspect, connectTimeout: e.connectTimeout, limit: e.limit}
	fs := c.flags(quiet)
	cf := addClientFlags(fs)
	pos, code, ok := c.parse(quiet, fs, args)
	if !ok || len(pos) != 1 {
		return max(code, exitUsage)
	}
	var names []string
	switch pos[0] {
	case "contexts":
		path, named := cf.configFile()
		file, err := loadConfig(path, named)
		if err != nil || file == nil {
			return exitUsage
		}
		names = slices.Collect(maps.Keys(file.Contexts))
	case "targets", "groups":
		cl, code, ok := cf.dial(quiet)
		if !ok {
			return code
		}
		defer cl.Close()
		cctx, cancel := context.WithTimeout(ctx, completeTimeout)
		defer cancel()
		resp, err := cl.ListTargets(cctx, &pb.ListTargetsRequest{})
		if err != nil {
			return exitServer
		}
		for _, st := range resp.GetTargets() {
			n := st.GetSpec().GetName()
			if pos[0] == "groups" {
				n = st.GetSpec().GetGroup()
			}
			if n != "" {
				names = append(names, n)
			}
		}
	default:
		return exitUsage
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		fmt.Fprintln(e.stdout, escape(n))
	}
	return exitOK
}

// discard is an io.Writer that drops everything.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
