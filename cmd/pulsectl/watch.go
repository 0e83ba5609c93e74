package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	pulse "github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func watchCommand() *command {
	return &command{
		name:    "watch",
		args:    "[flags]",
		summary: "follow state transitions and target changes as they happen",
		about: `
watch prints one line per event until interrupted (Ctrl-C, exit 0):

  2026-11-30T10:18:54Z web-1: unhealthy -> healthy     a state transition
  2026-11-30T10:19:02Z web-2: added (http GET ..., unhealthy)
  2026-11-30T10:19:30Z web-2: updated: interval 2s -> 5s, rise 2 -> 3
  2026-11-30T10:20:11Z web-2: removed

A transition shows the time pulsed applied it; added, updated and removed
lines show when pulsectl received them. An update says what it changed, as
set does (a probe's own fields are named, not shown); one that shows no
change changed a value pulsed does not show (a header's value, a URL's
password). After --since, which has no snapshot, a target's first update
names its probe instead. By default watch starts from pulsed's current view
(the snapshot is not printed; --snapshot prints it, one line per target).
--since REV resumes after revision REV instead: take it from a previous
watch -o json, or from pulsectl ls -o json's "revision". When pulsed goes
away, watch says so and reconnects, resuming where it was, for up to
--reconnect (10s); past that it exits and names the revision to resume
from. A pulsed that refuses the token or certificate on reconnecting ends it
at once (exit 7), naming that revision too.`,
		example: `
pulsectl watch
pulsectl watch --group edge --snapshot
pulsectl watch --name web-1 --name web-2
pulsectl watch --since 1764497934000123 -o json`,
		run: runWatch,
	}
}

// namesFlag is a repeatable --name.
type namesFlag []string

func (n *namesFlag) String() string { return strings.Join(*n, ",") }
func (n *namesFlag) Set(v string) error {
	*n = append(*n, v)
	return nil
}

// maxReconnect bounds --reconnect.
const maxReconnect = 24 * time.Hour

func runWatch(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	group := fs.String("group", "", "watch only this `group`'s targets")
	var names namesFlag
	fs.Var(&names, "name", "watch only this target `name`; repeatable")
	since := fs.Uint64("since", 0, "resume after this `revision` instead of starting from the current view")
	snapshot := fs.Bool("snapshot", false, "first print every current target's state")
	reconnect := zeroSecondsFlag(10 * time.Second)
	fs.Var(atMost(&reconnect, maxReconnect), "reconnect", "after losing pulsed, keep reconnecting for this `duration` and resume where the watch was (0: exit at once; at most 24h)")
	out := addOutputFlag(fs, "json: every event, progress included, as one protojson object per line; the snapshot's targets with --snapshot only")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(e, "unexpected argument %q (to watch a target, use --name)", pos[0])
	}
	if *snapshot && *since != 0 {
		return c.usageError(e, "--snapshot and --since exclude each other: a resumed watch has no snapshot")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["since"] && *since == 0 {
		return c.usageError(e, "--since must be a revision above 0 (leave it out to start from the current view)")
	}
	if time.Duration(reconnect) > maxReconnect {
		return c.usageError(e, "--reconnect must be from 0 to %v, got %v", maxReconnect, time.Duration(reconnect))
	}
	cl, ok := cf.newClient(ctx, e)
	if !ok {
		return exitUsage
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wopts := []pulse.WatchOption{pulse.WithMessages()}
	if *since > 0 {
		wopts = append(wopts, pulse.FromRevision(*since))
	}
	w := &watcher{
		e: e, cl: cl, since: *since, reconnect: time.Duration(reconnect),
		printer: &watchPrinter{w: e.stdout, json: out.json(), snapshot: *snapshot, now: time.Now},
	}
	return w.follow(ctx, cl.pc.Watch(ctx, pulse.Filter{Group: *group, Names: names}, wopts...))
}

// watcher prints a watch's events, and says on stderr when it loses pulsed
// and when it is back.
type watcher struct {
	e         *env
	cl        *client // for its address, and to report a failure
	since     uint64
	reconnect time.Duration
	printer   *watchPrinter

	connected bool        // a stream was accepted once
	lost      *time.Timer // running while pulsed is lost; nil otherwise
}

// follow prints events until ctx ends (exit 0) or the watch cannot go on.
func (w *watcher) follow(ctx context.Context, events <-chan pulse.Event) int {
	var giveUp <-chan time.Time
	var resume uint64 // the revision to resume from
	defer func() {
		if w.lost != nil {
			w.lost.Stop()
		}
	}()
	for {
		select {
		case <-giveUp:
			w.e.errorf("lost pulsed at %s for %v; resume with pulsectl watch --since %d", w.cl.addr, w.reconnect, resume)
			return exitServer
		case ev, ok := <-events:
			if !ok {
				return exitOK // interrupted: the normal way to stop
			}
			switch ev.Kind {
			case pulse.EventDisconnected:
				if !w.connected {
					return w.cl.fail(w.e, ev.Err, "")
				}
				resume = ev.Revision
				if w.cl.refused(ev.Err) {
					// A token or certificate pulsed refuses stays refused:
					// reconnecting cannot help.
					code := w.cl.fail(w.e, ev.Err, "")
					fmt.Fprintf(w.e.stderr, "Once that is fixed, resume with pulsectl watch --since %d\n", resume)
					return code
				}
				if w.lost == nil {
					if w.reconnect == 0 {
						w.e.errorf("lost pulsed at %s: %s; resume with pulsectl watch --since %d", w.cl.addr, escape(status.Convert(ev.Err).Message()), resume)
						return exitServer
					}
					fmt.Fprintf(w.e.stderr, "lost pulsed at %s (%s); reconnecting for up to %v\n", w.cl.addr, escape(status.Convert(ev.Err).Message()), w.reconnect)
					w.lost = time.NewTimer(w.reconnect)
					giveUp = w.lost.C
				}
				continue
			case pulse.EventStopped:
				return w.cl.fail(w.e, ev.Err, "")
			case pulse.EventResumed:
				w.up(fmt.Sprintf("resumed after revision %d", ev.Revision))
				giveUp = nil
			case pulse.EventSnapshot:
				if ev.Resnapshot && !w.connected && w.since > 0 {
					return w.cannotResume(ev.Err)
				}
				if ev.Resnapshot {
					fmt.Fprintf(w.e.stderr, "pulsed could not resume the watch (%s); following its current view again\n", escape(status.Convert(ev.Err).Message()))
				}
				w.up("from its current view")
				giveUp = nil
			}
			for _, m := range ev.Messages() {
				if err := w.printer.print(m.(*pb.WatchTransitionsResponse)); err != nil {
					w.e.errorf("writing: %v", err)
					return exitServer
				}
			}
		}
	}
}

// up notes that a stream was accepted: the first, or one after pulsed was
// lost.
func (w *watcher) up(how string) {
	switch {
	case !w.connected:
		w.connected = true
		fmt.Fprintf(w.e.stderr, "watching pulsed at %s (Ctrl-C to stop)\n", w.cl.addr)
	case w.lost != nil:
		fmt.Fprintf(w.e.stderr, "reconnected to pulsed at %s; %s\n", w.cl.addr, how)
	}
	if w.lost != nil {
		w.lost.Stop()
		w.lost = nil
	}
}

// cannotResume reports that --since named a revision pulsed cannot resume
// from; it is a usage error.
func (w *watcher) cannotResume(err error) int {
	st := status.Convert(err)
	st = status.New(st.Code(), escape(st.Message()))
	if errors.Is(err, pulse.ErrOutOfRange) {
		w.e.errorf("%s\nThe revision is too old to resume from: watch without --since to start from the current view.", st.Message())
	} else {
		w.e.errorf("%s\nThe revision is not this pulsed's (it restarted, or it is another one): watch without --since.", st.Message())
	}
	return exitUsage
}

// watchPrinter prints watch events as lines of text or JSON.
type watchPrinter struct {
	w        io.Writer
	json     bool
	snapshot bool
	now      func() time.Time

	// known holds what an update is compared with of each target (its
	// spec, source and quarantine), from the snapshot and the events
	// since; text only.
	known map[string]*pb.TargetStatus
}

// print writes one event. Without --snapshot, snapshot events print
// nothing; progress events print nothing in text.
func (p *watchPrinter) print(ev *pb.WatchTransitionsResponse) error {
	if p.json {
		if ev.GetSnapshot() != nil && !p.snapshot {
			return nil // the snapshot is printed with --snapshot only, as in text
		}
		b, err := stableJSON(ev, false)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	}
	ev = escaped(ev)
	line := p.line(ev)
	p.remember(ev)
	if line == "" {
		return nil
	}
	_, err := fmt.Fprintln(p.w, line)
	return err
}

// remember keeps what an update is compared with of the status ev gives a
// target, not its results or vantages, or forgets a removed target.
func (p *watchPrinter) remember(ev *pb.WatchTransitionsResponse) {
	var st *pb.TargetStatus
	switch x := ev.GetEvent().(type) {
	case *pb.WatchTransitionsResponse_Snapshot:
		st = x.Snapshot
	case *pb.WatchTransitionsResponse_Added:
		st = x.Added
	case *pb.WatchTransitionsResponse_Updated:
		st = x.Updated
	case *pb.WatchTransitionsResponse_Removed:
		delete(p.known, x.Removed.GetName())
		return
	default:
		return
	}
	if p.known == nil {
		p.known = make(map[string]*pb.TargetStatus)
	}
	p.known[st.GetSpec().GetName()] = &pb.TargetStatus{Spec: st.GetSpec(), Source: st.GetSource(), Quarantined: st.GetQuarantined()}
}

// line is the text form of ev, "" for events not shown.
func (p *watchPrinter) line(ev *pb.WatchTransitionsResponse) string {
	now := timeText(p.now())
	switch x := ev.GetEvent().(type) {
	case *pb.WatchTransitionsResponse_Transition:
		tr := x.Transition
		at := now
		if tr.GetTime() != nil {
			at = timeText(tr.GetTime().AsTime())
		}
		text := tr.GetText()
		if text == "" { // a server that predates text
			text = fmt.Sprintf("%s: %s -> %s", tr.GetTarget(), stateName(tr.GetFrom()), stateName(tr.GetTo()))
		}
		// Why, when the text does not say it already: the policy or mode
		// behind the transition, and the probe's error.
		if r := tr.GetReason(); r != "" && !strings.Contains(text, r) {
			text += " (" + r + ")"
		}
		if e := tr.GetResult().GetError(); e != "" && !strings.Contains(text, e) {
			text += ": " + e
		}
		// The vantages' verdicts, when they did not decide it (their
		// reason lists them already).
		if vs := tr.GetVantages(); len(vs) > 0 && !strings.Contains(text, "vantages: ") {
			text += " [vantages: " + verdictsText(vs) + "]"
		}
		return at + " " + text
	case *pb.WatchTransitionsResponse_Policy:
		pe := x.Policy
		at := now
		if pe.GetTime() != nil {
			at = timeText(pe.GetTime().AsTime())
		}
		return at + " " + policyText(pe)
	case *pb.WatchTransitionsResponse_Added:
		return fmt.Sprintf("%s %s: added (%s, %s)", now, x.Added.GetSpec().GetName(), probeSummary(x.Added.GetSpec()), stateName(x.Added.GetState()))
	case *pb.WatchTransitionsResponse_Updated:
		spec := x.Updated.GetSpec()
		prev := p.known[spec.GetName()]
		if prev == nil { // after --since: nothing to compare with
			return fmt.Sprintf("%s %s: updated (%s)", now, spec.GetName(), probeSummary(spec))
		}
		changes := append(specChanges(prev.GetSpec(), spec), statusChanges(prev, x.Updated)...)
		if len(changes) == 0 {
			// pulsed sends an update only when the spec changed (or the
			// target's source, or its quarantine ended): what changed is
			// a value it answers as <redacted>.
			return fmt.Sprintf("%s %s: updated: a value pulsed does not show changed (a header, a URL password, gRPC metadata or a TLS key)", now, spec.GetName())
		}
		return fmt.Sprintf("%s %s: updated: %s", now, spec.GetName(), strings.Join(changes, ", "))
	case *pb.WatchTransitionsResponse_Removed:
		return fmt.Sprintf("%s %s: removed", now, x.Removed.GetName())
	case *pb.WatchTransitionsResponse_Mode:
		m := x.Mode
		line := fmt.Sprintf("%s %s: mode %s -> %s", timeText(m.GetTime().AsTime()), m.GetTarget(), modeName(m.GetFrom()), modeName(m.GetMode()))
		if r := m.GetReason(); r != "" {
			line += " (" + r + ")"
		}
		return line
	case *pb.WatchTransitionsResponse_Snapshot:
		if !p.snapshot {
			return ""
		}
		return fmt.Sprintf("%s %s: %s (snapshot)", now, x.Snapshot.GetSpec().GetName(), stateName(x.Snapshot.GetState()))
	default: // snapshot_complete, progress, and events newer than this client
		return ""
	}
}

// statusChanges describes what an update changed besides the spec, which
// the spec may not show: the source that registered the target ("source
// api -> file": a targets file took it over), and the end of its
// quarantine ("out of quarantine": the same spec may fix it, once
// pulsed's rules allow it).
func statusChanges(old, cur *pb.TargetStatus) []string {
	var out []string
	if was, is := old.GetSource(), cur.GetSource(); was != is {
		out = append(out, fmt.Sprintf("source %s -> %s", orDash(was), orDash(is)))
	}
	if old.GetQuarantined() != "" && cur.GetQuarantined() == "" {
		out = append(out, "out of quarantine")
	}
	return out
}

// policyText is a policy event's text; a vantage event without one says
// which vantage and its numbers.
func policyText(pe *pb.PolicyEvent) string {
	switch pe.GetKind() {
	case pb.PolicyEvent_KIND_OUTLIER_STARTED, pb.PolicyEvent_KIND_OUTLIER_ENDED:
		return outlierEventText(pe)
	}
	if t := pe.GetText(); t != "" {
		return t
	}
	who := fmt.Sprintf("vantage %s (replica %s)", pe.GetVantage(), pe.GetReplica())
	switch pe.GetKind() {
	case pb.PolicyEvent_KIND_VANTAGE_SUSPECT:
		return fmt.Sprintf("%s suspect: unhealthy from it for %d of %d targets the others see healthy; left out of every quorum", who, pe.GetDisagree(), pe.GetJudged())
	case pb.PolicyEvent_KIND_VANTAGE_RECOVERED:
		return fmt.Sprintf("%s recovered: disagrees on %d of %d targets", who, pe.GetDisagree(), pe.GetJudged())
	}
	return ""
}
