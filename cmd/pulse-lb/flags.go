package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/cmd/internal/dial"
	"github.com/pulsehealth/pulse/internal/version"
)

// config is what the flags say.
type config struct {
	listen   string
	backends []backendConfig

	healthPath     string
	healthInterval time.Duration
	healthTimeout  time.Duration
	unhealthyAfter int // fall
	healthyAfter   int // rise
	slowStart      time.Duration

	pulse       string     // pulsed's address; empty means the embedded checker
	pulseConn   dial.Flags // TLS, mutual TLS and token for --pulse
	group       string
	panicFrac   float64 // the group's max_unhealthy_fraction
	idleTimeout time.Duration

	responseTimeout time.Duration
	backendHeader   string
	shutdownTimeout time.Duration
	logLevel        slog.Level
	logJSON         bool
}

// backendConfig is one backend: where to send traffic, where to probe it,
// and the name it has in logs, in the checker and in pulsed.
type backendConfig struct {
	name      string
	url       *url.URL
	healthURL string
}

// usageError is a mistake in the command line: main exits 2 on it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

const usageText = `Usage: pulse-lb --backends URL,URL,... [flags]

pulse-lb is an HTTP reverse proxy that round-robins requests over the backends
that are healthy. A backend is healthy after --healthy-after consecutive
passing probes of GET <backend><health-path> (any 2xx passes) and unhealthy
after --unhealthy-after consecutive failures; backends start unhealthy and
must prove themselves first. Health comes from an embedded checker, or with
--pulse from a remote pulsed that pulse-lb registers its backends with (as
the group --group) and then follows through WatchTransitions.

When no backend is healthy pulse-lb answers 503 at once; when the backend it
chose fails the request (refused, reset, timed out) it answers 502.

Flags:
`

// parseFlags parses args. Mistakes are usageErrors; --help is flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("pulse-lb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:8000", "`address` to serve HTTP on (host:port; port 0 picks a free one)")
	backends := fs.String("backends", "", "comma-separated backend `URLs`, e.g. http://127.0.0.1:9001,http://127.0.0.1:9002 (required)")
	names := fs.String("names", "", "comma-separated `names` for the backends, in the same order (default: each backend's host:port)")
	fs.StringVar(&cfg.healthPath, "health-path", "/healthz", "`path` probed with GET on each backend")
	fs.DurationVar(&cfg.healthInterval, "health-interval", 500*time.Millisecond, "time between the starts of two probes of a backend")
	fs.DurationVar(&cfg.healthTimeout, "health-timeout", 250*time.Millisecond, "timeout of one probe; a probe that takes longer fails (at most --health-interval)")
	fs.IntVar(&cfg.unhealthyAfter, "unhealthy-after", 3, "consecutive failed probes that take a backend out of rotation")
	fs.IntVar(&cfg.healthyAfter, "healthy-after", 2, "consecutive passing probes that put a backend back in rotation")
	fs.StringVar(&cfg.pulse, "pulse", "", "`address` (host:port) of a pulsed to take health from (plaintext unless -tls, -tls-ca or -tls-cert), or a comma-separated list of pulsed replicas sharing one registry (-registry etcd): pulse-lb follows one and fails over to the next, resuming where it was; empty runs an embedded checker")
	cfg.pulseConn.Register(fs)
	fs.Float64Var(&cfg.panicFrac, "max-unhealthy-fraction", 1, "panic threshold of the backends' group: at most this fraction of backends is taken out at once (the rest stay in rotation, Envoy-style); 1 takes out every failing backend and answers 503 when all are down")
	fs.StringVar(&cfg.group, "group", "pulse-lb", "with --pulse: the `group` the backends are registered in and watched by")
	fs.DurationVar(&cfg.idleTimeout, "pulse-idle-timeout", 90*time.Second, "with --pulse: reconnect when the watch stream has been silent this long (pulsed sends a progress event every -watch-progress, 30s by default); 0 never does")
	fs.DurationVar(&cfg.slowStart, "slow-start", 0, "ramp a backend's share of requests from 0 to 100% over this `duration` after it comes back into rotation (at most 1h); 0 gives it its full share at once")
	fs.DurationVar(&cfg.responseTimeout, "response-timeout", 30*time.Second, "how long to wait for a backend's response headers before answering 502")
	fs.StringVar(&cfg.backendHeader, "backend-header", "X-Pulse-Backend", "response `header` naming the backend that served the request; empty sends none")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long to let requests in progress finish before closing them")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	format := fs.String("log-format", "text", "log `format`: text or json")
	showVersion := version.Flag(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, usageError{err} // the flag package has printed the usage
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, version.Line("pulse-lb"))
		return cfg, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return cfg, usageErrorf("unexpected argument %q; see pulse-lb --help", fs.Arg(0))
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return cfg, usageErrorf("--log-level: %v", err)
	}
	switch *format {
	case "text":
	case "json":
		cfg.logJSON = true
	default:
		return cfg, usageErrorf("--log-format must be text or json, got %q", *format)
	}
	switch {
	case cfg.healthInterval <= 0:
		return cfg, usageErrorf("--health-interval must be positive, got %v", cfg.healthInterval)
	case cfg.healthTimeout <= 0 || cfg.healthTimeout > cfg.healthInterval:
		return cfg, usageErrorf("--health-timeout must be positive and at most --health-interval (%v), got %v", cfg.healthInterval, cfg.healthTimeout)
	case cfg.unhealthyAfter < 1:
		return cfg, usageErrorf("--unhealthy-after must be at least 1, got %d", cfg.unhealthyAfter)
	case cfg.healthyAfter < 1:
		return cfg, usageErrorf("--healthy-after must be at least 1, got %d", cfg.healthyAfter)
	case !strings.HasPrefix(cfg.healthPath, "/"):
		return cfg, usageErrorf("--health-path must start with /, got %q", cfg.healthPath)
	case cfg.panicFrac <= 0 || cfg.panicFrac > 1:
		return cfg, usageErrorf("--max-unhealthy-fraction must be in (0, 1], got %g", cfg.panicFrac)
	case cfg.idleTimeout < 0:
		return cfg, usageErrorf("--pulse-idle-timeout must not be negative, got %v", cfg.idleTimeout)
	case cfg.responseTimeout <= 0:
		return cfg, usageErrorf("--response-timeout must be positive, got %v", cfg.responseTimeout)
	case cfg.shutdownTimeout <= 0:
		return cfg, usageErrorf("--shutdown-timeout must be positive, got %v", cfg.shutdownTimeout)
	}
	if err := checker.ValidateGroup(cfg.group); err != nil {
		return cfg, usageErrorf("--group %s", err)
	}
	if cfg.pulse != "" {
		for _, addr := range strings.Split(cfg.pulse, ",") {
			if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
				return cfg, usageErrorf("--pulse must be host:port, or several for pulsed replicas (host:port,host:port), e.g. 127.0.0.1:50051, got %q", addr)
			}
		}
	}
	var err error
	if cfg.backends, err = parseBackends(*backends, *names, cfg.healthPath); err != nil {
		return cfg, err
	}
	// Check each backend's spec the way the checker (and pulsed) will, so
	// that a spec they would reject is a usage error here, not a surprise
	// at run time.
	d := cfg.defaults()
	for _, b := range cfg.backends {
		if err := cfg.spec(b, checker.StateUnhealthy).WithDefaults(d).Validate(); err != nil {
			return cfg, usageErrorf("backend %s: %v", b.url, err)
		}
	}
	return cfg, nil
}

// parseBackends parses --backends and --names.
func parseBackends(list, names, healthPath string) ([]backendConfig, error) {
	if strings.TrimSpace(list) == "" {
		return nil, usageErrorf("--backends is required: a comma-separated list of URLs, e.g. --backends http://127.0.0.1:9001,http://127.0.0.1:9002")
	}
	raws := strings.Split(list, ",")
	var nameList []string
	if names != "" {
		nameList = strings.Split(names, ",")
		if len(nameList) != len(raws) {
			return nil, usageErrorf("--names lists %d names for %d backends; give one name per backend, in order", len(nameList), len(raws))
		}
	}
	out := make([]backendConfig, 0, len(raws))
	seenURL := make(map[string]bool)
	seenName := make(map[string]bool)
	for i, raw := range raws {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
			return nil, usageErrorf("--backends: %q is not an absolute http:// or https:// URL with a host, e.g. http://127.0.0.1:9001", raw)
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, usageErrorf("--backends: %q must not have a query, fragment or user info", raw)
		}
		if seenURL[u.String()] {
			return nil, usageErrorf("--backends: %q is listed twice", raw)
		}
		seenURL[u.String()] = true
		name := u.Host
		if nameList != nil {
			name = strings.TrimSpace(nameList[i])
		}
		if err := checker.ValidateName(name); err != nil {
			if nameList == nil {
				return nil, usageErrorf("--backends: cannot name backend %q by its host:port %q (%v); name it with --names", raw, name, err)
			}
			return nil, usageErrorf("--names: name %q %v", name, err)
		}
		if seenName[name] {
			return nil, usageErrorf("backend name %q is used twice; give unique names with --names", name)
		}
		seenName[name] = true
		out = append(out, backendConfig{name: name, url: u, healthURL: u.JoinPath(healthPath).String()})
	}
	return out, nil
}

// defaults are the checker defaults the health flags describe.
func (cfg config) defaults() checker.Defaults {
	return checker.Defaults{
		Interval: cfg.healthInterval,
		Timeout:  cfg.healthTimeout,
		Rise:     cfg.healthyAfter,
		Fall:     cfg.unhealthyAfter,
	}
}

// spec is backend b's target spec, starting in state initial when new.
// lifecycle is the backends' slow start, if any.
func (cfg config) lifecycle() *checker.Lifecycle {
	if cfg.slowStart == 0 {
		return nil
	}
	return &checker.Lifecycle{SlowStart: cfg.slowStart}
}

func (cfg config) spec(b backendConfig, initial checker.State) checker.Spec {
	return checker.Spec{
		Name:         b.name,
		Group:        cfg.group,
		Probe:        probe.Spec{HTTP: &probe.HTTPSpec{URL: b.healthURL}},
		Interval:     cfg.healthInterval,
		Timeout:      cfg.healthTimeout,
		Rise:         cfg.healthyAfter,
		Fall:         cfg.unhealthyAfter,
		InitialState: initial,
		Lifecycle:    cfg.lifecycle(),
	}
}
