package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func policyCommand() *command {
	return &command{
		name:    "policy",
		args:    "get|set [flags] GROUP",
		summary: "show or set a group's pool policy (its panic threshold)",
		about: `
policy get GROUP shows a group's policy and pool state: the panic threshold in
force (max_unhealthy_fraction, the group's own or pulsed's default), how many
of its targets are unhealthy and may be, and the targets its panic holds.

policy set GROUP --max-unhealthy-fraction F sets the group's threshold: at most
floor(F x targets) of the group, and always at least one, are marked unhealthy
at once; the others stay routable, held. F is in (0, 1]; 1 disables the
threshold. --default clears the group's own, so pulsed's default applies.`,
		example: `
pulsectl policy get edge
pulsectl policy set edge --max-unhealthy-fraction 0.3
pulsectl policy set edge --default`,
		run: runPolicy,
	}
}

func runPolicy(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	frac := fs.Float64("max-unhealthy-fraction", 0, "with set: the panic threshold, in (0, 1]; 1 disables it")
	dflt := fs.Bool("default", false, "with set: clear the group's own policy, so pulsed's default applies")
	out := addOutputFlag(fs, "the GroupStatus", "yaml")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 || pos[0] != "get" && pos[0] != "set" {
		hint := ""
		if len(pos) > 0 {
			hint = didYouMean(suggest(pos[0], []string{"get", "set"}, nil))
		}
		return c.usageError(e, "want get GROUP or set GROUP, got %q%s", strings.Join(pos, " "), hint)
	}
	verb, group := pos[0], pos[1]
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case verb == "get" && (set["max-unhealthy-fraction"] || set["default"]):
		return c.usageError(e, "--max-unhealthy-fraction and --default go with set")
	case verb == "set" && set["max-unhealthy-fraction"] == *dflt:
		return c.usageError(e, "set takes one of --max-unhealthy-fraction F and --default")
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	var g *pb.GroupStatus
	if verb == "get" {
		resp, err := cl.ListTargets(cctx, &pb.ListTargetsRequest{Group: group})
		if err != nil {
			return cl.fail(e, err, "")
		}
		if len(resp.GetGroups()) == 0 {
			e.errorf("no group %q: it has no targets and no policy (pulsectl ls lists the targets and their groups)", group)
			return exitNotFound
		}
		g = resp.GetGroups()[0]
	} else {
		p := &pb.GroupPolicy{}
		if !*dflt {
			p.MaxUnhealthyFraction = frac
		}
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
	fmt.Fprintf(e.stdout, "%s: max_unhealthy_fraction %s (%s); %d %s, %d unhealthy, at most %d at once",
		g.GetGroup(), strconv.FormatFloat(g.GetMaxUnhealthyFraction(), 'g', -1, 64), source,
		g.GetTargets(), plural(int(g.GetTargets()), "target"), g.GetUnhealthy(), g.GetMaxUnhealthy())
	if g.GetPanic() {
		fmt.Fprintf(e.stdout, "; panic: holding %s", strings.Join(g.GetHeld(), ", "))
	}
	fmt.Fprintln(e.stdout)
	return exitOK
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
	cctx, cancel := callCtx(ctx)
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
