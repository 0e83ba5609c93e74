package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Latency summarises latency samples.
type Latency struct {
	// N is how many samples there are; Expected how many there should have
	// been (the rest never arrived within the phase's bound).
	N, Expected   int
	P50, P99, Max time.Duration
}

// Missing is how many expected samples never arrived.
func (l Latency) Missing() int { return max(l.Expected-l.N, 0) }

// summarize returns the nearest-rank p50, p99 and max of samples.
func summarize(samples []time.Duration, expected int) Latency {
	l := Latency{N: len(samples), Expected: expected}
	if len(samples) == 0 {
		return l
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	l.P50 = quantile(s, 0.50)
	l.P99 = quantile(s, 0.99)
	l.Max = s[len(s)-1]
	return l
}

// quantile is the nearest-rank q-quantile of sorted, which is not empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[max(1, min(rank, len(sorted)))-1]
}

// ratio returns a/b and whether it means anything (both positive).
func ratio(a, b float64) (float64, bool) {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0, false
	}
	return a / b, true
}

// SystemResult is what one health checker did at one scale point.
type SystemResult struct {
	// System is "Pulse" or "HAProxy".
	System string
	// Targets, Interval: the scale point.
	Targets  int
	Interval time.Duration
	// Healthy is how many targets were healthy (up) when the steady window
	// began.
	Healthy int
	// Window is the steady window's length; Probes the probes the farm
	// answered in it; Late those that came more than 1.5 intervals after the
	// previous probe of their target; GapP50, GapP99 and GapMax the gaps
	// between two probes of one target (10ms resolution).
	Window       time.Duration
	Probes, Late uint64
	// Conns is how many connections the checker opened to the farm in the
	// window: one per probe without keep-alive.
	Conns                  uint64
	GapP50, GapP99, GapMax time.Duration
	// CPU is the checker's user+system time in the window (every thread);
	// FarmCPU the harness's own (the farm's serving, mostly); OtherCPU the
	// rest of the host's busy time, other processes (and kernel work not
	// charged to a process): what disturbed the measurement.
	CPU, FarmCPU, OtherCPU time.Duration
	// UserCPU is the part of CPU the checker spent in user mode: its own
	// code, where CPU less UserCPU is the kernel's work for it (system
	// calls, the network stack).
	UserCPU time.Duration
	// EtcdCPU is etcd's user+system time in the window (replica runs only),
	// in neither CPU nor OtherCPU.
	EtcdCPU time.Duration
	// RSS and PeakRSS are VmRSS and VmHWM at the end of the window, summed
	// over the replicas; BaseRSS is VmRSS before any target was registered
	// (Pulse only).
	RSS, PeakRSS, BaseRSS uint64
	// MeanRSS and MaxRSS are VmRSS read every half second through the
	// window (summed over the replicas): RSS at one instant depends on
	// where the garbage collector's cycle is, and these do not.
	MeanRSS, MaxRSS uint64
	// ProcRSS is each replica's VmRSS, its mean over the window, with more
	// than one; EtcdRSS etcd's at the end of the window (replica runs
	// only).
	ProcRSS []uint64
	EtcdRSS uint64
	// Flipped is how many targets the farm switched to failing.
	Flipped int
	// Detect is from the flip to the transition's receipt (Pulse: on
	// WatchTransitions; HAProxy: its "is DOWN" log line); DetectFirstFail
	// from the target's first failing answer to the receipt.
	Detect, DetectFirstFail Latency
	// Delivery is from a transition's own timestamp to its receipt on each
	// of Subscribers WatchTransitions streams (Pulse only).
	Subscribers int
	Delivery    Latency
	// Notes say what went wrong or is worth knowing.
	Notes []string
}

// Scheduled is how many probes the schedule asks for in the window.
func (r *SystemResult) Scheduled() float64 {
	if r.Interval <= 0 {
		return 0
	}
	return float64(r.Targets) * r.Window.Seconds() / r.Interval.Seconds()
}

// DoneFraction is probes done over probes scheduled.
func (r *SystemResult) DoneFraction() float64 {
	f, _ := ratio(float64(r.Probes), r.Scheduled())
	return f
}

// LateFraction is the share of probes that came late.
func (r *SystemResult) LateFraction() float64 {
	if r.Probes == 0 {
		return 0
	}
	return float64(r.Late) / float64(r.Probes)
}

// ConnsPerProbe is the connections opened per probe.
func (r *SystemResult) ConnsPerProbe() float64 {
	if r.Probes == 0 {
		return 0
	}
	return float64(r.Conns) / float64(r.Probes)
}

// CPUPerProbe is CPU time per probe answered, in microseconds.
func (r *SystemResult) CPUPerProbe() float64 {
	if r.Probes == 0 {
		return 0
	}
	return float64(r.CPU.Microseconds()) / float64(r.Probes)
}

// UserCPUPerProbe is user-mode CPU time per probe answered, in
// microseconds.
func (r *SystemResult) UserCPUPerProbe() float64 {
	if r.Probes == 0 {
		return 0
	}
	return float64(r.UserCPU.Microseconds()) / float64(r.Probes)
}

// EtcdCPUPerProbe is etcd's CPU time per probe answered, in microseconds.
func (r *SystemResult) EtcdCPUPerProbe() float64 {
	if r.Probes == 0 {
		return 0
	}
	return float64(r.EtcdCPU.Microseconds()) / float64(r.Probes)
}

// ProbesPerSecond is the probes answered per second of the window.
func (r *SystemResult) ProbesPerSecond() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.Probes) / r.Window.Seconds()
}

// Cores is the average number of cores the checker kept busy.
func (r *SystemResult) Cores() float64 {
	if r.Window <= 0 {
		return 0
	}
	return r.CPU.Seconds() / r.Window.Seconds()
}

// FarmCores and OtherCores are FarmCPU and OtherCPU over the window.
func (r *SystemResult) FarmCores() float64  { return perWindow(r.FarmCPU, r.Window) }
func (r *SystemResult) OtherCores() float64 { return perWindow(r.OtherCPU, r.Window) }

func perWindow(d, w time.Duration) float64 {
	if w <= 0 {
		return 0
	}
	return d.Seconds() / w.Seconds()
}

// WindowRSS is the RSS the report gives: the mean over the window, or
// the RSS at its end where there was no reading through it.
func (r *SystemResult) WindowRSS() uint64 {
	if r.MeanRSS > 0 {
		return r.MeanRSS
	}
	return r.RSS
}

// RSSPerTarget is WindowRSS over the targets, in KiB.
func (r *SystemResult) RSSPerTarget() float64 {
	if r.Targets == 0 {
		return 0
	}
	return float64(r.WindowRSS()) / 1024 / float64(r.Targets)
}

// MarginalRSSPerTarget is (WindowRSS - BaseRSS) over the targets, in KiB;
// 0 without a base.
func (r *SystemResult) MarginalRSSPerTarget() float64 {
	rss := r.WindowRSS()
	if r.Targets == 0 || r.BaseRSS == 0 || rss < r.BaseRSS {
		return 0
	}
	return float64(rss-r.BaseRSS) / 1024 / float64(r.Targets)
}

// Point is one scale point, both checkers against the same farm.
type Point struct {
	Targets  int
	Interval time.Duration
	Pulse    *SystemResult
	HAProxy  *SystemResult // nil when HAProxy was not run
}

// Machine describes where the run happened.
type Machine struct {
	CPUs           int
	Model          string
	Kernel         string
	Go             string
	HAProxyVersion string
	EtcdVersion    string
}

// Report is a whole run.
type Report struct {
	Command string
	Started time.Time
	Machine Machine
	// Source says what pulsed was built from (a commit, local changes).
	Source string
	Rise   int
	Fall   int
	Points []Point
	// ReplicaPoints are the runs of -replicas: the embedded registry, then
	// 1, 2, 3... replicas on etcd, at each scale point.
	ReplicaPoints []ReplicaPoint
}

// fmtDur prints a duration compactly: µs below 1ms, ms below 1s, else s.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// fmtLat prints "p50 / p99", with "(k missing)" when samples are missing,
// or "n/a" without samples.
func fmtLat(l Latency) string {
	if l.N == 0 {
		if l.Expected > 0 {
			return fmt.Sprintf("none of %d", l.Expected)
		}
		return "n/a"
	}
	s := fmtDur(l.P50) + " / " + fmtDur(l.P99)
	if m := l.Missing(); m > 0 {
		s += fmt.Sprintf(" (%d of %d missing)", m, l.Expected)
	}
	return s
}

func fmtCount(n int) string {
	switch {
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmt.Sprint(n)
	}
}

func fmtMiB(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func fmtRatio(a, b float64) string {
	r, ok := ratio(a, b)
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r)
}

// systems returns the point's results in table order.
func (p Point) systems() []*SystemResult {
	var out []*SystemResult
	for _, r := range []*SystemResult{p.Pulse, p.HAProxy} {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Markdown renders the report: the measurements, the ratios and the
// performance targets.
func (r Report) Markdown() string {
	var b strings.Builder
	versions := orNA(r.Machine.HAProxyVersion)
	if r.Machine.EtcdVersion != "" {
		versions += ", etcd " + r.Machine.EtcdVersion
	}
	fmt.Fprintf(&b, "Run %s on %d CPUs (%s), Linux %s, %s, %s; rise %d, fall %d.\n\n",
		r.Started.UTC().Format(time.RFC3339), r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel, r.Machine.Go, versions, r.Rise, r.Fall)
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}
	if r.Source != "" {
		fmt.Fprintf(&b, "Source: %s.\n\n", r.Source)
	}
	if len(r.Points) > 0 {
		b.WriteString("| targets | interval | checker | healthy | probes done / scheduled | late | gap p50 / p99 / max | new conns/probe | CPU µs/probe | cores (farm, other) | RSS MiB (window mean) | RSS KiB/target | detect p50 / p99 (from flip) | detect p50 / p99 (from 1st failed probe) | delivery p50 / p99 / max |\n")
		b.WriteString("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Points {
			for _, s := range p.systems() {
				delivery := "n/a"
				if s.Delivery.Expected > 0 {
					delivery = fmtLat(s.Delivery)
					if s.Delivery.N > 0 {
						delivery = fmt.Sprintf("%s / %s / %s", fmtDur(s.Delivery.P50), fmtDur(s.Delivery.P99), fmtDur(s.Delivery.Max))
						if m := s.Delivery.Missing(); m > 0 {
							delivery += fmt.Sprintf(" (%d of %d missing)", m, s.Delivery.Expected)
						}
					}
					delivery += fmt.Sprintf(" (%d subs)", s.Subscribers)
				}
				rss := fmt.Sprintf("%.2f", s.RSSPerTarget())
				if m := s.MarginalRSSPerTarget(); m > 0 {
					rss += fmt.Sprintf(" (+%.2f)", m)
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %d | %d / %.0f (%.1f%%) | %.2f%% | %s / %s / %s | %.2f | %.1f | %.2f (%.2f, %.2f) | %s | %s | %s | %s | %s |\n",
					fmtCount(p.Targets), p.Interval, s.System, s.Healthy,
					s.Probes, s.Scheduled(), 100*s.DoneFraction(), 100*s.LateFraction(),
					fmtDur(s.GapP50), fmtDur(s.GapP99), fmtDur(s.GapMax),
					s.ConnsPerProbe(), s.CPUPerProbe(), s.Cores(), s.FarmCores(), s.OtherCores(), fmtMiB(s.WindowRSS()), rss,
					fmtLat(s.Detect), fmtLat(s.DetectFirstFail), delivery)
			}
		}
		b.WriteString("\n| targets | interval | CPU per probe, Pulse / HAProxy | RSS, Pulse / HAProxy | detect p99 from 1st failed probe, Pulse vs HAProxy |\n")
		b.WriteString("|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Points {
			if p.Pulse == nil || p.HAProxy == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s vs %s |\n", fmtCount(p.Targets), p.Interval,
				fmtRatio(p.Pulse.CPUPerProbe(), p.HAProxy.CPUPerProbe()),
				fmtRatio(float64(p.Pulse.WindowRSS()), float64(p.HAProxy.WindowRSS())),
				fmtDur(p.Pulse.DetectFirstFail.P99), fmtDur(p.HAProxy.DetectFirstFail.P99))
		}
		if v := r.Verdicts(); len(v) > 0 {
			b.WriteString("\nPerformance targets, as this run shows them:\n\n")
			for _, line := range v {
				b.WriteString("- " + line + "\n")
			}
		}
	}
	b.WriteString(r.replicaMarkdown())
	var notes []string
	for _, p := range r.Points {
		for _, s := range p.systems() {
			for _, n := range s.Notes {
				notes = append(notes, fmt.Sprintf("%s targets, %s: %s", fmtCount(p.Targets), s.System, n))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

func orNA(s string) string {
	if s == "" {
		return "HAProxy not run"
	}
	return s
}

// Verdicts compares the run with the performance goals, one line each,
// saying met or missed and by how much.
func (r Report) Verdicts() []string {
	var out []string
	metOr := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	for _, p := range r.Points {
		ps, hs := p.Pulse, p.HAProxy
		if ps == nil {
			continue
		}
		at := fmt.Sprintf("%s targets at %s", fmtCount(p.Targets), p.Interval)
		if hs != nil {
			if q, ok := ratio(ps.CPUPerProbe(), hs.CPUPerProbe()); ok {
				out = append(out, fmt.Sprintf("CPU per probe at most half of HAProxy's, %s: %s (%.1f vs %.1f µs, ratio %.2f, target 0.50)",
					at, metOr(q <= 0.5), ps.CPUPerProbe(), hs.CPUPerProbe(), q))
			}
		}
		if kib := ps.RSSPerTarget(); kib > 0 {
			out = append(out, fmt.Sprintf("RSS at most 5 KiB per target, %s: %s (%.2f KiB)", at, metOr(kib <= 5), kib))
		}
		if ps.Probes > 0 {
			missed := 1 - ps.DoneFraction()
			late := ps.LateFraction()
			out = append(out, fmt.Sprintf("under 1%% late probes, %s: %s (%.2f%% late, %.2f%% of scheduled probes not done)",
				at, metOr(late < 0.01 && missed < 0.01), 100*late, 100*max(missed, 0)))
		}
		if ps.DetectFirstFail.N > 0 && r.Fall > 0 {
			floor := time.Duration(r.Fall-1) * p.Interval
			bound := floor + p.Interval
			ok := ps.DetectFirstFail.P99 <= bound && ps.DetectFirstFail.Missing() == 0
			out = append(out, fmt.Sprintf("detection p99 within one interval of the floor, %s: %s (p99 %s after the first failed probe; floor %s, bound %s)",
				at, metOr(ok), fmtDur(ps.DetectFirstFail.P99), fmtDur(floor), fmtDur(bound)))
		}
		if ps.Delivery.N > 0 {
			ok := ps.Delivery.P99 < 10*time.Millisecond && ps.Delivery.Missing() == 0
			out = append(out, fmt.Sprintf("delivery p99 under 10ms to %d subscribers, %s: %s (p99 %s)",
				ps.Subscribers, at, metOr(ok), fmtDur(ps.Delivery.P99)))
		}
	}
	return out
}

// ReplicaResult is one run of -replicas: one pulsed on the embedded
// registry (Replicas 0), or Replicas pulsed sharing the fleet through etcd.
// CPU, RSS and ProcRSS are the replicas' together and each; EtcdCPU and
// EtcdRSS etcd's.
type ReplicaResult struct {
	SystemResult
	Replicas int
	// Owned is how many targets' states each replica (r1, r2, ...) wrote
	// in etcd: its share of the fleet. OwnedOther counts the states none
	// of them wrote.
	Owned      []int
	OwnedOther int
	// Setup is from the first AddTarget to every target healthy on the
	// stream; SetupCPU is the replicas' CPU over it, SetupEtcdCPU etcd's.
	Setup, SetupCPU, SetupEtcdCPU time.Duration
}

// TotalCPUPerProbe is the replicas' and etcd's CPU per probe answered, in
// microseconds.
func (r *ReplicaResult) TotalCPUPerProbe() float64 { return r.CPUPerProbe() + r.EtcdCPUPerProbe() }

// SetupCPUPerTarget is the replicas' and etcd's CPU from the first
// AddTarget to all healthy, per target, in microseconds.
func (r *ReplicaResult) SetupCPUPerTarget() (replicas, etcd float64) {
	if r.Targets == 0 {
		return 0, 0
	}
	return float64(r.SetupCPU.Microseconds()) / float64(r.Targets), float64(r.SetupEtcdCPU.Microseconds()) / float64(r.Targets)
}

// ReplicaPoint is one scale point of -replicas: the embedded registry,
// then each replica count, one after the other against the same farm.
type ReplicaPoint struct {
	Targets  int
	Interval time.Duration
	Runs     []*ReplicaResult
}

// embedded returns the run on the embedded registry, or nil.
func (p ReplicaPoint) embedded() *ReplicaResult {
	for _, r := range p.Runs {
		if r.Replicas == 0 {
			return r
		}
	}
	return nil
}

// fmtShares prints each replica's count and share: "r1 1012 (51%), r2 988 (49%)".
func fmtShares(owned []int, others int) string {
	total := others
	for _, n := range owned {
		total += n
	}
	if total == 0 {
		return "n/a"
	}
	var parts []string
	for i, n := range owned {
		parts = append(parts, fmt.Sprintf("%s %d (%.0f%%)", replicaID(i), n, 100*float64(n)/float64(total)))
	}
	if others > 0 {
		parts = append(parts, fmt.Sprintf("none of them %d", others))
	}
	return strings.Join(parts, ", ")
}

// replicaMarkdown renders the -replicas runs: a table of every run, then
// probes per second and the CPU per probe of etcd mode against the
// embedded registry, and what this machine can show of scale.
func (r Report) replicaMarkdown() string {
	if len(r.ReplicaPoints) == 0 {
		return ""
	}
	var b strings.Builder
	if len(r.Points) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("Replicas on etcd against the embedded registry (one pulsed with a fresh `-data-dir`); every run against the same farm, one after the other. CPU of the replicas is summed over them; etcd's is apart.\n\n")
	b.WriteString("| targets | interval | registry | healthy | probes done / scheduled | probes/s | late | gap p50 / p99 / max | CPU µs/probe: pulsed + etcd = total | total / embedded | cores: pulsed + etcd (farm, other) | RSS MiB: each pulsed, window mean (etcd, at its end) | states written per replica | register → all healthy: time, CPU µs/target pulsed + etcd |\n")
	b.WriteString("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, p := range r.ReplicaPoints {
		base := p.embedded()
		for _, s := range p.Runs {
			vs := "1 (base)"
			if s != base && base != nil {
				vs = fmtRatio(s.TotalCPUPerProbe(), base.TotalCPUPerProbe())
			}
			rss := fmtMiB(s.WindowRSS())
			if len(s.ProcRSS) > 0 {
				var each []string
				for _, x := range s.ProcRSS {
					each = append(each, fmtMiB(x))
				}
				rss = strings.Join(each, " / ")
			}
			if s.Replicas > 0 {
				rss += " (" + fmtMiB(s.EtcdRSS) + ")"
			}
			owned := "n/a"
			if s.Replicas > 0 {
				owned = fmtShares(s.Owned, s.OwnedOther)
			}
			setupPulsed, setupEtcd := s.SetupCPUPerTarget()
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %d / %.0f (%.1f%%) | %.0f | %.2f%% | %s / %s / %s | %.1f + %.1f = %.1f | %s | %.2f + %.2f (%.2f, %.2f) | %s | %s | %s, %.0f + %.0f |\n",
				fmtCount(p.Targets), p.Interval, registryName(s.Replicas), s.Healthy,
				s.Probes, s.Scheduled(), 100*s.DoneFraction(), s.ProbesPerSecond(), 100*s.LateFraction(),
				fmtDur(s.GapP50), fmtDur(s.GapP99), fmtDur(s.GapMax),
				s.CPUPerProbe(), s.EtcdCPUPerProbe(), s.TotalCPUPerProbe(), vs,
				s.Cores(), perWindow(s.EtcdCPU, s.Window), s.FarmCores(), s.OtherCores(), rss, owned,
				fmtDur(s.Setup), setupPulsed, setupEtcd)
		}
	}
	b.WriteString("\n")
	for _, p := range r.ReplicaPoints {
		var rates, costs []string
		base := p.embedded()
		for _, s := range p.Runs {
			rates = append(rates, fmt.Sprintf("%s %.0f", registryName(s.Replicas), s.ProbesPerSecond()))
			if s != base && base != nil {
				costs = append(costs, fmt.Sprintf("%s %s (%.1f vs %.1f µs)", registryName(s.Replicas), fmtRatio(s.TotalCPUPerProbe(), base.TotalCPUPerProbe()), s.TotalCPUPerProbe(), base.TotalCPUPerProbe()))
			}
		}
		fmt.Fprintf(&b, "- %s targets at %s: probes/s: %s (scheduled %.0f).\n", fmtCount(p.Targets), p.Interval, strings.Join(rates, "; "), float64(p.Targets)/p.Interval.Seconds())
		if len(costs) > 0 {
			fmt.Fprintf(&b, "- %s targets at %s: CPU per probe of etcd mode (replicas + etcd) / embedded: %s.\n", fmtCount(p.Targets), p.Interval, strings.Join(costs, "; "))
		}
	}
	fmt.Fprintf(&b, "- Every replica, etcd and the farm share this machine's %d CPUs: a second or third replica divides the same probes among processes on the same cores, so it cannot add probes per second here (the ceiling is the machine's, not one pulsed's). The table shows what replication costs; how far replicas on separate machines scale is not measured.\n", r.Machine.CPUs)
	var notes []string
	for _, p := range r.ReplicaPoints {
		for _, s := range p.Runs {
			for _, n := range s.Notes {
				notes = append(notes, fmt.Sprintf("%s targets, %s: %s", fmtCount(p.Targets), registryName(s.Replicas), n))
			}
		}
	}
	for _, n := range notes {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}

// registryName names a run in the replica table.
func registryName(replicas int) string {
	switch replicas {
	case 0:
		return "embedded"
	case 1:
		return "etcd, 1 replica"
	default:
		return fmt.Sprintf("etcd, %d replicas", replicas)
	}
}
