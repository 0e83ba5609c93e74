package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ScalePoint is a number of targets and the interval they are probed at.
type ScalePoint struct {
	Targets  int
	Interval time.Duration
}

// parsePoints parses "1000@1s,10000@1s,50000@10s"; a point without "@"
// takes defaultInterval. "k" multiplies by 1,000 ("10k@1s").
func parsePoints(s string, defaultInterval time.Duration) ([]ScalePoint, error) {
	var out []ScalePoint
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, iv, hasIv := strings.Cut(part, "@")
		p := ScalePoint{Interval: defaultInterval}
		mult := 1
		if rest, ok := strings.CutSuffix(n, "k"); ok {
			n, mult = rest, 1000
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 || v > math.MaxInt32/mult {
			return nil, fmt.Errorf("scale point %q: the number of targets must be a positive integer", part)
		}
		p.Targets = v * mult
		if hasIv {
			d, err := time.ParseDuration(iv)
			if err != nil || d < 100*time.Millisecond {
				return nil, fmt.Errorf("scale point %q: the interval must be a duration of at least 100ms", part)
			}
			p.Interval = d
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scale points in %q", s)
	}
	return out, nil
}

// flipSet returns the indices of the targets a flip switches: every k-th
// target, k = round(1/fraction), so the same ones for every checker.
func flipSet(n int, fraction float64) []int {
	if fraction <= 0 {
		return nil
	}
	step := max(1, int(math.Round(1/fraction)))
	var out []int
	for i := 0; i < n; i += step {
		out = append(out, i)
	}
	return out
}

// Options configure a run.
type Options struct {
	Points []ScalePoint
	// Window is the steady measurement window; 0: max(20s, 3 intervals).
	Window time.Duration
	// Timeout is the probe timeout (capped at the interval).
	Timeout    time.Duration
	Rise, Fall int
	// FlipFraction of the targets is switched to FlipMode for detection.
	FlipFraction float64
	FlipMode     Mode
	// Subscribers WatchTransitions streams, SubsPerConn on each client
	// connection, receive DeliveryFlips recoveries: all at once, or one at
	// a time with DeliverySerial (each after every stream got the last).
	Subscribers, SubsPerConn, DeliveryFlips int
	DeliverySerial                          bool
	// PulsedBin is the pulsed binary; PulsedArgs more flags for it.
	PulsedBin  string
	PulsedArgs []string
	// DataDir runs pulsed with a fresh data directory at each point, as
	// pulsed runs by default (its store and history file); otherwise in
	// memory only.
	DataDir bool
	// HAProxyBin is the haproxy binary; "" runs Pulse alone.
	HAProxyBin string
	// HAProxyFastInter, when positive, is HAProxy's fastinter.
	HAProxyFastInter time.Duration
	// Replicas, when not empty, measures these counts of pulsed replicas
	// on etcd, and one pulsed on the embedded registry, at each point
	// instead of Pulse and HAProxy; EtcdBin is the etcd binary.
	Replicas []int
	EtcdBin  string
	// RegisterWorkers AddTarget calls run at once, with -register.
	RegisterWorkers int
	// NoFile, when positive, is the open-file limit (soft and hard) both
	// checkers run under: pulsed through prlimit(1), HAProxy by its
	// ulimit-n.
	NoFile int
	// BodyBytes, when positive, makes a healthy target answer a body of
	// this many bytes that ends in "ready"; BodyContains, when set, is
	// the http.body_contains of pulsed's targets.
	BodyBytes    int
	BodyContains string
	// OutlierFactor, when positive, turns on the outlier detection of
	// group bench (every Pulse target) with this latency factor and the
	// policy's other defaults, before the targets are registered.
	OutlierFactor float64
	// WorkDir holds the generated HAProxy files, and etcd's and the
	// baseline pulsed's data with -replicas.
	WorkDir string
	// PerfDir, when set, gets a `perf record -g` profile of each checker
	// over its steady window (<checker>-<targets>.perf.data).
	PerfDir string
	// Log receives progress lines.
	Log io.Writer
}

func (o Options) window(iv time.Duration) time.Duration {
	if o.Window > 0 {
		return o.Window
	}
	return max(20*time.Second, 3*iv)
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// startFarm starts the farm of a scale point: p.Targets targets, a probe
// late when it comes more than 1.5 intervals after the previous one.
func startFarm(o Options, p ScalePoint) (*Farm, error) {
	o.logf("%s targets at %s: starting the farm", fmtCount(p.Targets), p.Interval)
	cfg := FarmConfig{N: p.Targets, OKBody: okBody(o.BodyBytes)}
	if o.FlipMode == ModeKill {
		// A killed target's port refuses in the kernel, as a dead
		// process's does (see kill.go).
		cfg.Own = flipSet(p.Targets, o.FlipFraction)
	}
	farm, err := NewFarm(cfg)
	if err != nil {
		return nil, err
	}
	farm.SetLateAfter(p.Interval * 3 / 2)
	return farm, nil
}

// runPoint measures Pulse, then HAProxy, against one farm of p.Targets
// targets.
func runPoint(ctx context.Context, o Options, p ScalePoint) (Point, error) {
	out := Point{Targets: p.Targets, Interval: p.Interval}
	farm, err := startFarm(o, p)
	if err != nil {
		return out, err
	}
	defer farm.Close()
	flipped := flipSet(p.Targets, o.FlipFraction)

	out.Pulse, err = runPulse(ctx, o, farm, p, flipped)
	if err != nil {
		return out, fmt.Errorf("pulse: %w", err)
	}
	if o.HAProxyBin == "" {
		return out, nil
	}
	if _, err := farm.SetMode(flipped, ModeOK); err != nil {
		return out, fmt.Errorf("healing the farm before HAProxy: %w", err)
	}
	farm.Forget()
	if err := sleepCtx(ctx, time.Second); err != nil {
		return out, err
	}
	out.HAProxy, err = runHAProxy(ctx, o, farm, p, flipped)
	if err != nil {
		if ctx.Err() != nil {
			return out, err
		}
		// Pulse's numbers stand on their own: keep them, say why HAProxy's
		// are missing, and go on with the next point.
		o.logf("  HAProxy failed: %v", err)
		out.Pulse.Notes = append(out.Pulse.Notes, fmt.Sprintf("HAProxy could not be measured at this point: %s", firstLine(err.Error())))
	}
	return out, nil
}

// steady measures the window: the probes the farm answered, the checker's
// CPU (every process of pids: one pulsed, several replicas, or haproxy),
// etcd's when etcdPid is not 0, the harness's, and the memory at its end.
func steady(ctx context.Context, o Options, farm *Farm, pids []int, etcdPid int, r *SystemResult) error {
	r.Window = o.window(r.Interval)
	s0 := farm.Snapshot()
	cpu0, err := sumCPU(pids)
	if err != nil {
		return err
	}
	user0, err := sumUserCPU(pids)
	if err != nil {
		return err
	}
	etcd0, err := sumCPU(nonzero(etcdPid))
	if err != nil {
		return err
	}
	self0, err := procCPU(os.Getpid())
	if err != nil {
		return err
	}
	host0, err := hostBusy()
	if err != nil {
		return err
	}
	start := time.Now()
	var (
		perf       *exec.Cmd
		perfStderr bytes.Buffer
	)
	if o.PerfDir != "" {
		out := filepath.Join(o.PerfDir, fmt.Sprintf("%s-%d.perf.data", fileSafe(r.System), r.Targets))
		var ps []string
		for _, pid := range pids {
			ps = append(ps, strconv.Itoa(pid))
		}
		perf = exec.CommandContext(ctx, "perf", "record", "-F", "499", "-g", "-p", strings.Join(ps, ","), "-o", out, "--", "sleep", strconv.Itoa(int(r.Window.Seconds())))
		perf.Stderr = &perfStderr
		if err := perf.Start(); err != nil {
			return fmt.Errorf("perf record: %w", err)
		}
	}
	if err := sampleRSS(ctx, r, pids, r.Window); err != nil {
		return err
	}
	if perf != nil {
		defer func() {
			if err := perf.Wait(); err != nil {
				o.logf("  %s: perf record failed, no profile: %v: %s", r.System, err, bytes.TrimSpace(perfStderr.Bytes()))
			}
		}()
	}
	cpu1, err := sumCPU(pids)
	if err != nil {
		return err
	}
	user1, err := sumUserCPU(pids)
	if err != nil {
		return err
	}
	etcd1, err := sumCPU(nonzero(etcdPid))
	if err != nil {
		return err
	}
	self1, _ := procCPU(os.Getpid())
	host1, _ := hostBusy()
	d := farm.Snapshot().Sub(s0)
	r.Window = time.Since(start).Round(time.Millisecond)
	r.CPU, r.UserCPU, r.EtcdCPU, r.FarmCPU = cpu1-cpu0, user1-user0, etcd1-etcd0, self1-self0
	r.OtherCPU = max(host1-host0-r.CPU-r.EtcdCPU-r.FarmCPU, 0)
	r.Probes, r.Late, r.Conns = d.Probes, d.Late, d.Conns
	r.GapP50, r.GapP99, r.GapMax = d.GapQuantile(0.5), d.GapQuantile(0.99), d.GapQuantile(1)
	r.RSS, r.PeakRSS = 0, 0
	for _, pid := range pids {
		rss, peak, err := procMem(pid)
		if err != nil {
			return err
		}
		r.RSS, r.PeakRSS = r.RSS+rss, r.PeakRSS+peak
	}
	if etcdPid != 0 {
		if r.EtcdRSS, _, err = procMem(etcdPid); err != nil {
			return err
		}
	}
	etcd := ""
	if etcdPid != 0 {
		etcd = fmt.Sprintf(", etcd %.1f µs CPU/probe (%.2f cores), etcd RSS %s MiB", r.EtcdCPUPerProbe(), perWindow(r.EtcdCPU, r.Window), fmtMiB(r.EtcdRSS))
	}
	o.logf("  %s: window %s: %d probes (%.1f%% of scheduled, %.2f%% late), %.2f new connections/probe, %.1f µs CPU/probe (%.1f in user mode; %.2f cores), RSS %s MiB (window mean %s, max %s)%s, farm %.2f cores, other processes %.2f cores",
		r.System, r.Window, r.Probes, 100*r.DoneFraction(), 100*r.LateFraction(), r.ConnsPerProbe(), r.CPUPerProbe(), r.UserCPUPerProbe(), r.Cores(), fmtMiB(r.RSS), fmtMiB(r.MeanRSS), fmtMiB(r.MaxRSS), etcd, r.FarmCPU.Seconds()/r.Window.Seconds(), r.OtherCPU.Seconds()/r.Window.Seconds())
	return nil
}

// fileSafe turns a system's name into a file name's part: "Pulse (etcd, 2
// replicas)" becomes "pulse-etcd-2-replicas".
func fileSafe(name string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(name), func(c rune) bool {
		return (c < 'a' || c > 'z') && (c < '0' || c > '9')
	}), "-")
}

// sumUserCPU returns the CPU time the processes have used in user mode,
// together.
func sumUserCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		user, _, err := procTimes(pid)
		if err != nil {
			return 0, err
		}
		sum += user
	}
	return sum, nil
}

// sumCPU returns the CPU time the processes have used, together.
func sumCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		d, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// nonzero returns pid as a list, empty when it is 0.
func nonzero(pid int) []int {
	if pid == 0 {
		return nil
	}
	return []int{pid}
}

// detect flips the targets to o.FlipMode and waits until downAt has
// each of them detected, or the bound passes; then it fills r.Detect and
// r.DetectFirstFail.
func detect(ctx context.Context, o Options, farm *Farm, flipped []int, downAt *stamps, r *SystemResult) error {
	r.Flipped = len(flipped)
	s0 := farm.Snapshot()
	t0, err := farm.SetMode(flipped, o.FlipMode)
	if err != nil {
		return err
	}
	bound := t0.Add(time.Duration(o.Fall+2)*r.Interval + 10*time.Second)
	for {
		n := 0
		for _, i := range flipped {
			if _, ok := downAt.get(i); ok {
				n++
			}
		}
		if n == len(flipped) || time.Now().After(bound) {
			break
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	var fromFlip, fromFail []time.Duration
	for _, i := range flipped {
		recv, ok := downAt.get(i)
		if !ok {
			continue
		}
		fromFlip = append(fromFlip, recv.Sub(t0))
		if ff, ok := farm.FirstFail(i); ok {
			fromFail = append(fromFail, recv.Sub(ff))
		}
	}
	r.Detect = summarize(fromFlip, len(flipped))
	r.DetectFirstFail = summarize(fromFail, len(flipped))
	if o.FlipMode == ModeKill {
		// A killed target's port refuses in the kernel: the farm sees no
		// failed probe to time from (see kill.go).
		r.DetectFirstFail = summarize(nil, 0)
	}
	d := farm.Snapshot().Sub(s0)
	o.logf("  %s: detection of %d %s targets: %s from the flip, %s from the first failed probe (meanwhile %d probes, gaps p50 %s, p99 %s, max %s)",
		r.System, len(flipped), o.FlipMode, fmtLat(r.Detect), fmtLat(r.DetectFirstFail), d.Probes, fmtDur(d.GapQuantile(0.5)), fmtDur(d.GapQuantile(0.99)), fmtDur(d.GapQuantile(1)))
	return nil
}

// waitUntil polls cond every 100ms until it holds or until deadline.
func waitUntil(ctx context.Context, deadline time.Time, cond func() bool) (bool, error) {
	for !cond() {
		if time.Now().After(deadline) {
			return false, nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return false, err
		}
	}
	return true, nil
}

// sampleRSS waits d, reading the VmRSS of pids every half second, and
// sets r's MeanRSS and MaxRSS (of their sum) and, with more than one pid,
// ProcRSS (each one's mean) from the readings.
func sampleRSS(ctx context.Context, r *SystemResult, pids []int, d time.Duration) error {
	end := time.Now().Add(d)
	var sum, n uint64
	each := make([]uint64, len(pids))
	r.MeanRSS, r.MaxRSS, r.ProcRSS = 0, 0, nil
	for {
		var rss uint64
		for i, pid := range pids {
			v, _, err := procMem(pid)
			if err != nil {
				return err
			}
			rss += v
			each[i] += v
		}
		sum, n = sum+rss, n+1
		r.MaxRSS = max(r.MaxRSS, rss)
		r.MeanRSS = sum / n
		if len(pids) > 1 {
			r.ProcRSS = r.ProcRSS[:0]
			for _, v := range each {
				r.ProcRSS = append(r.ProcRSS, v/n)
			}
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		if err := sleepCtx(ctx, min(left, 500*time.Millisecond)); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func runPulse(ctx context.Context, o Options, farm *Farm, p ScalePoint, flipped []int) (*SystemResult, error) {
	r := &SystemResult{System: "Pulse", Targets: p.Targets, Interval: p.Interval}
	var registry []string
	if o.DataDir {
		dir, err := os.MkdirTemp(o.WorkDir, "pulsed-data-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		registry = []string{"-data-dir", dir}
		o.logf("  Pulse: data directory %s", dir)
	}
	bin, args := withFileLimit(o.NoFile, o.PulsedBin, pulsedArgs(o, p.Interval, registry...))
	proc, err := startPulsed(ctx, bin, args)
	if err != nil {
		return nil, err
	}
	defer proc.Close()
	pid := proc.Pid()
	if r.BaseRSS, _, err = procMem(pid); err != nil {
		return nil, err
	}

	tr, unwatch, err := watchAll(ctx, proc.api, p.Targets)
	if err != nil {
		return nil, err
	}
	defer unwatch()

	if o.OutlierFactor > 0 {
		if err := proc.setOutliers(ctx, o.OutlierFactor); err != nil {
			return nil, err
		}
		o.logf("  Pulse: group bench's outlier detection on, latency factor %g", o.OutlierFactor)
	}
	start := time.Now()
	if err := proc.register(ctx, farm, o.BodyContains); err != nil {
		return nil, err
	}
	o.logf("  Pulse: registered %d targets in %s", p.Targets, time.Since(start).Round(time.Millisecond))
	all, err := waitUntil(ctx, time.Now().Add(time.Duration(o.Rise+2)*p.Interval+10*time.Second), func() bool {
		return tr.nHealthy.Load() == int64(p.Targets)
	})
	if err != nil {
		return nil, err
	}
	r.Healthy = int(tr.nHealthy.Load())
	if !all {
		r.Notes = append(r.Notes, fmt.Sprintf("only %d of %d targets became healthy before the window", r.Healthy, p.Targets))
	}
	o.logf("  Pulse: %d of %d healthy after %s", r.Healthy, p.Targets, time.Since(start).Round(time.Millisecond))
	// Two intervals more: the warm-up's transitions are logged and
	// delivered, and the first probes, due within an interval of the
	// registration, which a large fleet registers within seconds, are
	// caught up with before the window.
	if err := sleepCtx(ctx, 2*p.Interval); err != nil {
		return nil, err
	}
	if err := steady(ctx, o, farm, []int{pid}, 0, r); err != nil {
		return nil, err
	}

	for _, i := range flipped {
		tr.downAt.clear(i)
	}
	if err := detect(ctx, o, farm, flipped, tr.downAt, r); err != nil {
		return nil, err
	}

	if o.Subscribers > 0 && len(flipped) > 0 {
		if err := deliver(ctx, o, proc, farm, tr, flipped, r); err != nil {
			return nil, err
		}
	}
	if errp := tr.err.Load(); errp != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("the tracking stream ended: %v", *errp))
	}
	if proc.Exited() {
		return nil, fmt.Errorf("pulsed exited during the run:\n%s", proc.Tail())
	}
	return r, nil
}

// deliver opens o.Subscribers streams, heals DeliveryFlips of the failing
// targets and measures how long each recovery takes from its timestamp to
// each subscriber.
func deliver(ctx context.Context, o Options, proc *pulsedProc, farm *Farm, tr *tracker, flipped []int, r *SystemResult) error {
	d := min(len(flipped), max(o.DeliveryFlips, 1))
	heal := flipped[:d]
	since := time.Now()
	subs, err := subscribe(ctx, proc.addr, o.Subscribers, max(o.SubsPerConn, 1), tr.rev.Load(), since)
	if err != nil {
		return err
	}
	defer subs.Close()
	// The streams resume from a revision, so none misses an event; the pause
	// lets them all register before the transitions come.
	if err := sleepCtx(ctx, time.Second); err != nil {
		return err
	}
	all, err := healAndWait(ctx, o, farm, subs, heal, r.Interval)
	if err != nil {
		return err
	}
	subs.Close() // the samples are read once the streams are done
	r.Subscribers = o.Subscribers
	r.Delivery = summarize(subs.all(), o.Subscribers*d)
	if !all {
		r.Notes = append(r.Notes, fmt.Sprintf("not every subscriber received all %d recoveries in time", d))
	}
	if n := subs.failed.Load(); n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d subscriber streams failed, the last with %v", n, *subs.lastErr.Load()))
	}
	o.logf("  Pulse: delivery of %d recoveries to %d subscribers: %s (max %s)", d, o.Subscribers, fmtLat(r.Delivery), fmtDur(r.Delivery.Max))
	if o.DeliverySerial {
		o.logf("  Pulse: each recovery's first and last receipt, in order: %s", fmtSpreads(subs.spread(d)))
	}
	return nil
}

func runHAProxy(ctx context.Context, o Options, farm *Farm, p ScalePoint, flipped []int) (*SystemResult, error) {
	r := &SystemResult{System: "HAProxy", Targets: p.Targets, Interval: p.Interval}
	if o.HAProxyFastInter > 0 {
		r.System = "HAProxy fastinter " + o.HAProxyFastInter.String()
	}
	dir, err := os.MkdirTemp(o.WorkDir, "haproxy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := haproxyConfig{Interval: p.Interval, FastInter: o.HAProxyFastInter, Timeout: min(o.Timeout, p.Interval), Rise: o.Rise, Fall: o.Fall, NoFile: o.NoFile}
	for i := range farm.Len() {
		cfg.Names = append(cfg.Names, targetName(i))
		cfg.Addrs = append(cfg.Addrs, farm.Addr(i))
	}
	start := time.Now()
	h, err := startHAProxy(ctx, o.HAProxyBin, dir, cfg)
	if err != nil {
		return nil, err
	}
	defer h.Stop(10 * time.Second)
	pid := h.Pid()
	// HAProxy starts its servers up at the lowest health: rise+fall
	// intervals bring every one to full health.
	if err := sleepCtx(ctx, time.Duration(o.Rise+o.Fall+1)*p.Interval); err != nil {
		return nil, err
	}
	states, err := h.serverStates()
	if err != nil {
		return nil, err
	}
	for st, n := range states {
		if strings.HasPrefix(st, "UP") {
			r.Healthy += n
		}
	}
	if r.Healthy != p.Targets {
		r.Notes = append(r.Notes, fmt.Sprintf("server states before the window: %v", states))
	}
	o.logf("  HAProxy: %d of %d up after %s", r.Healthy, p.Targets, time.Since(start).Round(time.Millisecond))
	if err := steady(ctx, o, farm, []int{pid}, 0, r); err != nil {
		return nil, err
	}
	h.resetDown()
	if err := detect(ctx, o, farm, flipped, h.downAt, r); err != nil {
		return nil, err
	}
	if h.Exited() {
		return nil, fmt.Errorf("haproxy exited during the run:\n%s", h.Tail())
	}
	return r, nil
}

// firstLine returns s's first line and, when s has more, its last one.
func firstLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 1 {
		return lines[0]
	}
	return lines[0] + " ... " + strings.TrimSpace(lines[len(lines)-1])
}
