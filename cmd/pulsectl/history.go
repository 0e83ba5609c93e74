package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pulse "github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func historyCommand() *command {
	return &command{
		name:    "history",
		args:    "[flags] NAME | --group GROUP",
		summary: "show a target's or a group's uptime, latency and transitions over time",
		about: `
history shows what pulsed recorded of a target, or of a group's targets added
together, over the last hour, day, week or month (--window): the uptime (the
share of probes that passed), latency percentiles, a sparkline of the uptime
(and of the p95 latency by the hour) and the transitions with their causes.
A sparkline bar is full for a step whose probes all passed and lower the more
failed; a blank is a step with no probe. Latency percentiles are the upper
bound of pulsed's latency bucket that holds them (1ms, 5ms, 10ms, 25ms, 50ms,
100ms, 250ms, 500ms, 1s; 2s for slower).

pulsed keeps the history in its data directory (in memory with -data-dir ""):
24 hours by the minute, 30 days by the hour. With replicas on etcd each
replica keeps what it probed. Asked of another, history asks the replica
that probes the target, with the same TLS settings and token, when the one
asked says where it is reached (pulsed -advertise-host), and says so on
stderr. It does not send a token to another machine without TLS; when it
does not ask, or that replica cannot answer, it prints which replica to ask
(pulsectl state shows it as owner).`,
		example: `
pulsectl history web-1
pulsectl history --group edge --window 7d
pulsectl history web-1 --window 30d -o json`,
		run: runHistory,
	}
}

// historyWindows are the windows --window takes, with the resolution each
// is asked at.
var historyWindows = map[string]struct{ window, res time.Duration }{
	"1h":  {time.Hour, time.Minute},
	"24h": {24 * time.Hour, time.Hour},
	"7d":  {7 * 24 * time.Hour, time.Hour},
	"30d": {30 * 24 * time.Hour, time.Hour},
}

// sparkWidth bounds a sparkline's width: longer histories are drawn with
// several steps a bar.
const sparkWidth = 72

func runHistory(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	group := fs.String("group", "", "show this `group`'s targets added together, instead of one target")
	window := fs.String("window", "24h", "how far back: 1h (by the minute), 24h, 7d or 30d (by the hour)")
	out := addOutputFlag(fs, "the HistoryResponse")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	switch {
	case *group == "" && len(pos) != 1:
		return c.usageError(e, "name one target, or a group with --group; got %d arguments", len(pos))
	case *group != "" && len(pos) != 0:
		return c.usageError(e, "name a target or a group with --group, not both")
	}
	w, ok := historyWindows[*window]
	if !ok {
		return c.usageError(e, "--window must be 1h, 24h, 7d or 30d, got %q", *window)
	}
	req := &pb.HistoryRequest{Group: *group, Window: durationpb.New(w.window), Resolution: durationpb.New(w.res)}
	name := ""
	if len(pos) == 1 {
		req.Target, name = pos[0], pos[0]
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.callCtx(ctx)
	defer cancel()
	resp, err := cl.History(cctx, req)
	if owner, addr := probedElsewhere(err); addr != "" {
		ask := func(ctx context.Context, c *client) (*pb.HistoryResponse, error) { return c.History(ctx, req) }
		if other, oresp, oerr, ok := askOwner(ctx, e, cf, owner, addr, name+" and keeps its history", ask); ok {
			defer other.Close()
			cl, resp, err = other, oresp, oerr
		}
	}
	if err != nil {
		if st := status.Convert(err); st.Code() == codes.NotFound && !strings.HasSuffix(st.Message(), "no such target") {
			// With replicas: the target is another replica's, which
			// pulsed names. Its words, not "no target named".
			name = ""
		}
		return cl.fail(e, err, name)
	}
	if out.structured() {
		return e.printAs(out, resp)
	}
	printHistory(e, escaped(resp), *window)
	return exitOK
}

// probedElsewhere returns the replica and its address that a History
// NOT_FOUND names as probing the target, when it does.
func probedElsewhere(err error) (replica, addr string) {
	st := status.Convert(err)
	if st.Code() != codes.NotFound {
		return "", ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == pulse.ReasonProbedElsewhere && info.GetDomain() == pulse.ErrorDomain {
			return info.GetMetadata()["replica"], info.GetMetadata()["address"]
		}
	}
	return "", ""
}

func printHistory(e *env, h *pb.HistoryResponse, window string) {
	what := "group " + h.GetGroup()
	if h.GetTarget() != "" {
		what = h.GetTarget()
		if h.GetGroup() != "" {
			what += " (group " + h.GetGroup() + ")"
		}
	}
	step := "minute"
	if h.GetResolution().AsDuration() == time.Hour {
		step = "hour"
	}
	fmt.Fprintf(e.stdout, "%s, last %s, by the %s\n", what, window, step)
	if n := h.GetTargetsElsewhere(); n > 0 {
		// With replicas each keeps the history of the targets it probes.
		fmt.Fprintf(e.stdout, "this replica's targets only: %d of the group's %d; %s probe the other %d and keep their history\n",
			h.GetGroupTargets()-n, h.GetGroupTargets(), strings.Join(h.GetReplicasElsewhere(), ", "), n)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if h.Availability == nil {
		fmt.Fprintf(tw, "uptime:\t- (no probe recorded)\n")
	} else {
		fmt.Fprintf(tw, "uptime:\t%s (%d of %d probes passed)\n", percent(h.GetAvailability()), h.GetProbes()-h.GetFailures(), h.GetProbes())
		fmt.Fprintf(tw, "latency:\tmean %s  p50 %s  p95 %s  p99 %s\n", h.GetLatencyMean().AsDuration(), h.GetLatencyP50().AsDuration(), h.GetLatencyP95().AsDuration(), h.GetLatencyP99().AsDuration())
	}
	pts := h.GetPoints()
	if len(pts) > 0 {
		fmt.Fprintf(tw, "\t%s  from %s to now\n", uptimeSpark(pts), pts[0].GetStart().AsTime().Local().Format("01-02 15:04"))
		if step == "hour" && h.Availability != nil {
			fmt.Fprintf(tw, "p95:\t%s\n", latencySpark(pts))
		}
	}
	if slo := h.GetSlo(); slo != nil {
		fmt.Fprintf(tw, "objective:\t%s\n", sloText(slo))
	}
	tw.Flush()
	if h.TimeAvailability != nil {
		fmt.Fprintf(e.stdout, "routable minimum met %s of the time (the group out of panic)\n", percent(h.GetTimeAvailability()))
	}
	evs := h.GetEvents()
	if len(evs) == 0 {
		fmt.Fprintln(e.stdout, "events: none")
		return
	}
	const most = 20
	if len(evs) > most {
		fmt.Fprintf(e.stdout, "events: %d, the last %d:\n", len(evs), most)
		evs = evs[len(evs)-most:]
	} else {
		fmt.Fprintf(e.stdout, "events:\n")
	}
	tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, ev := range evs {
		if ev.GetKind() != "" { // a policy event: a panic, flapping
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", timeText(ev.GetTime().AsTime()), ev.GetTarget(), escape(ev.GetText()))
			continue
		}
		why := ev.GetReason()
		if why == "" {
			why = ev.GetError()
		}
		if m := ev.GetMode(); m != pb.Mode_MODE_ACTIVE && m != pb.Mode_MODE_UNSPECIFIED {
			why = strings.TrimSpace(why + " (" + strings.ToLower(strings.TrimPrefix(m.String(), "MODE_")) + ")")
		}
		line := fmt.Sprintf("  %s\t%s\t%s -> %s", timeText(ev.GetTime().AsTime()), ev.GetTarget(), stateName(ev.GetFrom()), stateName(ev.GetTo()))
		if why != "" {
			line += "\t" + why
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// percent prints a share as an uptime: 99.95%, never rounded up to 100%.
func percent(v float64) string {
	s := fmt.Sprintf("%.2f%%", v*100)
	if s == "100.00%" && v < 1 {
		return "99.99%"
	}
	return s
}

var bars = []rune("▁▂▃▄▅▆▇█")

// chunks groups points so that at most sparkWidth bars are drawn.
func chunks(pts []*pb.HistoryPoint) [][]*pb.HistoryPoint {
	per := (len(pts) + sparkWidth - 1) / sparkWidth
	var out [][]*pb.HistoryPoint
	for i := 0; i < len(pts); i += per {
		out = append(out, pts[i:min(i+per, len(pts))])
	}
	return out
}

// uptimeSpark draws each step's share of passed probes: a full bar for
// all, the lowest for none, a blank for no probe.
func uptimeSpark(pts []*pb.HistoryPoint) string {
	var b strings.Builder
	for _, c := range chunks(pts) {
		var n, fails uint64
		for _, p := range c {
			n += p.GetProbes()
			fails += p.GetFailures()
		}
		if n == 0 {
			b.WriteRune(' ')
			continue
		}
		up := float64(n-fails) / float64(n)
		i := int(up * float64(len(bars)-1))
		if fails > 0 && i == len(bars)-1 {
			i-- // any failure shows
		}
		b.WriteRune(bars[i])
	}
	return b.String()
}

// latencySpark draws each step's p95 latency, scaled to the highest.
func latencySpark(pts []*pb.HistoryPoint) string {
	cs := chunks(pts)
	vals := make([]time.Duration, len(cs))
	var top time.Duration
	for i, c := range cs {
		for _, p := range c {
			vals[i] = max(vals[i], p.GetLatencyP95().AsDuration())
		}
		top = max(top, vals[i])
	}
	var b strings.Builder
	for _, v := range vals {
		if v == 0 || top == 0 {
			b.WriteRune(' ')
			continue
		}
		b.WriteRune(bars[int(float64(v)/float64(top)*float64(len(bars)-1))])
	}
	return b.String() + "  (highest " + top.String() + ")"
}

// sloText says where a group stands against its objective: "99.9% over
// 30d: 99.95% so far, 50.0% of the error budget left; burn rate 0.8x over
// the last hour".
func sloText(slo *pb.GroupSLO) string {
	s := objectiveText(slo.GetObjective()) + " over " + windowText(slo.GetWindow().AsDuration()) + ": "
	if slo.Availability == nil {
		s += "no probe recorded"
	} else {
		s += fmt.Sprintf("%s so far, %.1f%% of the error budget left", percent(slo.GetAvailability()), 100*slo.GetErrorBudgetRemaining())
		if slo.GetErrorBudgetRemaining() < 0 {
			s += " (overspent)"
		}
	}
	if slo.BurnRate != nil {
		s += fmt.Sprintf("; burn rate %.1fx over the last hour", slo.GetBurnRate())
	}
	return s
}
