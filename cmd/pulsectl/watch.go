package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

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
  2026-11-30T10:19:30Z web-2: updated (tcp 10.0.0.6:80)
  2026-11-30T10:20:11Z web-2: removed

A transition shows the time pulsed applied it; added, updated and removed
lines show when pulsectl received them. By default watch starts from pulsed's
current view (the snapshot is not printed; --snapshot prints it, one line per
target). --since REV resumes after revision REV instead: take it from a
previous watch -o json, or from pulsectl ls -o json's "revision". When the
stream breaks, the error names the revision to resume from.`,
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

func runWatch(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	group := fs.String("group", "", "watch only this `group`'s targets")
	var names namesFlag
	fs.Var(&names, "name", "watch only this target `name`; repeatable")
	since := fs.Uint64("since", 0, "resume after this `revision` instead of starting from the current view")
	snapshot := fs.Bool("snapshot", false, "first print every current target's state")
	out := addOutputFlag(fs, "every event, progress included, as one JSON object per line")
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
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cl.WatchTransitions(ctx, &pb.WatchTransitionsRequest{Group: *group, Names: names, StartRevision: *since})
	if err != nil {
		return watchEnded(ctx, e, cl, err, *since)
	}
	// Headers arrive once the watch is registered. A stream that failed
	// has none (nil, and Recv says why).
	if md, _ := stream.Header(); md != nil {
		fmt.Fprintf(e.stderr, "watching pulsed at %s (Ctrl-C to stop)\n", cl.addr)
	}
	w := &watchPrinter{w: e.stdout, json: out.json(), snapshot: *snapshot, now: time.Now}
	last := *since
	for {
		ev, err := stream.Recv()
		if err != nil {
			return watchEnded(ctx, e, cl, err, last)
		}
		last = max(last, ev.GetRevision())
		if err := w.print(ev); err != nil {
			e.errorf("writing: %v", err)
			return exitServer
		}
	}
}

// watchEnded reports why a watch stream ended and returns the exit code.
// last is the last revision received, to resume from.
func watchEnded(ctx context.Context, e *env, cl *client, err error, last uint64) int {
	if ctx.Err() != nil {
		return exitOK // interrupted: the normal way to stop
	}
	resume := ""
	if last > 0 {
		resume = fmt.Sprintf("; resume with pulsectl watch --since %d", last)
	}
	st := status.Convert(err)
	switch {
	case errors.Is(err, io.EOF):
		e.errorf("pulsed at %s ended the watch%s", cl.addr, resume)
		return exitServer
	case st.Code() == codes.OutOfRange:
		e.errorf("%s\nThe revision is too old to resume from: watch without --since to start from the current view.", st.Message())
		return exitUsage
	case st.Code() == codes.FailedPrecondition:
		e.errorf("%s\nThe revision is not this pulsed's (it restarted, or it is another one): watch without --since.", st.Message())
		return exitUsage
	case st.Code() == codes.ResourceExhausted:
		e.errorf("the watch fell behind: %s%s", st.Message(), resume)
		return exitServer
	case st.Code() == codes.Unavailable && last > 0:
		e.errorf("lost pulsed at %s: %s%s", cl.addr, st.Message(), resume)
		return exitServer
	}
	return cl.fail(e, err, "")
}

// watchPrinter prints watch events as lines of text or JSON.
type watchPrinter struct {
	w        io.Writer
	json     bool
	snapshot bool
	now      func() time.Time
}

// print writes one event; progress and (without --snapshot) snapshot
// events print nothing in text.
func (p *watchPrinter) print(ev *pb.WatchTransitionsResponse) error {
	if p.json {
		b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	}
	line := p.line(ev)
	if line == "" {
		return nil
	}
	_, err := fmt.Fprintln(p.w, line)
	return err
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
		return at + " " + text
	case *pb.WatchTransitionsResponse_Added:
		return fmt.Sprintf("%s %s: added (%s, %s)", now, x.Added.GetSpec().GetName(), probeSummary(x.Added.GetSpec()), stateName(x.Added.GetState()))
	case *pb.WatchTransitionsResponse_Updated:
		return fmt.Sprintf("%s %s: updated (%s)", now, x.Updated.GetSpec().GetName(), probeSummary(x.Updated.GetSpec()))
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
