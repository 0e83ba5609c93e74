package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pulse "github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func waitCommand() *command {
	return &command{
		name:    "wait",
		args:    "NAME... --for healthy|unhealthy|routable|removed [--timeout D] [flags]",
		summary: "wait until targets are healthy, unhealthy, routable or removed",
		about: `
wait follows pulsed's watch from a snapshot and exits 0 as soon as every named
target is in the condition --for names: healthy, unhealthy, routable (it
receives traffic: healthy or suspect, active, or held by its group's panic),
or removed (gone, or never there). It exits at once when they already are,
printing one "NAME: CONDITION" line per target. While it waits, it says so on
stderr.

Past --timeout (30s; 0 checks once without waiting) it exits 6 and names the
targets not there yet, with their state. A named target that does not exist
(or is removed while waited for) is exit 3, unless --for removed. pulsed
unreachable is exit 4; a token or certificate it refuses is exit 7. A lost
connection is retried until the timeout, unless pulsed then refuses the token
or certificate (exit 7 at once).`,
		example: `
pulsectl wait web-1 --for healthy
pulsectl wait web-1 web-2 --for routable --timeout 2m
pulsectl rm --drain 30s web-1 && pulsectl wait web-1 --for removed --timeout 1m`,
		run: runWait,
	}
}

// waitConditions are what wait --for takes, and whether a status (nil:
// no such target) is in that condition.
var waitConditions = map[string]func(*pb.TargetStatus) bool{
	"healthy":   func(st *pb.TargetStatus) bool { return st != nil && st.GetState() == pb.State_STATE_HEALTHY },
	"unhealthy": func(st *pb.TargetStatus) bool { return st != nil && st.GetState() == pb.State_STATE_UNHEALTHY },
	"routable":  func(st *pb.TargetStatus) bool { return st != nil && st.GetRoutable() },
	"removed":   func(st *pb.TargetStatus) bool { return st == nil },
}

// maxWait bounds wait --timeout.
const maxWait = 24 * time.Hour

func runWait(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	cond := fs.String("for", "", "the `condition` to wait for: "+orList(slices.Sorted(maps.Keys(waitConditions)))+" (required)")
	timeout := zeroSecondsFlag(30 * time.Second)
	fs.Var(atMost(&timeout, maxWait), "timeout", "give up after this `duration` and exit 6 (0: check once; at most 24h)")
	names, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	holds := waitConditions[*cond]
	switch {
	case len(names) == 0:
		return c.usageError(e, "name the targets to wait for")
	case *cond == "":
		return c.usageError(e, "--for is required: %s", orList(slices.Sorted(maps.Keys(waitConditions))))
	case holds == nil:
		return c.usageError(e, "--for must be %s, got %q%s", orList(slices.Sorted(maps.Keys(waitConditions))), *cond,
			didYouMean(suggest.Closest(*cond, slices.Collect(maps.Keys(waitConditions)), nil)))
	case time.Duration(timeout) > maxWait:
		return c.usageError(e, "--timeout must be from 0 to %v, got %v", maxWait, time.Duration(timeout))
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	w := &waiter{e: e, cl: cl, cond: *cond, holds: holds, names: names, timeout: time.Duration(timeout)}
	return w.run(ctx)
}

// waiter follows a watch of its names until they are all in its
// condition.
type waiter struct {
	e       *env
	cl      *client
	cond    string
	holds   func(*pb.TargetStatus) bool
	names   []string
	timeout time.Duration

	statuses map[string]*pb.TargetStatus // by name; nil before the snapshot
}

func (w *waiter) run(ctx context.Context) int {
	wctx, cancel := context.WithTimeout(ctx, w.limit())
	defer cancel()
	events := w.cl.pc.Watch(wctx, pulse.Filter{Names: w.names}, pulse.WithMessages())
	connected := false
	for ev := range events {
		switch ev.Kind {
		case pulse.EventDisconnected:
			if status.Code(ev.Err) == codes.DeadlineExceeded {
				// The stream's only deadline is the wait's: pulsed saw
				// it pass first.
				return w.timedOut(ctx)
			}
			// A token or certificate pulsed refuses stays refused:
			// reconnecting until the timeout cannot help.
			if !connected || w.cl.refused(ev.Err) {
				cancel()
				return w.cl.fail(w.e, ev.Err, "")
			}
			continue
		case pulse.EventStopped:
			cancel()
			return w.cl.fail(w.e, ev.Err, "")
		case pulse.EventSnapshot:
			first := !connected
			connected = true
			w.statuses = map[string]*pb.TargetStatus{}
			for _, m := range ev.Messages() {
				if st := m.(*pb.WatchTransitionsResponse).GetSnapshot(); st != nil {
					w.statuses[st.GetSpec().GetName()] = proto.CloneOf(st) // the messages are shared
				}
			}
			if code, stop := w.missing(ev.Resnapshot); stop {
				return code
			}
			if first && w.timeout > 0 && !w.done() {
				fmt.Fprintf(w.e.stderr, "waiting up to %v for %s to be %s\n", w.timeout, strings.Join(escapeAll(w.names), ", "), w.cond)
			}
		case pulse.EventAdded, pulse.EventUpdated:
			for _, m := range ev.Messages() {
				r := m.(*pb.WatchTransitionsResponse)
				if st := r.GetAdded(); st != nil {
					w.statuses[st.GetSpec().GetName()] = proto.CloneOf(st) // the messages are shared
				}
				if st := r.GetUpdated(); st != nil {
					w.statuses[st.GetSpec().GetName()] = proto.CloneOf(st) // the messages are shared
				}
			}
		case pulse.EventRemoved:
			delete(w.statuses, ev.Name)
			if w.cond != "removed" {
				w.e.errorf("%s was removed while waiting for it to be %s", escape(ev.Name), w.cond)
				return exitNotFound
			}
		case pulse.EventTransition, pulse.EventMode:
			// A transition says the state; routability also depends on
			// the mode and the group's panic: read the status itself.
			name := ev.Transition.Target
			if ev.Kind == pulse.EventMode {
				name = ev.Mode.Target
			}
			for _, m := range ev.Messages() {
				w.apply(m.(*pb.WatchTransitionsResponse).GetTransition())
			}
			if code, stop := w.refresh(wctx, name); stop {
				return code
			}
		default:
			continue
		}
		if w.statuses != nil && w.done() {
			for _, n := range w.names {
				fmt.Fprintf(w.e.stdout, "%s: %s\n", escape(n), w.cond)
			}
			return exitOK
		}
		if w.timeout == 0 && connected {
			break
		}
	}
	return w.timedOut(ctx)
}

// limit bounds the whole wait. A timeout of 0 still reads the snapshot:
// the timeout bounds the waiting.
func (w *waiter) limit() time.Duration {
	if w.timeout == 0 {
		return callTimeout
	}
	return w.timeout
}

// missing reports the named targets that do not exist, unless waiting for
// them to be removed: exit 3.
func (w *waiter) missing(resnapshot bool) (int, bool) {
	if w.cond == "removed" {
		return 0, false
	}
	for _, n := range w.names {
		if w.statuses[n] == nil {
			if resnapshot {
				w.e.errorf("%s was removed while waiting for it to be %s", escape(n), w.cond)
			} else {
				w.e.errorf("no target named %q (pulsectl ls lists them)", n)
			}
			return exitNotFound, true
		}
	}
	return 0, false
}

// apply sets the state and mode a transition gives, in case refresh
// cannot read the status.
func (w *waiter) apply(tr *pb.Transition) {
	if st := w.statuses[tr.GetTarget()]; st != nil && tr != nil {
		st.State, st.Mode = tr.GetTo(), tr.GetMode()
	}
}

// refresh reads name's status after an event about it. When pulsed does
// not answer, the watch reconnects: the status stays as the event left it.
func (w *waiter) refresh(ctx context.Context, name string) (int, bool) {
	if !slices.Contains(w.names, name) || w.statuses == nil {
		return 0, false
	}
	cctx, cancel := w.cl.callCtx(ctx)
	defer cancel()
	resp, err := w.cl.State(cctx, &pb.StateRequest{Name: name})
	switch {
	case status.Code(err) == codes.NotFound:
		delete(w.statuses, name)
	case ctx.Err() != nil:
		return 0, false // the timeout: said by timedOut
	case status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded:
		return 0, false
	case err != nil:
		return w.cl.fail(w.e, err, name), true
	default:
		w.statuses[name] = resp.GetStatus()
	}
	return 0, false
}

// done reports whether every name is in the condition.
func (w *waiter) done() bool {
	for _, n := range w.names {
		if !w.holds(w.statuses[n]) {
			return false
		}
	}
	return true
}

// timedOut says which targets are not there yet, and returns exitTimeout.
func (w *waiter) timedOut(ctx context.Context) int {
	var late []string
	for _, n := range w.names {
		st := w.statuses[n]
		if w.holds(st) {
			continue
		}
		switch {
		case w.statuses == nil:
			late = append(late, escape(n))
		case st == nil:
			late = append(late, escape(n)+" (not there)")
		default:
			late = append(late, escape(n)+" ("+escape(stateText(st))+", "+modeName(st.GetMode())+routableText(st)+")")
		}
	}
	why := fmt.Sprintf("timed out after %v", w.timeout)
	if errors.Is(ctx.Err(), context.Canceled) {
		why = "interrupted"
	}
	w.e.errorf("%s waiting for %s to be %s: %s", why, plural(len(w.names), "the target"), w.cond, strings.Join(late, ", "))
	if w.statuses == nil && why != "interrupted" {
		// The watch neither failed nor sent its snapshot: a stalled pulsed
		// does that, and so does a listener that is no pulsed and never
		// answers; the watch cannot tell them apart.
		fmt.Fprintf(w.e.stderr, "no snapshot from %s within %v: nothing answered the watch there, or pulsed is stalled or overloaded.\n%s\nIf it is: %s\n",
			w.cl.addr, w.limit(), w.cl.unreachableHint(), stalledHint)
	}
	return exitTimeout
}

func escapeAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = escape(v)
	}
	return out
}

func routableText(st *pb.TargetStatus) string {
	if st.GetRoutable() {
		return ", routable"
	}
	return ", not routable"
}
