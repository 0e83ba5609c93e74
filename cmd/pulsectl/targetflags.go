package main

import (
	"flag"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// policyFlags are add's and set's flags for a target's policy fields:
// state-dependent intervals, flap damping, passive outcomes, slow start,
// automatic removal and vantages.
type policyFlags struct {
	fastInterval, downInterval, flapWindow, flapStableFor secondsFlag
	slowStart, removeAfterUnhealthy                       secondsFlag
	flapThreshold, passiveRate                            int
	vantages, quorum                                      int
	passive                                               bool
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.Var(atMost(&p.fastInterval, 24*time.Hour), "fast-interval", "interval while a target is on its way to a transition: a `duration` or seconds, at most 24h (default: --interval)")
	fs.Var(atMost(&p.downInterval, 24*time.Hour), "down-interval", "interval while a target is unhealthy with no pass streak: a `duration` or seconds, at most 24h (default: --interval)")
	fs.Var(atMost(&p.flapWindow, 24*time.Hour), "flap-window", "window over which transitions are counted and flapping judged: a `duration` or seconds, at most 24h (default: 60s)")
	fs.Var(int32Flag(&p.flapThreshold).within(0, 256), "flap-threshold", "`transitions` within --flap-window that make a target flapping, held unhealthy: 2 to 256 (default: no damping)")
	fs.Var(atMost(&p.flapStableFor, 24*time.Hour), "flap-stable-for", "how long a flapping target must stay stable to be released: a `duration` or seconds, at most 24h (default: --flap-window)")
	fs.BoolVar(&p.passive, "passive", false, "accept passive outcomes (pulsectl outcome, ReportOutcome) for the target")
	fs.Var(int32Flag(&p.passiveRate), "passive-rate", "passive `outcomes` counted a second at most (default: 10)")
	fs.Var(atMost(&p.slowStart, time.Hour), "slow-start", "ramp the target's weight from 0 to 100% over this `duration` (or seconds) after it becomes routable, at most 1h (default: the group's, else none)")
	fs.Var(atMost(&p.removeAfterUnhealthy, 30*24*time.Hour), "remove-after-unhealthy", "remove the target once unhealthy this long without a break: a `duration` or seconds, 1s to 30 days (default: the group's, else never)")
	fs.Var(int32Flag(&p.vantages).within(0, 9), "vantages", "`replicas` that probe the target, each from its own vantage (pulsed -vantage), 0 to 9; above 1 needs replicas on etcd (default: its owner alone)")
	fs.Var(int32Flag(&p.quorum), "quorum", "`vantages` that must agree to change the target's state, at most --vantages (default: a majority)")
}

// apply sets t's policy fields from the flags that were set (is reports
// which).
func (p *policyFlags) apply(t *pb.Target, is func(string) bool) {
	for _, f := range []struct {
		name string
		v    secondsFlag
		dst  **durationpb.Duration
	}{
		{"fast-interval", p.fastInterval, &t.FastInterval},
		{"down-interval", p.downInterval, &t.DownInterval},
		{"flap-window", p.flapWindow, &t.FlapWindow},
		{"flap-stable-for", p.flapStableFor, &t.FlapStableFor},
		{"slow-start", p.slowStart, &t.SlowStart},
		{"remove-after-unhealthy", p.removeAfterUnhealthy, &t.RemoveAfterUnhealthy},
	} {
		if is(f.name) {
			*f.dst = durationpb.New(time.Duration(f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    int
		dst  *int32
	}{
		{"flap-threshold", p.flapThreshold, &t.FlapThreshold}, {"passive-rate", p.passiveRate, &t.PassiveRate},
		{"vantages", p.vantages, &t.Vantages}, {"quorum", p.quorum, &t.Quorum},
	} {
		if is(f.name) {
			*f.dst = int32(f.v) // int32Flag took only what fits
		}
	}
	if is("passive") {
		t.PassiveOutcomes = p.passive
	}
}
