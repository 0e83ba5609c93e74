package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func policyCommand() *command {
	return &command{
		name:    "policy",
		args:    "get|set [flags] GROUP",
		summary: "show or set a group's pool policy (its panic threshold, its availability objective, its vantages, its outlier detection)",
		about: `
policy get GROUP shows a group's policy and pool state: the panic threshold in
force (max_unhealthy_fraction, the group's own or pulsed's default), how many
of its targets are unhealthy and may be, the targets its panic holds, and its
availability objective.

policy set GROUP changes the settings given and keeps the others.
--max-unhealthy-fraction F sets the group's threshold: at most floor(F x
targets) of the group, and always at least one, are marked unhealthy at once;
the others stay routable, held. F is in (0, 1]; 1 disables the threshold.
--objective sets the group's availability objective, the share of its
probes that should pass (0.999 or 99.9%), over --objective-window (whole
hours, at most 720h, the default); 'pulsectl history --group GROUP' then shows
the error budget left and its burn rate, and --objective 0 removes it.
--vantages K and --quorum Q are those of the group's targets that set none of
their own (add --vantages): probed from K replicas on etcd, their state a
quorum of Q verdicts (0: a majority); --vantages 0 goes back to one.
--outlier-* set the group's outlier detection (gray failures): a member much
slower than the group (--outlier-latency-factor F: above F x the group's median
latency and the median + --outlier-min-delta, --outlier-consecutive times in a
row), or failing more of its passive outcomes (Envoy's rules:
--outlier-success-rate-stdev-factor, --outlier-failure-percentage), is
degraded: routable at 10% weight. With --outlier-enforce it is ejected (not
routable) for --outlier-base-ejection-time x its ejections in a row, at most
--outlier-max-ejection-percent of the group at once. Setting every rule to 0
turns it off.
--default clears the group's whole policy, so pulsed's defaults apply.`,
		example: `
pulsectl policy get edge
pulsectl policy set edge --max-unhealthy-fraction 0.3
pulsectl policy set edge --objective 99.9% --objective-window 168h
pulsectl policy set edge --vantages 3
pulsectl policy set edge --outlier-latency-factor 3 --outlier-min-delta 20ms
pulsectl policy set edge --outlier-failure-percentage 50 --outlier-enforce
pulsectl policy set edge --default`,
		run: runPolicy,
	}
}

func runPolicy(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	frac := fs.Float64("max-unhealthy-fraction", 0, "with set: the panic threshold, in (0, 1]; 1 disables it")
	dflt := fs.Bool("default", false, "with set: clear the group's own policy, so pulsed's default applies")
	objective := fs.String("objective", "", "with set: the availability objective, the share of probes that should pass: 0.999 or 99.9% (0 removes it)")
	var objWindow secondsFlag
	fs.Var(atMost(&objWindow, 720*time.Hour), "objective-window", "with set: the `duration` the objective is measured over, whole hours up to 720h (the default)")
	var vantages, quorum int
	fs.Var(int32Flag(&vantages).within(0, 9), "vantages", "with set: `replicas` that probe each of the group's targets that sets none of its own, 0 to 9 (needs replicas on etcd above 1)")
	fs.Var(int32Flag(&quorum), "quorum", "with set: `vantages` that must agree to change those targets' state, at most --vantages (0: a majority)")
	of := addOutlierFlags(fs)
	out := addOutputFlag(fs, "the GroupStatus", "yaml")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 || pos[0] != "get" && pos[0] != "set" {
		hint := ""
		if len(pos) > 0 {
			hint = didYouMean(suggest.Closest(pos[0], []string{"get", "set"}, nil))
		}
		return c.usageError(e, "want get GROUP or set GROUP, got %q%s", strings.Join(pos, " "), hint)
	}
	verb, group := pos[0], pos[1]
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	changes := set["max-unhealthy-fraction"] || set["objective"] || set["objective-window"] || set["vantages"] || set["quorum"] || of.any(set)
	switch {
	case verb == "get" && (changes || set["default"]):
		return c.usageError(e, "--max-unhealthy-fraction, --objective, --objective-window, --vantages, --quorum, --outlier-* and --default go with set")
	case verb == "set" && changes == *dflt:
		return c.usageError(e, "set takes --max-unhealthy-fraction F, --objective O, --objective-window D, --vantages K, --quorum Q or --outlier-*, or --default alone")
	}
	var obj float64
	if set["objective"] {
		var err error
		if obj, err = parseObjective(*objective); err != nil {
			return c.usageError(e, "--objective: %v", err)
		}
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	bound := cl.listCtx
	if pos[0] == "set" {
		bound = cl.writeCtx
	}
	cctx, cancel := bound(ctx)
	defer cancel()
	var g *pb.GroupStatus
	resp, err := cl.ListTargets(cctx, &pb.ListTargetsRequest{Group: group})
	if err != nil {
		return cl.fail(e, err, "")
	}
	if len(resp.GetGroups()) > 0 {
		g = resp.GetGroups()[0]
	}
	if verb == "get" {
		if g == nil {
			e.errorf("no group %q: it has no targets and no policy (pulsectl ls lists the targets and their groups)", group)
			return exitNotFound
		}
	} else {
		// SetGroupPolicy replaces the whole policy: the settings not given
		// keep their values.
		p := &pb.GroupPolicy{}
		if g != nil && !*dflt {
			p = g.GetPolicy()
		}
		if set["max-unhealthy-fraction"] {
			p.MaxUnhealthyFraction = frac
		}
		if set["objective"] {
			p.AvailabilityObjective = &obj
			if obj == 0 {
				p.AvailabilityObjective, p.ObjectiveWindow = nil, nil
			}
		}
		if set["objective-window"] {
			p.ObjectiveWindow = durationpb.New(time.Duration(objWindow))
		}
		if set["vantages"] {
			p.Vantages = int32(vantages) // int32Flag took only what fits
		}
		if set["quorum"] {
			p.Quorum = int32(quorum)
		}
		of.apply(set, p)
		resp, err := cl.SetGroupPolicy(cctx, &pb.SetGroupPolicyRequest{Group: group, Policy: p})
		if err != nil {
			return cl.fail(e, err, "")
		}
		g = resp.GetGroup()
	}
	if out.structured() {
		return e.printAs(out, g)
	}
	g = escaped(g)
	source := "pulsed's default"
	if g.GetPolicy().MaxUnhealthyFraction != nil {
		source = "the group's own"
	}
	fmt.Fprintf(e.stdout, "%s: max_unhealthy_fraction %s (%s); %d %s, %d down, at most %d at once",
		g.GetGroup(), strconv.FormatFloat(g.GetMaxUnhealthyFraction(), 'g', -1, 64), source,
		g.GetTargets(), plural(int(g.GetTargets()), "target"), g.GetUnhealthy(), g.GetMaxUnhealthy())
	if g.GetPanic() {
		fmt.Fprintf(e.stdout, "; panic: holding %s", strings.Join(g.GetHeld(), ", "))
	}
	if o := g.GetPolicy().AvailabilityObjective; o != nil {
		fmt.Fprintf(e.stdout, "; objective %s over %s", objectiveText(*o), windowText(g.GetPolicy().GetObjectiveWindow().AsDuration()))
	}
	if k := g.GetPolicy().GetVantages(); k > 1 {
		fmt.Fprintf(e.stdout, "; %s", vantagesText(k, g.GetPolicy().GetQuorum()))
	}
	if t := outlierPolicyText(g.GetPolicy().GetOutlier()); t != "" {
		fmt.Fprintf(e.stdout, "; %s", t)
	}
	fmt.Fprintln(e.stdout)
	return exitOK
}

// parseObjective reads an availability objective: a share (0.999) or a
// percentage (99.9%); 0 stands for none.
func parseObjective(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("want a share such as 0.999 or a percentage such as 99.9%%, got %q", s)
	}
	if pct {
		v /= 100
	}
	return v, nil
}

// objectiveText prints an objective as a percentage: 99.9%.
func objectiveText(o float64) string {
	return strconv.FormatFloat(o*100, 'f', -1, 64) + "%"
}

func outcomeCommand() *command {
	return &command{
		name:    "outcome",
		args:    "--ok|--fail [flags] NAME",
		summary: "report the outcome of a real request to a target (a passive check)",
		about: `
outcome reports one real request's outcome to pulsed (ReportOutcome), as a
load balancer that saw it would. It feeds the target's rise/fall state machine
like a probe result, when the target accepts passive outcomes (add or set it
with --passive), at most its --passive-rate a second: an outcome over the rate
is not counted, and outcome says so.`,
		example: `
pulsectl outcome web-1 --ok --latency 12ms
pulsectl outcome web-1 --fail --error "502 from upstream"`,
		run: runOutcome,
	}
}

func runOutcome(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	okFlag := fs.Bool("ok", false, "the request succeeded")
	failFlag := fs.Bool("fail", false, "the request failed")
	var lat secondsFlag
	fs.Var(&lat, "latency", "how long the request took: a `duration` (12ms) or seconds")
	errText := fs.String("error", "", "why the request failed, with --fail")
	out := addOutputFlag(fs, "the ReportOutcomeResponse", "yaml")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) != 1:
		return c.usageError(e, "name one target, got %d arguments", len(pos))
	case *okFlag == *failFlag:
		return c.usageError(e, "give one of --ok and --fail")
	case *okFlag && *errText != "":
		return c.usageError(e, "--error goes with --fail")
	}
	req := &pb.ReportOutcomeRequest{Target: pos[0], Ok: *okFlag, Error: *errText}
	if lat > 0 {
		req.Latency = durationpb.New(time.Duration(lat))
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.writeCtx(ctx)
	defer cancel()
	resp, err := cl.ReportOutcome(cctx, req)
	if err != nil {
		return cl.fail(e, err, pos[0])
	}
	if out.structured() {
		return e.printAs(out, resp)
	}
	st := escaped(resp).GetStatus()
	if !resp.GetCounted() {
		fmt.Fprintf(e.stdout, "not counted: over %s's passive_rate (%d a second); %s\n", pos[0], st.GetSpec().GetPassiveRate(), stateText(st))
		return exitOK
	}
	fmt.Fprintf(e.stdout, "counted; %s is %s, streak %s\n", pos[0], stateText(st), streak(st))
	return exitOK
}

// windowText prints an objective's window: 30d, 36h.
func windowText(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return fmt.Sprintf("%dh", d/time.Hour)
}
