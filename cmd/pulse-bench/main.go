// Command pulse-bench measures pulsed against a farm of HTTP targets on
// loopback, side by side with HAProxy's health checks against the same
// farm.
//
// For each scale point (N targets at an interval) it starts a farm of N
// HTTP targets, each on its own loopback address and port and counting
// the GET /healthz probes it answers, then:
//
//  1. builds nothing itself unless -pulsed is empty (then it runs
//     `go build ./cmd/pulsed` from the module root), starts pulsed with
//     -data-dir "" (with -data-dir, a fresh data directory, as pulsed runs
//     by default) -http-listen "" -rate-limit 0 -max-targets 0
//     -max-targets-per-group 0 -max-watchers-per-source 0
//     -listen 127.0.0.1:0, registers the N targets through the gRPC API
//     (AddTargets batches) and waits until all are healthy;
//  2. over a steady window, measures pulsed's CPU (utime+stime from
//     /proc/<pid>/stat) per probe the farm answered, its VmRSS (the mean
//     of readings every half second through the window), and the
//     probes done against the probes scheduled, with the late ones;
//  3. flips -flip-fraction of the targets to failing (or hanging) and
//     times each transition's arrival on WatchTransitions, from the flip
//     and from the target's first failing answer;
//  4. opens -subscribers WatchTransitions streams, heals -delivery-flips of
//     the failing targets (at once, or one at a time with -delivery-serial)
//     and times each recovery from its own timestamp to its receipt on every
//     stream;
//  5. stops pulsed and runs haproxy against the same farm with one backend
//     of the same servers (`option httpchk GET /healthz`,
//     `check inter <interval> rise 2 fall 3`), measuring its CPU per probe,
//     RSS and detection (its "is DOWN" log lines) the same way.
//
// With -replicas 1,2,3 it measures instead, at each point, one
// pulsed on the embedded registry (a fresh -data-dir) and then 1, 2 and 3
// pulsed replicas sharing the fleet through one etcd (-registry etcd, a
// fresh -etcd-prefix per run), all against the same farm: the probes per
// second, the replicas' CPU per probe summed over them and etcd's apart,
// each replica's RSS and its share of the targets (the writers of the
// states in etcd). The etcd pinned in go.mod is built into a binary of its
// own (-etcd names one), so its CPU is its process's.
//
// It prints a Markdown report with Pulse/HAProxy ratios and how the run
// compares with Pulse's performance targets, and can write it and the raw results
// (JSON) to files. Only 127.0.0.0/8 is ever contacted.
//
// Usage:
//
//	pulse-bench [flags]
//
// scripts/bench (make bench-harness) installs haproxy when missing, raises
// the open-file limit and runs the scale points of BENCHMARKS.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/internal/version"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "pulse-bench:", err)
		os.Exit(1)
	}
}

type cliFlags struct {
	points, flipMode, out, jsonOut, pulsedArgs, replicas string
	defaultInterval                                      time.Duration
	opts                                                 Options

	xdsStreams, xdsPerConn int
	register               int
	xdsAfter, xdsPulsed    string
}

func parseFlags(args []string, stderr io.Writer) (cliFlags, error) {
	var f cliFlags
	fs := flag.NewFlagSet("pulse-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: pulse-bench [flags]\n\nMeasures pulsed, side by side with HAProxy, against a farm of HTTP targets on loopback.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&f.points, "points", "1000@1s,10000@1s", "comma-separated scale `points`, targets@interval (10k@1s works too)")
	fs.DurationVar(&f.defaultInterval, "interval", time.Second, "interval of a point that names none")
	fs.DurationVar(&f.opts.Window, "window", 0, "steady measurement window; 0: max(20s, 3 intervals)")
	fs.DurationVar(&f.opts.Timeout, "timeout", time.Second, "probe timeout, for both checkers (capped at the interval)")
	fs.IntVar(&f.opts.Rise, "rise", 2, "rise, for both checkers")
	fs.IntVar(&f.opts.Fall, "fall", 3, "fall, for both checkers")
	fs.Float64Var(&f.opts.FlipFraction, "flip-fraction", 0.1, "fraction of the targets switched to -flip-mode for the detection measurement")
	fs.StringVar(&f.flipMode, "flip-mode", "fail", "what flipped targets do: fail (answer 503), hang (never answer) or kill (reset every connection and refuse new ones, as a crashed process)")
	fs.DurationVar(&f.opts.HAProxyFastInter, "haproxy-fastinter", 0, "HAProxy's fastinter (interval after a failed check, on the way to DOWN); 0 leaves it unset (inter)")
	fs.IntVar(&f.opts.Subscribers, "subscribers", 1000, "WatchTransitions streams for the delivery measurement; 0 skips it")
	fs.IntVar(&f.opts.SubsPerConn, "subscribers-per-conn", 100, "streams per client connection")
	fs.IntVar(&f.opts.DeliveryFlips, "delivery-flips", 100, "recoveries delivered to every subscriber (at most the flipped targets)")
	fs.BoolVar(&f.opts.DataDir, "data-dir", false, "run pulsed with a fresh data directory at each point, as pulsed runs by default (its store, pulse.db, and its history file); off: in memory only (-data-dir \"\")")
	fs.BoolVar(&f.opts.DeliverySerial, "delivery-serial", false, "heal the -delivery-flips targets one at a time, each once every subscriber received the one before, so each transition is delivered alone")
	fs.StringVar(&f.opts.PulsedBin, "pulsed", "", "pulsed `binary`; empty builds ./cmd/pulsed from the module root")
	fs.StringVar(&f.pulsedArgs, "pulsed-args", "", "more flags for pulsed, space-separated (e.g. \"-max-concurrent-probes 512\")")
	fs.StringVar(&f.opts.HAProxyBin, "haproxy", "haproxy", "haproxy `binary`; empty runs Pulse alone")
	fs.StringVar(&f.replicas, "replicas", "", "measure these `counts` of pulsed replicas sharing the fleet on etcd (e.g. 1,2,3), each against one pulsed on the embedded registry, instead of Pulse and HAProxy: steady window only, no detection or delivery")
	fs.StringVar(&f.opts.EtcdBin, "etcd", "", "etcd `binary` for -replicas; empty builds go.etcd.io/etcd/server/v3 (pinned in go.mod) from the module root")
	fs.IntVar(&f.opts.NoFile, "nofile", 0, "run pulsed (through prlimit) and HAProxy (ulimit-n) under this open-file `limit`, soft and hard, e.g. below the number of targets; 0: the harness's own")
	fs.IntVar(&f.opts.RegisterWorkers, "register-workers", 32, "AddTarget calls in flight at once, with -register (the other measurements register their targets with AddTargets)")
	fs.StringVar(&f.opts.PerfDir, "perf-dir", "", "record a profile (perf record -g) of each checker's steady window into this `directory`; needs perf, whose own CPU shows as other processes'")
	fs.IntVar(&f.opts.BodyBytes, "body-bytes", 0, "healthy targets answer a body of this many `bytes` ending in \"ready\"; 0: \"ok\\n\"")
	fs.StringVar(&f.opts.BodyContains, "body-contains", "", "pulsed's probes expect the body to contain this `text` (http.body_contains)")
	fs.Float64Var(&f.opts.OutlierFactor, "outlier-latency-factor", 0, "turn on the outlier detection of pulsed's group bench (every target) with this latency `factor` and the policy's other defaults (judged every 10s); 0: off")
	fs.IntVar(&f.xdsStreams, "xds-streams", 0, "measure pulsed's RSS with this many xDS (EDS) `streams` open and after they close, instead of Pulse and HAProxy; 0: off")
	fs.IntVar(&f.xdsPerConn, "xds-streams-per-conn", 1000, "xDS streams per client connection, with -xds-streams")
	fs.StringVar(&f.xdsAfter, "xds-after", "1s,10s,30s,60s", "comma-separated `durations` after the streams close at which to read the RSS, with -xds-streams")
	fs.StringVar(&f.xdsPulsed, "xds-pulsed", "", "comma-separated pulsed `binaries` measured one after the other with -xds-streams (e.g. an older build and this one); empty: -pulsed")
	fs.IntVar(&f.register, "register", 0, "measure registering this many `targets` on the embedded store, one AddTarget each (-register-workers at a time) and then with AddTargets, instead of Pulse and HAProxy; 0: off")
	fs.StringVar(&f.out, "out", "", "also write the Markdown report to this `file`")
	fs.StringVar(&f.jsonOut, "json", "", "write the raw results as JSON to this `file`")
	showVersion := version.Flag(fs)
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, version.Line("pulse-bench"))
		return f, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q; see pulse-bench --help", fs.Arg(0))
	}
	var err error
	if f.opts.Points, err = parsePoints(f.points, f.defaultInterval); err != nil {
		return f, fmt.Errorf("-points: %w", err)
	}
	if f.opts.FlipMode, err = ParseMode(f.flipMode); err != nil || f.opts.FlipMode == ModeOK {
		return f, fmt.Errorf("-flip-mode must be fail, hang or kill, got %q", f.flipMode)
	}
	switch {
	case f.opts.Rise < 1 || f.opts.Fall < 1:
		return f, fmt.Errorf("-rise and -fall must be at least 1")
	case f.opts.Timeout <= 0:
		return f, fmt.Errorf("-timeout must be positive")
	case f.opts.FlipFraction <= 0 || f.opts.FlipFraction > 0.5:
		return f, fmt.Errorf("-flip-fraction must be in (0, 0.5] (pulsed's panic threshold holds more), got %v", f.opts.FlipFraction)
	case f.opts.HAProxyFastInter < 0:
		return f, fmt.Errorf("-haproxy-fastinter must not be negative, got %v", f.opts.HAProxyFastInter)
	case f.opts.NoFile < 0:
		return f, fmt.Errorf("-nofile must not be negative, got %d", f.opts.NoFile)
	case f.opts.Subscribers < 0 || f.opts.RegisterWorkers < 1:
		return f, fmt.Errorf("-subscribers must not be negative and -register-workers must be positive")
	}
	if f.opts.Replicas, err = parseReplicas(f.replicas); err != nil {
		return f, fmt.Errorf("-replicas: %w", err)
	}
	f.opts.PulsedArgs = strings.Fields(f.pulsedArgs)
	if f.xdsStreams < 0 || f.xdsPerConn < 1 {
		return f, fmt.Errorf("-xds-streams must not be negative and -xds-streams-per-conn must be positive")
	}
	if _, err := parseDurations(f.xdsAfter); err != nil {
		return f, fmt.Errorf("-xds-after: %w", err)
	}
	return f, nil
}

// parseDurations parses a comma-separated list of positive, increasing
// durations.
func parseDurations(s string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if d <= 0 || (len(ds) > 0 && d <= ds[len(ds)-1]) {
			return nil, fmt.Errorf("%q: each duration must be positive and longer than the one before", part)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	o := f.opts
	o.Log = stderr
	if o.PerfDir != "" {
		if err := os.MkdirAll(o.PerfDir, 0o755); err != nil {
			return fmt.Errorf("-perf-dir: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The farm listens on one socket; its files are the checkers'
	// connections to it, a few hundred at a time, and the subscribers'.
	if err := ensureFiles(8192); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "pulse-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	o.WorkDir = work
	if o.PulsedBin == "" {
		if o.PulsedBin, err = buildPulsed(ctx, work); err != nil {
			return err
		}
	}
	rep := Report{
		Command: "pulse-bench " + strings.Join(args, " "),
		Started: time.Now(),
		Machine: machine(),
		Source:  sourceState(ctx),
		Rise:    o.Rise,
		Fall:    o.Fall,
	}
	if len(o.Replicas) > 0 {
		return runReplicaPoints(ctx, f, o, rep, stdout, stderr)
	}
	if f.register > 0 {
		ro := registerOptions{Targets: f.register, Workers: o.RegisterWorkers, Interval: f.defaultInterval,
			Bin: o.PulsedBin, Extra: o.PulsedArgs, WorkDir: work, Log: stderr}
		res, err := runRegister(ctx, ro)
		writeRegister(stdout, rep.Command, ro, res)
		return err
	}
	if f.xdsStreams > 0 {
		after, _ := parseDurations(f.xdsAfter)
		bins := []string{o.PulsedBin}
		if f.xdsPulsed != "" {
			bins = strings.Split(f.xdsPulsed, ",")
		}
		xo := xdsMemOptions{Streams: f.xdsStreams, PerConn: f.xdsPerConn, After: after, Bins: bins,
			Extra: o.PulsedArgs, Log: stderr, Groups: 10, PerGroup: 10}
		res, err := runXDSMem(ctx, xo)
		writeXDSMem(stdout, rep.Command, xo, res)
		return err
	}
	if o.HAProxyBin != "" {
		if rep.Machine.HAProxyVersion, err = haproxyVersion(o.HAProxyBin); err != nil {
			return fmt.Errorf("haproxy -v: %w (install Debian's haproxy, or pass -haproxy \"\" to run Pulse alone)", err)
		}
	}
	for _, p := range o.Points {
		pt, err := runPoint(ctx, o, p)
		if err != nil {
			if len(rep.Points) > 0 {
				fmt.Fprintln(stdout, rep.Markdown()) // what was measured before
			}
			return fmt.Errorf("%s targets at %s: %w", fmtCount(p.Targets), p.Interval, err)
		}
		rep.Points = append(rep.Points, pt)
		if err := writeOutputs(f, rep); err != nil { // after each point: a run cut short keeps what it did
			return err
		}
	}
	_, err = io.WriteString(stdout, rep.Markdown())
	return err
}

// runReplicaPoints is run's -replicas mode: one etcd for the whole run,
// then at each point the embedded registry and every replica count.
func runReplicaPoints(ctx context.Context, f cliFlags, o Options, rep Report, stdout, stderr io.Writer) error {
	var err error
	if o.EtcdBin == "" {
		if o.EtcdBin, err = buildEtcd(ctx, o.WorkDir, stderr); err != nil {
			return err
		}
	}
	if rep.Machine.EtcdVersion, err = etcdVersion(o.EtcdBin); err != nil {
		return fmt.Errorf("etcd --version: %w", err)
	}
	e, err := startEtcd(ctx, o.EtcdBin, o.WorkDir)
	if err != nil {
		return err
	}
	defer e.Close()
	o.logf("etcd %s listening on %s", rep.Machine.EtcdVersion, e.url)
	for _, p := range o.Points {
		pt, err := runReplicaPoint(ctx, o, e, p)
		if len(pt.Runs) > 0 {
			rep.ReplicaPoints = append(rep.ReplicaPoints, pt)
		}
		if err != nil {
			if len(rep.ReplicaPoints) > 0 {
				fmt.Fprintln(stdout, rep.Markdown()) // what was measured before
			}
			return fmt.Errorf("%s targets at %s: %w", fmtCount(p.Targets), p.Interval, err)
		}
		if err := writeOutputs(f, rep); err != nil {
			return err
		}
	}
	_, err = io.WriteString(stdout, rep.Markdown())
	return err
}

func writeOutputs(f cliFlags, rep Report) error {
	if f.out != "" {
		if err := os.WriteFile(f.out, []byte(rep.Markdown()), 0o644); err != nil {
			return err
		}
	}
	if f.jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ensureFiles makes sure the harness may open need files, raising its
// limit if it can (Go already raises the soft limit to the hard one).
func ensureFiles(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= need {
		return nil
	}
	want := syscall.Rlimit{Cur: max(need, lim.Cur), Max: max(need, lim.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return fmt.Errorf("the farm needs %d open files but the limit is %d (%v); raise it with `ulimit -n %d` (scripts/bench does)", need, lim.Cur, err, need)
	}
	return nil
}

// buildPulsed builds cmd/pulsed of the module the working directory is
// in, into dir.
func buildPulsed(ctx context.Context, dir string) (string, error) {
	if _, err := moduleRoot(); err != nil {
		return "", err
	}
	return pulsedproc.Build(ctx, dir, pulsedproc.Package)
}

// moduleRoot finds the directory of Pulse's go.mod, from the working
// directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module "+pulsedproc.Module+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside module " + pulsedproc.Module + ": run from the repository or pass -pulsed")
		}
		dir = parent
	}
}

// sourceState names the commit the working directory is at and the files
// changed since, when git can tell: the pulsed measured is built from them.
func sourceState(ctx context.Context) string {
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	s := "commit " + strings.TrimSpace(string(head))
	st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		var files []string
		for line := range strings.Lines(string(st)) {
			if len(line) > 3 {
				files = append(files, strings.TrimSpace(line[3:]))
			}
		}
		s += " with uncommitted changes to " + strings.Join(files, ", ")
	}
	return s
}

// machine describes the host.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.Model = cpuModel(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// cpuModel returns the first "model name" of /proc/cpuinfo's text.
func cpuModel(cpuinfo string) string {
	for line := range strings.Lines(cpuinfo) {
		if key, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(val)
		}
	}
	return "unknown"
}
