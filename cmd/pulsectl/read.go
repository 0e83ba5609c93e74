package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func rmCommand() *command {
	return &command{
		name:    "rm",
		args:    "[flags] NAME...",
		summary: "remove targets",
		about: `
rm unregisters each named target. An unknown name is an error (exit 3) unless
--missing-ok is set; the other names are still removed. With --drain, each
target is drained first (DRAINING: probed, not routable, requests in flight
finish) and removed by pulsed once the duration is over; rm returns once the
drain is stored.`,
		example: `
pulsectl rm web-1
pulsectl rm --missing-ok web-1 web-2
pulsectl rm --drain 30s web-1`,
		run: runRm,
	}
}

func runRm(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	missingOK := fs.Bool("missing-ok", false, "succeed when a name is not registered")
	var drain zeroSecondsFlag
	fs.Var(atMost(&drain, 24*time.Hour), "drain", "drain each target for this `duration` (1s to 24h), then remove it")
	names, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(names) == 0 {
		return c.usageError(e, "name the targets to remove")
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	code = exitOK
	for _, name := range names {
		req := &pb.RemoveTargetRequest{Name: name}
		if drain != 0 {
			req.DrainFor = durationpb.New(time.Duration(drain))
		}
		cctx, cancel := cl.writeCtx(ctx)
		resp, err := cl.RemoveTarget(cctx, req)
		cancel()
		switch {
		case err != nil:
			return cl.fail(e, err, name)
		case resp.GetRemoved() && resp.GetRemoveTime() != nil:
			fmt.Fprintf(e.stdout, "draining %s, removed at %s\n", name, timeText(resp.GetRemoveTime().AsTime()))
		case resp.GetRemoved():
			fmt.Fprintf(e.stdout, "removed %s\n", name)
		case !*missingOK:
			e.errorf("no target named %q (pulsectl ls lists them)", name)
			code = exitNotFound
		}
	}
	return code
}

func stateCommand() *command {
	return &command{
		name:    "state",
		args:    "[flags] NAME",
		summary: "show one target's spec, state, streak and last probe",
		about: `
state shows one target as pulsed sees it: its probe and schedule with pulsed's
defaults filled in, its state, its streak (see pulsectl ls --help), the last
probe's result and when the state last changed. With replicas on etcd, owner
names the replica that probes the target and stores its state, whichever
replica answers; only one that probes the target knows its streak and last
probe. Asked of another, state asks the owner, with the same TLS settings
and token, when the one asked says where it is reached (pulsed
-advertise-host), and says so on stderr; otherwise the streak and the last
probe say which replica keeps them.`,
		example: `
pulsectl state web-1
pulsectl state web-1 -o json`,
		run: runState,
	}
}

func runState(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	out := addOutputFlag(fs, "the StateResponse", "yaml")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(e, "name one target, got %d arguments", len(pos))
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.callCtx(ctx)
	defer cancel()
	req := &pb.StateRequest{Name: pos[0]}
	resp, err := cl.State(cctx, req)
	if err != nil {
		return cl.fail(e, err, pos[0])
	}
	if addr := resp.GetOwnerAddress(); addr != "" {
		// With replicas: the streak and the last probe are the owner's.
		ask := func(ctx context.Context, c *client) (*pb.StateResponse, error) { return c.State(ctx, req) }
		if other, oresp, oerr, ok := askOwner(ctx, e, cf, resp.GetStatus().GetOwner(), addr, pos[0]+" and keeps its streak and last probe", ask); ok {
			defer other.Close()
			if oerr != nil {
				return other.fail(e, oerr, pos[0])
			}
			resp = oresp
		}
	}
	if out.structured() {
		return e.printAs(out, resp)
	}
	resp = escaped(resp)
	st := resp.GetStatus()
	spec := st.GetSpec()
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", spec.GetName())
	fmt.Fprintf(tw, "group:\t%s\n", orDash(spec.GetGroup()))
	fmt.Fprintf(tw, "probe:\t%s\n", probeSummary(spec))
	fmt.Fprintf(tw, "schedule:\t%s\n", scheduleSummary(spec))
	routable := "not routable"
	if st.GetRoutable() {
		routable = "routable"
	}
	if text := stateText(st); strings.HasSuffix(text, ")") { // "healthy (held: panic in edge; routable)"
		fmt.Fprintf(tw, "state:\t%s; %s)\n", strings.TrimSuffix(text, ")"), routable)
	} else {
		fmt.Fprintf(tw, "state:\t%s (%s)\n", text, routable)
	}
	if v := st.GetVerdict(); v != pb.State_STATE_UNSPECIFIED && v != st.GetState() {
		fmt.Fprintf(tw, "verdict:\t%s (what its results alone say)\n", stateName(v))
	}
	if vs := st.GetVantages(); len(vs) > 0 {
		fmt.Fprintf(tw, "vantages:\t%s\n", verdictsText(vs))
	}
	if o := st.GetOwner(); o != "" {
		fmt.Fprintf(tw, "owner:\t%s\n", o)
	}
	// On a replica that does not probe the target, the streak and the
	// last probe are the owner's: say so rather than "-" and "none yet".
	elsewhere := ""
	if r := resp.GetReplica(); r != "" && st.GetOwner() != "" && !probedBy(st, r) {
		elsewhere = "replica " + st.GetOwner() + " probes it"
	}
	if elsewhere != "" {
		fmt.Fprintf(tw, "streak:\t- (%s)\n", elsewhere)
	} else {
		fmt.Fprintf(tw, "streak:\t%s\n", streak(st))
	}
	fmt.Fprintf(tw, "mode:\t%s\n", modeSummary(st))
	if o := st.GetOutlier(); o != nil {
		fmt.Fprintf(tw, "outlier:\t%s\n", outlierText(o))
	}
	if w, ok := reducedWeight(st); ok {
		var why []string
		if st.GetOutlier() != nil {
			why = append(why, "degraded outlier")
		}
		if t := st.GetSlowStartEnd(); t != nil {
			why = append(why, "slow start until "+timeText(t.AsTime()))
		}
		fmt.Fprintf(tw, "weight:\t%d%% (%s)\n", w, strings.Join(why, "; "))
	}
	if q := st.GetQuarantined(); q != "" {
		fmt.Fprintf(tw, "quarantined:\t%s (not probed: fix it with pulsectl add, or remove it with pulsectl rm)\n", q)
	}
	if r := st.GetLastResult(); r != nil {
		verdict := "pass"
		if !r.GetPass() {
			verdict = "fail"
		}
		line := verdict
		if lat, ok := resultLatency(r); ok {
			line += " in " + lat
		}
		line += " at " + timeText(r.GetTime().AsTime())
		if r.GetError() != "" {
			line += ": " + r.GetError()
		}
		label := "last probe"
		if r.GetPassive() {
			// A real request's outcome (pulsectl outcome, ReportOutcome),
			// not a probe of pulsed's.
			label, line = "last result", line+" (passive outcome)"
		}
		fmt.Fprintf(tw, "%s:\t%s\n", label, line)
	} else if elsewhere != "" {
		fmt.Fprintf(tw, "last probe:\tnone here (%s)\n", elsewhere)
	} else {
		fmt.Fprintf(tw, "last probe:\tnone yet\n")
	}
	if w := st.GetCertExpiryWarning(); w != "" {
		fmt.Fprintf(tw, "certificate:\t%s\n", w)
	}
	for _, w := range st.GetWarnings() {
		fmt.Fprintf(tw, "warning:\t%s\n", w)
	}
	if t := st.GetLastTransitionTime(); t != nil {
		fmt.Fprintf(tw, "since:\t%s (%s ago)\n", timeText(t.AsTime()), age(t, now))
	} else {
		fmt.Fprintf(tw, "since:\tadded (no transition yet)\n")
	}
	tw.Flush()
	return exitOK
}

func lsCommand() *command {
	return &command{
		name:    "ls",
		args:    "[flags]",
		summary: "list targets with their state, streak and last probe",
		about: `
ls lists every target, sorted by name:

  STATE       healthy, unhealthy, or suspect (three_state model), with what
              qualifies it: "healthy (held: panic in edge)" is kept routable
              by its group's panic threshold though its results say
              unhealthy, "unhealthy (flapping)" is held down by flap damping,
              "(carried over)" is the state from before pulsed restarted,
              until the first fresh probe result
  MODE        active, draining or maintenance (pulsectl drain, maint,
              activate); a weight in percent while in its slow start
  STREAK      the current run of passes or failures; "pass 1/2" is 1 of the
              2 passes (rise) a target that is not healthy needs to become
              healthy, "fail 2/3" 2 of the 3 failures (fall) that make a
              target that is not unhealthy unhealthy; no "/N" when the streak
              changes nothing ("pass 7" on a healthy target)
  LATENCY     of the last probe
  LAST-ERROR  why the last probe failed, "-" if it passed
  SINCE       time since the state last changed, "-" if it never did

-o wide adds VERDICT (what the results alone say), EVERY (the interval it is
probed at now), PROBE and SOURCE (who registered it: api, file, or
discovery:GROUP), and shows errors whole. With replicas on etcd it adds OWNER,
the replica that probes the target and stores its state ("r1 (this one)"
when it is the replica that answered); a single pulsed has no OWNER column.
--state keeps the targets
in one state: healthy, unhealthy, suspect, routable, not-routable, held,
flapping, carried-over, quarantined or outlier.`,
		example: `
pulsectl ls
pulsectl ls --group edge --state unhealthy
pulsectl ls -o wide
pulsectl ls --state held -o yaml
pulsectl ls -o json | jq -r '.targets[] | select(.state != "STATE_HEALTHY") | .spec.name'`,
		run: runLs,
	}
}

func runLs(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	group := fs.String("group", "", "list only this `group`'s targets")
	state := fs.String("state", "", "list only the targets in this `state`: "+orList(slices.Sorted(maps.Keys(stateFilters))))
	out := addOutputFlag(fs, "the ListTargetsResponse; wide adds the verdict, the interval, the probe, the source and, with replicas, the owner", "yaml", "wide")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(e, "unexpected argument %q (to filter by group, use --group)", pos[0])
	}
	keep := stateFilters[*state]
	if *state != "" && keep == nil {
		return c.usageError(e, "--state must be %s, got %q%s", orList(slices.Sorted(maps.Keys(stateFilters))), *state,
			didYouMean(suggest.Closest(*state, slices.Collect(maps.Keys(stateFilters)), nil)))
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.listCtx(ctx)
	defer cancel()
	resp, err := cl.ListTargets(cctx, &pb.ListTargetsRequest{Group: *group})
	if err != nil {
		return cl.fail(e, err, "")
	}
	if keep != nil {
		resp.Targets = slices.DeleteFunc(resp.Targets, func(st *pb.TargetStatus) bool { return !keep(st) })
	}
	if out.structured() {
		return e.printAs(out, resp)
	}
	resp = escaped(resp)
	// pulsed's own troubles, on stderr: they qualify every row.
	for _, w := range checkerWarnings(resp.GetChecker()) {
		e.errorf("%s", w)
	}
	if len(resp.GetTargets()) == 0 {
		switch {
		case *state != "":
			fmt.Fprintf(e.stderr, "no %s targets\n", *state)
		case *group != "":
			fmt.Fprintf(e.stderr, "no targets in group %q\n", *group)
		default:
			fmt.Fprintln(e.stderr, "no targets; add one with pulsectl add")
		}
		return exitOK
	}
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	header := "NAME\tGROUP\tSTATE\tMODE\tSTREAK\tLATENCY\tLAST-ERROR\tSINCE"
	width := 60 // of an error; -o wide shows it whole
	// OWNER only with replicas: a single pulsed names no owner, and a
	// column of dashes would say nothing.
	owners := out.wide() && slices.ContainsFunc(resp.GetTargets(), func(st *pb.TargetStatus) bool { return st.GetOwner() != "" })
	if out.wide() {
		header += "\tVERDICT\tEVERY\tPROBE\tSOURCE"
		width = 1 << 20
	}
	if owners {
		header += "\tOWNER"
	}
	fmt.Fprintln(tw, header)
	for _, st := range resp.GetTargets() {
		lat, lastErr := "-", "-"
		if r := st.GetLastResult(); r != nil {
			lastErr = orDash(truncate(r.GetError(), width))
			if l, ok := resultLatency(r); ok {
				lat = l
			}
		}
		if q := st.GetQuarantined(); q != "" {
			lastErr = truncate("quarantined: "+q, width)
		}
		mode := modeName(st.GetMode())
		if w, ok := reducedWeight(st); ok {
			mode += fmt.Sprintf(" %d%%", w)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", st.GetSpec().GetName(), orDash(st.GetSpec().GetGroup()),
			stateText(st), mode, streak(st), lat, lastErr, age(st.GetLastTransitionTime(), now))
		if out.wide() {
			fmt.Fprintf(tw, "\t%s\t%v\t%s\t%s", stateName(st.GetVerdict()), st.GetProbeInterval().AsDuration(), probeSummary(st.GetSpec()), orDash(st.GetSource()))
		}
		if owners {
			fmt.Fprintf(tw, "\t%s", ownerText(st.GetOwner(), resp.GetChecker().GetReplica()))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return exitOK
}

func healthyCommand() *command {
	return &command{
		name:    "healthy",
		args:    "[flags] [GROUP]",
		summary: "list the routable targets, one name per line",
		about: `
healthy prints the names of the targets that should receive traffic, sorted:
healthy targets, and suspect ones of the three_state model. With GROUP, only
that group's. It exits 3 when GROUP has no targets (a typo, or a group that
is gone), and 5 when no target is routable, so that a script can tell the
two from a list.`,
		example: `
pulsectl healthy
pulsectl healthy edge
pulsectl healthy edge -o json`,
		run: runHealthy,
	}
}

func runHealthy(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	out := addOutputFlag(fs, "the HealthyResponse", "yaml")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return c.usageError(e, "give at most one group, got %d arguments", len(pos))
	}
	req := &pb.HealthyRequest{}
	if len(pos) == 1 {
		req.Group = pos[0]
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.listCtx(ctx) // Healthy, then ListTargets when nothing is routable
	defer cancel()
	resp, err := cl.Healthy(cctx, req)
	if err != nil {
		return cl.fail(e, err, "")
	}
	if len(resp.GetNames()) == 0 {
		// Nothing routable: say whether the group exists at all.
		list, err := cl.ListTargets(cctx, &pb.ListTargetsRequest{Group: req.GetGroup()})
		if err != nil {
			return cl.fail(e, err, "")
		}
		if req.GetGroup() != "" && len(list.GetTargets()) == 0 {
			e.errorf("no targets in group %q (pulsectl ls lists the targets and their groups)", req.GetGroup())
			return exitNotFound
		}
		code = exitNoneRoutable
		if req.GetGroup() != "" {
			e.errorf("no routable target in group %q (%d %s)", req.GetGroup(), len(list.GetTargets()), plural(len(list.GetTargets()), "target"))
		} else {
			e.errorf("no routable target (%d %s)", len(list.GetTargets()), plural(len(list.GetTargets()), "target"))
		}
	}
	if out.structured() {
		if c := e.printAs(out, resp); c != exitOK {
			return c
		}
		return code
	}
	for _, n := range resp.GetNames() {
		fmt.Fprintln(e.stdout, escape(n))
	}
	return code
}

// ownerText is a row's OWNER: the replica that probes the target, "(this
// one)" when it is the replica that answered, "-" for none.
func ownerText(owner, answered string) string {
	if owner != "" && owner == answered {
		return owner + " (this one)"
	}
	return orDash(owner)
}

// checkerWarnings says what of pulsed's own state qualifies every row of a
// listing: its overload, other replicas' overload, a registry it cannot
// write.
func checkerWarnings(ck *pb.CheckerStatus) []string {
	var out []string
	if ck.GetDegraded() {
		out = append(out, fmt.Sprintf("warning: pulsed's checker is degraded (%s): its own probe timeouts do not count toward fall until it recovers", ck.GetReason()))
	}
	var others []string
	for _, id := range ck.GetDegradedReplicas() {
		if id != ck.GetReplica() || !ck.GetDegraded() {
			others = append(others, id)
		}
	}
	switch len(others) {
	case 0:
	case 1:
		out = append(out, fmt.Sprintf("warning: replica %s is degraded: its own probe timeouts do not count toward fall until it recovers", others[0]))
	default:
		out = append(out, fmt.Sprintf("warning: replicas %s are degraded: their own probe timeouts do not count toward fall until they recover", strings.Join(others, ", ")))
	}
	if msg := ck.GetRegistryError(); msg != "" {
		out = append(out, fmt.Sprintf("warning: pulsed cannot store changes (%s): it keeps probing, and refuses the changes it cannot store", msg))
	}
	return out
}

// probedBy reports whether the member replica probes the target of st: it
// is its owner or one of its vantages.
func probedBy(st *pb.TargetStatus, replica string) bool {
	return st.GetOwner() == replica || slices.ContainsFunc(st.GetVantages(), func(v *pb.VantageVerdict) bool { return v.GetMember() == replica })
}
