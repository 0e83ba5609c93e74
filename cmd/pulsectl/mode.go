package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The administrative modes: drain, maint and activate set a target's (or a
// group's) mode with SetMode.

func drainCommand() *command {
	return modeCommand("drain", pb.Mode_MODE_DRAINING, "stop new traffic to targets, still probing them", `
drain puts each named target, or every target of --group, in DRAINING: pulsed
keeps probing it but marks it not routable, so load balancers send it no new
requests and let those in flight finish. --until returns it to ACTIVE by
itself. To drain a target and then remove it, use 'pulsectl rm --drain'.`, `
pulsectl drain web-1 --reason "deploy 4711"
pulsectl drain --group edge --until 30m
pulsectl drain web-1 --until 2026-12-01T18:00:00Z`)
}

func maintCommand() *command {
	return modeCommand("maint", pb.Mode_MODE_MAINTENANCE, "stop probing targets and take them out", `
maint puts each named target, or every target of --group, in MAINTENANCE:
pulsed stops probing it and marks it not routable. Back in ACTIVE (activate,
or --until), it starts unhealthy and must pass rise probes, unless its last
probe is younger than one interval.`, `
pulsectl maint db-1 --reason "disk swap" --until 2h`)
}

func activateCommand() *command {
	return modeCommand("activate", pb.Mode_MODE_ACTIVE, "route targets by their health again", `
activate returns each named target, or every target of --group, to ACTIVE: it
is routed by its health again. A pending 'rm --drain' is cancelled.`, `
pulsectl activate web-1
pulsectl activate --group edge --reason "deploy done"`)
}

func modeCommand(name string, mode pb.Mode, summary, about, example string) *command {
	return &command{
		name:    name,
		args:    "[flags] NAME... | --group GROUP",
		summary: summary,
		about:   about,
		example: example,
		run: func(ctx context.Context, e *env, c *command, args []string) int {
			return runMode(ctx, e, c, mode, args)
		},
	}
}

func runMode(ctx context.Context, e *env, c *command, mode pb.Mode, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	group := fs.String("group", "", "set the mode of every target of this `group`")
	reason := fs.String("reason", "", "why, shown in statuses and transitions (at most 256 bytes)")
	var until *string
	if mode != pb.Mode_MODE_ACTIVE {
		until = fs.String("until", "", "return to active by itself after this `duration` (30m) or at this RFC 3339 time, at most 30 days ahead")
	}
	names, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if (len(names) == 0) == (*group == "") {
		return c.usageError(e, "name the targets, or give --group (not both)")
	}
	req := &pb.SetModeRequest{Mode: mode, Reason: *reason}
	if until != nil && *until != "" {
		t, err := untilTime(*until, time.Now())
		if err != nil {
			return c.usageError(e, "--until: %v", err)
		}
		req.Until = timestamppb.New(t)
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	sel := names
	if *group != "" {
		sel = []string{""}
	}
	for _, name := range sel {
		req.Target, req.Group = name, *group
		cctx, cancel := cl.writeCtx(ctx)
		resp, err := cl.SetMode(cctx, req)
		cancel()
		if err != nil {
			return cl.fail(e, err, name)
		}
		for _, st := range escaped(resp).GetTargets() {
			fmt.Fprintf(e.stdout, "%s %s\n", st.GetSpec().GetName(), modeSummary(st))
		}
	}
	return exitOK
}

// maxUntil is how far ahead --until may be, as the API bounds it.
const maxUntil = 30 * 24 * time.Hour

// untilTime reads --until: a duration from now, or an RFC 3339 time.
func untilTime(s string, now time.Time) (time.Time, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err == nil && d <= 0, err != nil && durationForm.MatchString(s) && strings.HasPrefix(s, "-"):
		return time.Time{}, fmt.Errorf("must be positive, got %v", s)
	case err == nil:
		return now.Add(d), nil
	case durationForm.MatchString(s): // a duration too large to read
		return time.Time{}, fmt.Errorf("too large: must be at most %v ahead", maxUntil)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration (30m) or an RFC 3339 time (2026-12-01T18:00:00Z), got %q", s)
	}
	return t, nil
}

// modeName is a mode as people write it; unset is active.
func modeName(m pb.Mode) string {
	switch m {
	case pb.Mode_MODE_DRAINING:
		return "draining"
	case pb.Mode_MODE_MAINTENANCE:
		return "maintenance"
	}
	return "active"
}

// reducedWeight returns the weight of a routable target that takes less
// than its full share of traffic, in a slow start or as a degraded
// outlier, and whether it does. A pulsed from before weights leaves the
// field unset: without a slow start or an outlier to explain it, 0 is
// that, not a target routed at 0%.
func reducedWeight(st *pb.TargetStatus) (uint32, bool) {
	if !st.GetRoutable() || st.GetWeight() >= 100 || st.GetSlowStartEnd() == nil && st.GetOutlier() == nil {
		return 0, false
	}
	return st.GetWeight(), true
}

// modeSummary describes a status's mode in one phrase, e.g. "draining
// (deploy 4711) until 2026-12-01T18:00:00+01:00, removed at ...".
func modeSummary(st *pb.TargetStatus) string {
	parts := []string{modeName(st.GetMode())}
	if r := st.GetModeReason(); r != "" {
		parts[0] += " (" + r + ")"
	}
	if u := st.GetModeUntil(); u != nil {
		parts = append(parts, "until "+timeText(u.AsTime()))
	}
	if rt := st.GetRemoveTime(); rt != nil {
		parts = append(parts, "removed at "+timeText(rt.AsTime()))
	}
	return strings.Join(parts, ", ")
}
