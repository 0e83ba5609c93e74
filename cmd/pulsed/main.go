// Command pulsed is the Pulse health-checking server: it serves
// pulse.v1.HealthChecker over gRPC, probes the registered targets and
// applies rise/fall thresholds to their results.
//
// Usage:
//
//	pulsed [flags]
//
// Run pulsed --help for the flags. SIGINT or SIGTERM stops it gracefully
// within --shutdown-timeout; past it and a grace of 5s, or at a second
// signal, it exits at once with status 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/liveness"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	"github.com/pulsehealth/pulse/internal/gcheadroom"
	"github.com/pulsehealth/pulse/internal/version"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/discovery"
)

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "pulsed:", err)
		os.Exit(2)
	}
}

type config struct {
	listen           string
	dataDir          string
	registry         registryFlags
	targetsFile      string
	discoveryConfig  string
	security         securityFlags
	conns            connFlags
	defaults         checker.Defaults
	maxProbes        int
	scheduleTick     time.Duration
	scheduleTickMax  time.Duration
	scheduleBurst    int
	maxUnhealthy     float64
	overload         checker.OverloadPolicy
	reprobe          checker.ReprobePolicy
	watchHistory     int
	watchProgress    time.Duration
	shutdownTimeout  time.Duration
	livenessTimeout  time.Duration
	pageOutAfter     time.Duration
	logLevel         slog.Level
	logJSON          bool
	accessLog        bool
	httpListen       string
	metricsPerTarget bool
	dns              dnsFlags
	xds              xdsFlags
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	d := checker.StandardDefaults()
	cfg := config{defaults: d}
	fs := flag.NewFlagSet("pulsed", flag.ContinueOnError)
	// The usage is printed for -h alone: a mistyped flag gets one line that
	// names it, and the closest flag (see parseError).
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:50051", "`address` to serve gRPC on (host:port; port 0 picks a free one)")
	cfg.security.register(fs)
	cfg.conns.register(fs)
	cfg.dns.register(fs)
	cfg.xds.register(fs)
	fs.StringVar(&cfg.targetsFile, "targets", "", "YAML `file` of targets to register at start and again on SIGHUP (docs/guides/targets.md); it owns the targets it lists")
	fs.StringVar(&cfg.discoveryConfig, "discovery-config", "", "YAML `file` of discovery groups (Prometheus file_sd, http_sd and dns_sd configs, relabel rules, a target template; see docs/guides/discovery.md), reloaded on SIGHUP")
	cfg.registry.register(fs)
	fs.StringVar(&cfg.dataDir, "data-dir", "pulse-data", "`directory` of the embedded store that keeps targets and their states across restarts, and of the targets' history (history.db); \"\" keeps them in memory only")
	fs.DurationVar(&cfg.defaults.Interval, "interval", d.Interval, "default time between the starts of two probes of a target")
	fs.DurationVar(&cfg.defaults.Timeout, "timeout", d.Timeout, "default timeout of one probe (at most -interval)")
	fs.IntVar(&cfg.defaults.Rise, "rise", d.Rise, "default consecutive passes that make a target healthy")
	fs.IntVar(&cfg.defaults.Fall, "fall", d.Fall, "default consecutive failures that make a target unhealthy")
	fs.IntVar(&cfg.maxProbes, "max-concurrent-probes", 0, fmt.Sprintf("most probes in flight at once; others wait for a slot. Probes of targets whose last probe timed out take at most half of them while other probes wait. 0: an eighth of the open-file limit, from %d to %d (logged at start)", minDefaultProbes, maxDefaultProbes))
	fs.DurationVar(&cfg.scheduleTick, "schedule-tick", 10*time.Millisecond, "probes due within one tick start together, at most one tick after their due time (fewer wake-ups, less CPU per probe); the tick, or the narrowest of an adaptive one (see -schedule-tick-max); 0 starts each probe at its own due time; at most 1s")
	fs.DurationVar(&cfg.scheduleTickMax, "schedule-tick-max", 25*time.Millisecond, "the widest the tick grows to while few probes fall due: the tick is the time in which -schedule-burst probes fall due, between -schedule-tick and this; at most -schedule-tick (0 too) keeps the tick at -schedule-tick; at most 1s")
	fs.IntVar(&cfg.scheduleBurst, "schedule-burst", checker.DefaultScheduleBurst, "how many probes an adaptive tick aims to start at once, a probe that dials a new connection counting twice (see -schedule-tick-max); 1 to 100000")
	fs.DurationVar(&cfg.defaults.FastInterval, "fast-interval", 0, "default interval while a target is on its way to a transition (failing while healthy, passing while unhealthy); 0: the target's interval")
	fs.DurationVar(&cfg.defaults.DownInterval, "down-interval", 0, "default interval while a target is unhealthy; 0: the target's interval")
	fs.Float64Var(&cfg.maxUnhealthy, "max-unhealthy-fraction", 0.5, "panic threshold of groups without a policy of their own (SetGroupPolicy): at most this fraction of a group, and always at least one target, is marked unhealthy at once; the rest stay routable, held; 1 disables")
	overloadDetection := fs.Bool("overload-detection", true, "when pulsed is too slow to hear its probes' answers (see -overload-lag, -overload-stall), its own probe timeouts do not count toward fall")
	fs.DurationVar(&cfg.overload.MaxLag, "overload-lag", 0, fmt.Sprintf("a probe starting later than this after its due time (after a free slot, if it waited for one) is a sign of overload; 0: the probe's interval, and at least %v", checker.DefaultOverloadLagFloor))
	fs.IntVar(&cfg.overload.MaxWaiting, "overload-waiting", 0, "this many probes waiting for a slot at once is a sign of overload; 0: waiting is no sign (a probe's timeout starts when it gets its slot; set, hung targets that fill every slot are never marked down while they do)")
	fs.DurationVar(&cfg.overload.MaxStall, "overload-stall", checker.DefaultOverloadStall, "runnable goroutines waiting longer than this to run (the 99th percentile of each quarter second) is a sign of overload; 0: not sampled")
	fs.DurationVar(&cfg.overload.RecoverAfter, "overload-recovery", checker.DefaultOverloadRecovery, "pulsed is no longer overloaded after this long without a sign")
	reprobeOnClose := fs.Bool("reprobe-on-close", true, "when a target's peer closes or resets the connection pulsed keeps to it (http://, gRPC) while no probe uses it, probe the target at once (at most once per interval) and, while those probes fail, every -reprobe-fast-interval: a killed backend is down in (fall-1) x that")
	fs.DurationVar(&cfg.reprobe.FastInterval, "reprobe-fast-interval", checker.DefaultReprobeFastInterval, "interval of a target after a failed reprobe (see -reprobe-on-close), while it stays on its way down, unless its spec sets fast_interval; at most "+checker.MaxReprobeFastInterval.String())
	fs.IntVar(&cfg.watchHistory, "watch-history", 10000, "events kept for WatchTransitions streams to resume from; a stream further behind is ended with RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.watchProgress, "watch-progress", 30*time.Second, "how long a WatchTransitions stream may stay idle before it gets a progress event with the current revision")
	fs.DurationVar(&cfg.pageOutAfter, "page-out-after", 10*time.Second, fmt.Sprintf("this long after start, pulsed gives back the pages of its own binary that are resident, most of them touched only by its start-up (Linux 5.4 or later: madvise MADV_PAGEOUT), and again at twice, four times, ... that time, at most an hour apart, for what a later registration or reload touched once; with them the pages of the data dir's store (pulse.db) that were read; the code it runs from then on is read back from the binary as it runs; 0 keeps them; at most %v", maxPageOutAfter))
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long to let calls in progress finish before closing them; past it and a grace of 5s, or at a second signal, pulsed exits at once with status 1")
	fs.DurationVar(&cfg.livenessTimeout, "liveness-timeout", liveness.DefaultTimeout, "how long a part of pulsed (scheduler, committer, a write to the store, the watch hub, each lock a write needs) may make no progress before pulsed is not live: /healthz answers 503 and grpc.health.v1 NOT_SERVING for pulsed itself")
	fs.StringVar(&cfg.httpListen, "http-listen", "127.0.0.1:9090", "`address` to serve /metrics, the status page at /, /healthz and /readyz on (host:port; port 0 picks a free one; empty disables)")
	fs.BoolVar(&cfg.metricsPerTarget, "metrics-per-target", true, "export the per-target series: pulse_target_up and pulse_target_last_latency_seconds for each target, pulse_target_cert_expiry_seconds and pulse_target_mode for some; false drops them for very large fleets")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	format := fs.String("log-format", "text", "log `format`: text or json")
	fs.BoolVar(&cfg.accessLog, "access-log", false, "log every finished API call at info; without it, calls that end OK or with the client's own mistake (NOT_FOUND, INVALID_ARGUMENT, ...) are logged at debug, and only calls pulsed could not serve at warn or error")
	showVersion := version.Flag(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: pulsed [flags]\n\npulsed serves pulse.v1.HealthChecker over gRPC and probes the targets registered with it.\nTargets' unset fields take the defaults below.\n\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return cfg, err
		}
		return cfg, parseError(fs, err)
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, version.Line("pulsed"))
		return cfg, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q; see pulsed --help", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := cfg.registry.check(set, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.conns.check(); err != nil {
		return cfg, err
	}
	if err := cfg.dns.check(cfg.security.insecure); err != nil {
		return cfg, err
	}
	if err := cfg.xds.check(); err != nil {
		return cfg, err
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return cfg, fmt.Errorf("-log-level: %w", err)
	}
	switch *format {
	case "text":
	case "json":
		cfg.logJSON = true
	default:
		return cfg, fmt.Errorf("-log-format must be text or json, got %q", *format)
	}
	if err := cfg.defaults.Validate(); err != nil {
		// Each default is the flag of the Spec field it fills.
		var fe *checker.FieldError
		if errors.As(err, &fe) {
			return cfg, fmt.Errorf("-%s: %s", strings.ReplaceAll(fe.Field, "_", "-"), fe.Reason)
		}
		return cfg, err
	}
	cfg.overload.Disabled = !*overloadDetection
	cfg.reprobe.Disabled = !*reprobeOnClose
	switch {
	case cfg.reprobe.FastInterval < checker.MinInterval || cfg.reprobe.FastInterval > checker.MaxReprobeFastInterval:
		return cfg, fmt.Errorf("-reprobe-fast-interval must be between %v and %v, got %v", checker.MinInterval, checker.MaxReprobeFastInterval, cfg.reprobe.FastInterval)
	case cfg.maxUnhealthy <= 0 || cfg.maxUnhealthy > 1 || math.IsNaN(cfg.maxUnhealthy):
		return cfg, fmt.Errorf("-max-unhealthy-fraction must be in (0, 1] (1 disables the panic threshold), got %v", cfg.maxUnhealthy)
	case cfg.overload.MaxLag < 0 || cfg.overload.MaxWaiting < 0 || cfg.overload.MaxStall < 0 || cfg.overload.RecoverAfter <= 0:
		return cfg, fmt.Errorf("-overload-lag, -overload-waiting and -overload-stall must not be negative, -overload-recovery must be positive; got %v, %d, %v, %v", cfg.overload.MaxLag, cfg.overload.MaxWaiting, cfg.overload.MaxStall, cfg.overload.RecoverAfter)
	case cfg.scheduleTick < 0 || cfg.scheduleTick > checker.MaxScheduleTick:
		return cfg, fmt.Errorf("-schedule-tick must be between 0 and %v, got %v", checker.MaxScheduleTick, cfg.scheduleTick)
	case cfg.scheduleTickMax < 0 || cfg.scheduleTickMax > checker.MaxScheduleTick:
		return cfg, fmt.Errorf("-schedule-tick-max must be between 0 and %v, got %v", checker.MaxScheduleTick, cfg.scheduleTickMax)
	case cfg.scheduleBurst < 1 || cfg.scheduleBurst > checker.MaxScheduleBurst:
		return cfg, fmt.Errorf("-schedule-burst must be between 1 and %d, got %d", checker.MaxScheduleBurst, cfg.scheduleBurst)
	case cfg.maxProbes < 0:
		return cfg, fmt.Errorf("-max-concurrent-probes must not be negative (0: from the open-file limit), got %d", cfg.maxProbes)
	case cfg.watchHistory < 1:
		return cfg, fmt.Errorf("-watch-history must be at least 1, got %d", cfg.watchHistory)
	case cfg.watchProgress <= 0:
		return cfg, fmt.Errorf("-watch-progress must be positive, got %v", cfg.watchProgress)
	case cfg.shutdownTimeout <= 0:
		return cfg, fmt.Errorf("-shutdown-timeout must be positive, got %v", cfg.shutdownTimeout)
	case cfg.livenessTimeout <= 0:
		return cfg, fmt.Errorf("-liveness-timeout must be positive, got %v", cfg.livenessTimeout)
	case cfg.pageOutAfter < 0 || cfg.pageOutAfter > maxPageOutAfter:
		return cfg, fmt.Errorf("-page-out-after must be between 0 and %v, got %v", maxPageOutAfter, cfg.pageOutAfter)
	}
	return cfg, nil
}

// reloader re-reads pulsed's files, on SIGHUP and for the Reload call,
// one reload at a time.
type reloader struct {
	mu     sync.Mutex
	c      *checker.Checker
	cfg    config
	logger *slog.Logger
	disc   *discoveryRunner // nil until discovery has started
}

// reload re-reads the targets file and the discovery config, those pulsed
// runs with, and says what it did with each. A file with errors changes
// nothing; the log says which line is wrong.
func (r *reloader) reload() []server.ReloadResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []server.ReloadResult
	if r.cfg.targetsFile != "" {
		out = append(out, server.ReloadResult{Kind: "targets", Path: r.cfg.targetsFile, Err: r.reloadTargets()})
	}
	if r.cfg.discoveryConfig != "" && r.disc != nil {
		out = append(out, server.ReloadResult{Kind: "discovery", Path: r.cfg.discoveryConfig, Err: r.disc.reload()})
	}
	if len(out) == 0 {
		r.logger.Warn("reload ignored: no -targets file or -discovery-config to reload")
	}
	return out
}

func (r *reloader) reloadTargets() error {
	specs, err := loadTargets(r.cfg.targetsFile, r.cfg.defaults)
	if err != nil {
		r.logger.Error("targets file not applied: nothing changed", "error", err)
		return fmt.Errorf("not applied, nothing changed: %w", err)
	}
	if err := applyTargets(r.c, specs, r.logger); err != nil {
		r.logger.Error("targets file applied in part", "error", err)
		return fmt.Errorf("applied in part: %w", err)
	}
	return nil
}

// setDiscovery gives the reloader the discovery runner once it runs.
func (r *reloader) setDiscovery(d *discoveryRunner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.disc = d
}

func run(args []string, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// SIGHUP reloads the targets file; caught from the start so that an
	// early one does not kill pulsed.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	var logger *slog.Logger
	if cfg.logJSON {
		logger = slog.New(slog.NewJSONHandler(stderr, opts))
	} else {
		logger = slog.New(slog.NewTextHandler(stderr, opts))
	}
	// SIGINT and SIGTERM start the shutdown and bound it, whatever state
	// pulsed is in; registered first, stopped last, so that the bound
	// covers the deferred closes too.
	sigs := watchSignals(cfg.shutdownTimeout+shutdownGrace, logger, os.Exit)
	defer sigs.stop()

	// The files pulsed reads at start (TLS, tokens, the targets file, the
	// discovery config) are read and checked before the store is opened:
	// a start they refuse (a mistyped token file, a key pulsed may not
	// read) creates no store and connects to no etcd.
	sopts, err := cfg.security.serverOptions(cfg.listen)
	if err != nil {
		return err
	}
	egress, err := cfg.security.egress(logger)
	if err != nil {
		return err
	}
	logger.Info("probe egress policy", "policy", egress.String())
	obs := newObservability(cfg.metricsPerTarget, logger)
	if err := obs.secure(&cfg.security, cfg.httpListen, sopts.Tokens); err != nil {
		return err
	}
	var fileSpecs []checker.Spec
	if cfg.targetsFile != "" {
		if fileSpecs, err = loadTargets(cfg.targetsFile, cfg.defaults); err != nil {
			return fmt.Errorf("-targets: %w", err)
		}
	}
	disc := newDiscoveryRunner(cfg, egress, logger)
	var discCfg *discovery.Config
	if cfg.discoveryConfig != "" {
		if discCfg, err = disc.load(); err != nil {
			return fmt.Errorf("-discovery-config: %w", err)
		}
	}

	ls, err := listen(cfg)
	if err != nil {
		return err
	}
	defer ls.close()

	var (
		store  checker.Store
		bolt   *boltstore.Store
		shared *etcdreg.Registry
	)
	if cfg.registry.etcd() {
		api, page := cfg.registry.advertised(ls, obs.tls != nil)
		if shared, err = cfg.registry.openEtcd(logger, api, page); err != nil {
			return err
		}
		// Closed after the checker (deferred below): leaving gives this
		// replica's targets to the others at once.
		defer shared.Close()
	} else {
		if bolt, err = openStore(cfg.dataDir, logger); err != nil {
			return err
		}
		if bolt != nil {
			defer bolt.Close()
			store = bolt
		}
	}

	// History is flushed and closed after the checker (deferred below).
	hist := startHistory(cfg.dataDir, logger)
	defer hist.stop()

	if gcheadroom.Chosen() {
		logger.Info("garbage collector: GOGC is set; pulsed leaves the collector's headroom to it", "GOGC", os.Getenv("GOGC"))
	} else {
		logger.Info("garbage collector: headroom a quarter of the live heap and at least 2 MiB; set GOGC to choose it instead",
			"share_percent", gcheadroom.Share, "floor_bytes", gcheadroom.Floor)
		ctx, stop := context.WithCancel(context.Background())
		ticker := time.NewTicker(gcheadroom.Every)
		paced := make(chan struct{})
		go func() {
			defer close(paced)
			gcheadroom.Run(ctx, ticker.C, gcheadroom.Live, gcheadroom.Set)
		}()
		defer func() { stop(); ticker.Stop(); <-paced }()
	}
	limit := probe.OpenFileLimit()
	cfg.maxProbes = concurrentProbes(limit, cfg.maxProbes)
	probes := probe.NewFactoryWith(probe.FactoryOptions{Egress: egress, MaxIdleConns: keptConnections(limit, cfg.maxProbes)})
	defer probes.Close() // after the checker's Close, deferred below
	_, keptMost, fileLimit := probes.KeptConns()
	logger.Info("probe connections: each http:// target keeps one open between probes, up to kept_max; past it a probe dials and closes",
		"kept_max", keptMost, "open_file_limit", fileLimit, "max_concurrent_probes", cfg.maxProbes)

	obs.history = hist.rec
	obs.keptConns(probes)
	if bolt != nil {
		obs.backup = backupFrom(bolt)
	}
	cc := checker.Config{
		NewProber:            func(s probe.Spec) (checker.Prober, error) { return probes.New(s) },
		MaxTargets:           cfg.security.maxTargets,
		MaxTargetsPerGroup:   cfg.security.maxTargetsPerGroup,
		MaxWatchers:          cfg.security.maxWatchers,
		MaxWatchersPerSource: cfg.security.maxWatchersPerSource,
		Defaults:             cfg.defaults,
		MaxConcurrentProbes:  cfg.maxProbes,
		ScheduleTick:         cfg.scheduleTick,
		ScheduleTickMax:      cfg.scheduleTickMax,
		ScheduleBurst:        cfg.scheduleBurst,
		HistorySize:          cfg.watchHistory,
		// A store's revision goes on across restarts. Without one, revisions
		// start at the start time in microseconds, so a client resuming with
		// a revision from before a restart is told it is too old instead of
		// being handed the wrong events.
		StartRevision: uint64(time.Now().UnixMicro()),
		Store:         store,
		Logger:        logger.With("component", "checker"),
		Observer:      hist.observer(obs.observer),

		// Pool policies: the default panic threshold, overload detection.
		MaxUnhealthyFraction: cfg.maxUnhealthy,
		Overload:             cfg.overload,
		Reprobe:              cfg.reprobe,
	}
	if shared != nil {
		cc.Shared = shared
		cc.StartRevision = 0 // revisions are etcd's
		cc.Vantage = cfg.registry.suspect
	}
	c, err := checker.New(cc)
	if err != nil {
		return err
	}
	defer c.Close()
	if cfg.overload.MaxStall > 0 && !cfg.overload.Disabled {
		ctx, stop := context.WithCancel(context.Background())
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			liveness.SampleStalls(ctx, c.NoteStall)
		}()
		defer func() { stop(); <-sampled }()
	}
	if shared != nil {
		shared.Run(c)
	}
	sopts.Logger = logger.With("component", "grpc")
	sopts.AccessLog = cfg.accessLog
	sopts.ServerOptions = append(sopts.ServerOptions, cfg.conns.serverOptions()...)
	sopts.UnaryInterceptors = obs.unaryInterceptors()
	sopts.StreamInterceptors = obs.streamInterceptors()
	rl := &reloader{c: c, cfg: cfg, logger: logger}
	obs.discovery = disc
	srvOpts := []server.Option{server.WithProgressInterval(cfg.watchProgress), server.WithHistory(hist.rec),
		server.WithReload(rl.reload), server.WithDiscovery(disc)}
	if shared != nil {
		srvOpts = append(srvOpts, server.WithDirectory(shared))
		obs.directory = shared
	}
	gs, hs := server.NewGRPCServer(server.New(c, srvOpts...), sopts)
	stopXDS, err := startXDS(cfg, c, gs, obs.reg, logger)
	if err != nil {
		return err
	}
	defer stopXDS()
	wd, err := startWatchdog(c, cfg.livenessTimeout, hs, obs, logger)
	if err != nil {
		return err
	}
	defer wd.Close()
	sd, err := startSystemd(obs.live, logger)
	if err != nil {
		return err
	}
	defer sd.close()

	lis := cfg.conns.limit(ls.grpc, "grpc", obs.reg)
	obs.limit = func(l net.Listener) net.Listener { return cfg.conns.limit(l, "http", obs.reg) }
	obs.start(ls.http, c, gs)
	if cfg.targetsFile != "" {
		if err := applyTargets(c, fileSpecs, logger); err != nil {
			return fmt.Errorf("-targets: %w", err)
		}
	}
	if err := disc.start(c, discCfg, shared, cfg.registry, obs.reg); err != nil {
		return err
	}
	defer disc.stop()
	rl.setDiscovery(disc)
	stopDNS, err := startDNS(cfg, ls.dnsUDP, ls.dnsTCP, c, obs.reg, logger)
	if err != nil {
		return err
	}
	defer stopDNS()
	c.Start()
	logger.Info("pulsed listening", "addr", lis.Addr().String())
	defer pageOutAfter(cfg.pageOutAfter, logger, bolt)()

	ctx := sigs.ctx
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	// Ready once the store is open (above) and the scheduler has made its
	// first pass.
	select {
	case <-c.Scheduled():
		obs.setReady(nil)
		sd.ready()
	case <-ctx.Done():
	}

wait:
	for {
		select {
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case err := <-obs.serveErr():
			return fmt.Errorf("http serve: %w", err)
		case <-hup:
			rl.reload()
		case <-ctx.Done():
			break wait
		}
	}
	logger.Info("pulsed shutting down", "timeout", cfg.shutdownTimeout.String(), "grace", shutdownGrace.String())
	deadline := time.Now().Add(cfg.shutdownTimeout)
	sd.stopping()
	hs.Shutdown() // grpc.health.v1 answers NOT_SERVING from now on
	obs.setReady(errors.New("shutting down"))
	wd.Close()
	// Closing the checker stops probing and ends watch streams, which would
	// otherwise keep GracefulStop waiting forever.
	sigs.waitingFor("discovery to stop (its sources, and its elections on etcd)")
	disc.stop() // no discovered target is written once the checker closes
	sigs.shutdownStep("the checker to close (probes in flight, state changes to store, watch streams to end)")
	c.Close()
	sigs.shutdownStep("HTTP requests and gRPC calls in progress")
	httpStopped := obs.shutdown(time.Until(deadline)) // its event feeds ended with the checker
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(time.Until(deadline)):
		logger.Warn("shutdown timeout reached; closing the remaining calls")
		gs.Stop()
		<-stopped
	}
	<-httpStopped
	sigs.shutdownStep("the store and the registry to close")
	logger.Info("pulsed stopped")
	return nil
}

// The bounds of -max-concurrent-probes 0.
const minDefaultProbes, maxDefaultProbes = 256, 4096

// concurrentProbes is the bound on probes in flight: n, or when 0 an eighth
// of the open-file limit between minDefaultProbes and maxDefaultProbes
// (minDefaultProbes when the limit is unknown). Slots are what a rack that
// goes dark takes: each of its targets holds one for its whole timeout,
// and 1,500 hung targets on 256 slots took twice as long to be marked down
// as on 2,500. An eighth keeps as many connections open as 256 slots did
// (see keptConnections: three quarters of the limit at most).
func concurrentProbes(limit uint64, n int) int {
	if n > 0 {
		return n
	}
	return int(min(max(limit/8, minDefaultProbes), maxDefaultProbes))
}

// keptConnections is how many probe connections pulsed keeps open between
// probes under an open-file limit: what the limit leaves once every probe
// in flight (-max-concurrent-probes, each on a connection of its own) and
// pulsed's own files and clients (an eighth of the limit, at least 64)
// have theirs, and at most the probe package's own default (three
// quarters of the limit). Keeping more would let a busy moment's probes
// find no file descriptor free. 0: the probe package's default (an unknown
// limit); -1: keep none.
func keptConnections(limit uint64, maxProbes int) int {
	if limit == 0 {
		return 0
	}
	if maxProbes <= 0 {
		maxProbes = 256 // the checker's default
	}
	reserve := max(int64(limit/8), 64)
	kept := int64(limit) - int64(maxProbes) - reserve
	kept = min(kept, int64(limit*3/4), 3<<18)
	if kept <= 0 {
		return -1
	}
	return int(kept)
}

// parseError is a flag's parse error, with what the flag takes when its
// value did not parse, the closest flag's name when the flag is not
// pulsed's, and where to find them all.
func parseError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		// invalid value "x" for flag -interval: parse error
		if _, name, ok := strings.Cut(rest, " for flag -"); ok {
			name, _, _ = strings.Cut(name, ":")
			if f := fs.Lookup(name); f != nil {
				msg += ": want " + valueKind(f)
			}
		}
	}
	if typed, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if near := suggest.Closest(strings.TrimPrefix(typed, "-"), names, nil); len(near) > 0 {
			msg += "; did you mean -" + strings.Join(near, " or -") + "?"
		}
	}
	return errors.New(msg + " (pulsed -h lists the flags)")
}

// valueKind says what a flag takes, as its default's type shows.
func valueKind(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "a value such as " + f.DefValue
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration such as 5s, 250ms or 1m30s"
	case bool:
		return "true or false"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	}
	return "a value such as " + f.DefValue
}
