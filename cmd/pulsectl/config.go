package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	pulse "github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/cmd/internal/suggest"
)

// The connection settings of a client command come, each on its own, from
// the first of: its flag, its environment variable, the config file's
// current context, the built-in default. `pulsectl config view` shows
// which.

// Environment variables pulsectl reads.
const (
	envAddr    = "PULSE_ADDR"    // host:port of pulsed, or several, comma-separated
	envCACert  = "PULSE_CACERT"  // -tls-ca
	envCert    = "PULSE_CERT"    // -tls-cert
	envKey     = "PULSE_KEY"     // -tls-key
	envOutput  = "PULSE_OUTPUT"  // -o, for the commands that take that format
	envConfig  = "PULSE_CONFIG"  // --config
	envContext = "PULSE_CONTEXT" // --context
)

// configFile is pulsectl's config file: named contexts, one of them
// current.
//
//	current-context: prod
//	contexts:
//	  prod:
//	    addr: pulse-1.internal:50051,pulse-2.internal:50051
//	    tls-ca: /etc/pulse/ca.crt
//	    token-file: /etc/pulse/pulsectl.token
//	  local:
//	    addr: 127.0.0.1:50051
type configFile struct {
	CurrentContext string                    `yaml:"current-context"`
	Contexts       map[string]configSettings `yaml:"contexts"`
}

// configSettings are one context's settings; each is optional.
type configSettings struct {
	Addr          string `yaml:"addr"`
	TLS           bool   `yaml:"tls"`
	TLSCA         string `yaml:"tls-ca"`
	TLSCert       string `yaml:"tls-cert"`
	TLSKey        string `yaml:"tls-key"`
	TLSServerName string `yaml:"tls-server-name"`
	TokenFile     string `yaml:"token-file"`
	Output        string `yaml:"output"`
}

// defaultConfigPath is where pulsectl looks for its config file when
// neither --config nor PULSE_CONFIG names one: pulse/pulsectl.yaml in the
// user's config directory ($XDG_CONFIG_HOME, else ~/.config).
func defaultConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "pulse", "pulsectl.yaml")
}

// setting is a resolved setting and where it came from.
type setting struct {
	name, value, source string
	secret              bool
}

// resolve fills the connection settings cf's flags left unset from the
// environment and the config file, and records where each came from. It
// is called once, after the flags are parsed.
func (cf *clientFlags) resolve() error {
	set := map[string]bool{}
	cf.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cf.sources = map[string]string{}

	cfgPath, named := cf.configFile()
	var (
		ctxSettings configSettings
		file        *configFile
		err         error
	)
	ctxName := cf.contextName()
	if cfgPath != "" {
		if file, err = loadConfig(cfgPath, named); err != nil {
			return err
		}
	}
	switch {
	case file != nil:
		cf.configUsed = cfgPath
		if ctxName == "" {
			ctxName = file.CurrentContext
		}
		if ctxName != "" {
			s, ok := file.Contexts[ctxName]
			if !ok {
				return fmt.Errorf("config %s: no context %q (it has %s)", cfgPath, ctxName, orList(slices.Sorted(maps.Keys(file.Contexts))))
			}
			ctxSettings = s
		}
	case ctxName != "" && cfgPath != "":
		// A context named with no file to hold it: never the defaults,
		// which would answer from another pulsed than the one asked for.
		return fmt.Errorf("context %q: %s", ctxName, noConfigFile(cfgPath))
	case ctxName != "":
		return fmt.Errorf("context %q: no config file (make %s, or name one with --config)", ctxName, defaultConfigPath())
	}
	cf.contextUsed = ctxName
	fromConfig := "config " + cf.configUsed + " (context " + ctxName + ")"

	pick := func(name string, flagVal *string, env, cfgVal string) {
		switch {
		case set[name]:
			cf.sources[name] = "flag --" + name
		case env != "" && os.Getenv(env) != "":
			*flagVal = os.Getenv(env)
			cf.sources[name] = "env " + env
		case cfgVal != "":
			*flagVal = cfgVal
			cf.sources[name] = fromConfig
		case *flagVal != "":
			cf.sources[name] = "default"
		}
	}
	pick("addr", &cf.addr, envAddr, ctxSettings.Addr)
	pick("tls-ca", &cf.conn.CA, envCACert, ctxSettings.TLSCA)
	pick("tls-cert", &cf.conn.Cert, envCert, ctxSettings.TLSCert)
	pick("tls-key", &cf.conn.Key, envKey, ctxSettings.TLSKey)
	pick("tls-server-name", &cf.conn.ServerName, "", ctxSettings.TLSServerName)
	switch {
	case set["token"]:
		cf.sources["token"] = "flag --token"
	case !set["token-file"] && os.Getenv(pulse.TokenEnv) != "":
		// The client reads it: it comes before the config's token file.
		cf.sources["token"] = "env " + pulse.TokenEnv
	default:
		pick("token-file", &cf.conn.TokenFile, "", ctxSettings.TokenFile)
	}
	if set["o"] {
		cf.sources["o"] = "flag -o"
	}
	switch {
	case set["tls"]:
		cf.sources["tls"] = "flag --tls"
	case ctxSettings.TLS:
		cf.conn.TLS = true
		cf.sources["tls"] = fromConfig
	}
	if f := cf.fs.Lookup("o"); f != nil {
		cf.output, _ = f.Value.(*outputFlag)
	}
	if cf.output != nil && !set["o"] {
		v, src := os.Getenv(envOutput), "env "+envOutput
		if v == "" {
			v, src = ctxSettings.Output, fromConfig
		}
		// A preference: a command without that format keeps its own.
		if v != "" && cf.output.Set(v) == nil {
			cf.sources["o"] = src
		}
	}
	return nil
}

// configFile returns the config file's path: --config, else PULSE_CONFIG,
// else the default path; named is false for the default, which need not
// exist. It is "" when there is no default (no home directory).
func (cf *clientFlags) configFile() (path string, named bool) {
	if cf.fs.Lookup("config") != nil && isSet(cf.fs, "config") {
		return cf.configPath, true
	}
	if v := os.Getenv(envConfig); v != "" {
		return v, true
	}
	return defaultConfigPath(), false
}

// contextName returns the context asked for: --context, else
// PULSE_CONTEXT; "" for the config file's current-context.
func (cf *clientFlags) contextName() string {
	if isSet(cf.fs, "context") {
		return cf.context
	}
	return os.Getenv(envContext)
}

// isSet reports whether the flag name was given on fs's command line.
func isSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// addrs is --addr split into the replicas it names.
func (cf *clientFlags) addrs() []string {
	var out []string
	for a := range strings.SplitSeq(cf.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// settings lists the connection settings in force, for config view.
func (cf *clientFlags) settings() []setting {
	show := func(name, value string, secret bool) setting {
		src := cf.sources[name]
		if value == "" || src == "" {
			value, src = "", "unset"
		}
		return setting{name: name, value: value, source: src, secret: secret}
	}
	out := []setting{
		show("addr", cf.addr, false),
		show("tls-ca", cf.conn.CA, false),
		show("tls-cert", cf.conn.Cert, false),
		show("tls-key", cf.conn.Key, false),
		show("tls-server-name", cf.conn.ServerName, false),
		show("token-file", cf.conn.TokenFile, false),
	}
	token := cf.conn.Token
	if token == "" && cf.sources["token"] != "" {
		token = os.Getenv(pulse.TokenEnv)
	}
	out = append(out, show("token", token, true))
	tlsOn := "off"
	if cf.conn.TLS || cf.conn.CA != "" || cf.conn.Cert != "" {
		tlsOn = "on"
	}
	tlsSrc := cf.sources["tls"]
	if tlsSrc == "" {
		tlsSrc = "implied by tls-ca/tls-cert, else off"
	}
	out = append(out, setting{name: "tls", value: tlsOn, source: tlsSrc})
	if cf.output != nil {
		src := cf.sources["o"]
		if src == "" {
			src = "default"
		}
		out = append(out, setting{name: "o", value: cf.output.v, source: src})
	}
	return out
}

func configCommand() *command {
	return &command{
		name:    "config",
		args:    "view | get-contexts | use-context NAME [flags]",
		summary: "show the settings in force and where each came from; list or switch contexts",
		about: `'pulsectl config view' shows the settings a client command would use, each
with its source (flag, env, config file and context, or default).
'pulsectl config get-contexts' lists the config file's contexts, "*" marking
the one in force. 'pulsectl config use-context NAME' makes NAME the file's
current-context (it rewrites that one key, keeping the rest of the file); an
unknown NAME is an error that changes nothing.

Each setting comes from the first of: its flag, its environment
variable (PULSE_ADDR, comma-separated replicas; PULSE_TOKEN; PULSE_CACERT;
PULSE_CERT; PULSE_KEY; PULSE_OUTPUT), the config file's context, the default.

The config file is --config, else PULSE_CONFIG, else pulse/pulsectl.yaml in the
user's config directory ($XDG_CONFIG_HOME or ~/.config), if it exists. It holds
named contexts; --context (or PULSE_CONTEXT) picks one, else its
current-context:

  current-context: prod
  contexts:
    prod:
      addr: pulse-1.internal:50051,pulse-2.internal:50051
      tls-ca: /etc/pulse/ca.crt
      token-file: /etc/pulse/pulsectl.token
      output: json
    local:
      addr: 127.0.0.1:50051

Keys: addr, tls, tls-ca, tls-cert, tls-key, tls-server-name, token-file, output.
A token itself is never read from the file (use token-file) and is shown
redacted.`,
		example: `pulsectl config view
pulsectl config get-contexts
pulsectl config use-context local
pulsectl --context local config view
PULSE_ADDR=192.0.2.5:50051 pulsectl config view`,
		run: runConfig,
	}
}

func runConfig(_ context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	addOutputFlag(fs, "the default output format the other commands would use", "yaml", "wide")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	verbs := []string{"view", "get-contexts", "use-context"}
	switch {
	case len(pos) == 0:
		return c.usageError(e, "name one of %s", orList(verbs))
	case !slices.Contains(verbs, pos[0]):
		return c.usageError(e, "unknown config command %q: want %s%s", pos[0], orList(verbs), didYouMean(suggest.Closest(pos[0], verbs, nil)))
	case pos[0] == "use-context" && len(pos) != 2:
		return c.usageError(e, "usage: pulsectl config use-context NAME")
	case pos[0] != "use-context" && len(pos) != 1:
		return c.usageError(e, "usage: pulsectl config %s (no arguments)", pos[0])
	case pos[0] == "get-contexts":
		return getContexts(e, cf)
	case pos[0] == "use-context":
		return useContext(e, cf, pos[1])
	}
	if err := cf.resolve(); err != nil {
		e.errorf("%v", err)
		return exitUsage
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM")
	for _, s := range cf.settings() {
		v := s.value
		if s.secret && v != "" {
			v = "<redacted>"
		}
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.name, v, s.source)
	}
	tw.Flush()
	if cf.configUsed != "" {
		ctx := cf.contextUsed
		if ctx == "" {
			ctx = "none"
		}
		fmt.Fprintf(e.stdout, "\nconfig file %s, context %s\n", cf.configUsed, ctx)
	} else {
		fmt.Fprintf(e.stdout, "\nno config file (looked for %s)\n", defaultConfigPath())
	}
	return exitOK
}

// globalFlags are the flags pulsectl accepts before the command name
// (pulsectl --addr X ls), with whether each takes a value. run moves them
// after the command name, where the command parses them.
var globalFlags = map[string]bool{
	"addr": true, "config": true, "context": true, "o": true,
	"tls": false, "tls-ca": true, "tls-cert": true, "tls-key": true, "tls-server-name": true,
	"token": true, "token-file": true,
}

// hoistGlobalFlags returns args with the global flags before the command
// name moved after it: ["--addr", "X", "ls"] becomes ["ls", "--addr", "X"].
// An unknown flag before the command is an error naming it.
func hoistGlobalFlags(args []string) ([]string, error) {
	var global []string
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" {
		name := strings.TrimLeft(args[i], "-")
		switch name {
		case "h", "help", "version":
			return args, nil // run handles these
		}
		name, _, hasValue := strings.Cut(name, "=")
		takesValue, ok := globalFlags[name]
		if !ok {
			hint := didYouMean(suggest.Closest(name, slices.Collect(maps.Keys(globalFlags)), flagName))
			return nil, fmt.Errorf("flag %s is not a global flag; put it after the command%s", args[i], hint)
		}
		global = append(global, args[i])
		i++
		if takesValue && !hasValue {
			if i == len(args) {
				return nil, fmt.Errorf("flag %s needs a value", args[i-1])
			}
			global = append(global, args[i])
			i++
		}
	}
	if i == len(args) {
		if len(global) > 0 {
			return nil, errors.New("no command after the global flags")
		}
		return args, nil
	}
	return append(append([]string{args[i]}, global...), args[i+1:]...), nil
}
