package server_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server"
)

// The stream property checker, after etcd's robustness watch validator:
// subscribers with different filters watch while targets are added,
// updated, moved between groups, removed and flipped at random, and they
// drop and resume their streams at random. Every stream must be
//
//   - Ordered: revisions strictly increase, across reconnects too;
//   - Unique: no event is applied twice (follows from Ordered);
//   - Resumable: a stream resumed from any revision it saw replays exactly
//     the events it saw after that revision;
//   - Complete: applying the events to the snapshot gives what ListTargets
//     shows at the same revision.
func TestStreamProperties(t *testing.T) {
	seed := propertySeed(t)
	// The run takes a second or two; a stream that never catches up (a
	// revision that stopped moving, an event never sent) fails at this
	// deadline instead of hanging until the test binary's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(60*time.Second))
	defer cancel()
	e := start(t, checker.Config{HistorySize: 400}, server.WithProgressInterval(5*time.Millisecond))

	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	groups := []string{"g1", "g2", "g3"}
	filters := []*pb.WatchTransitionsRequest{
		{},
		{},
		{Group: "g1"},
		{Group: "g2"},
		{Names: []string{"a", "c", "e"}},
		{Group: "g3", Names: []string{"b", "h"}},
	}

	churnDone := make(chan struct{})
	subs := make([]*propSub, len(filters))
	var wg sync.WaitGroup
	for i, f := range filters {
		subs[i] = &propSub{t: t, ctx: ctx, e: e, filter: f, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		wg.Go(func() { subs[i].run(churnDone) })
	}

	rng := rand.New(rand.NewPCG(seed, 99))
	churn := func() error {
		for range 1500 {
			name := names[rng.IntN(len(names))]
			switch op := rng.IntN(10); {
			case op < 3: // add or update: maybe a new group, maybe new thresholds
				tg := tcpTarget(name, groups[rng.IntN(len(groups))])
				tg.Rise = proto.Int32(int32(1 + rng.IntN(2)))
				tg.Interval = durationpb.New(time.Duration(1+rng.IntN(3)) * time.Second)
				if _, err := e.client.AddTarget(ctx, &pb.AddTargetRequest{Target: tg}); err != nil {
					return fmt.Errorf("AddTarget: %w", err)
				}
			case op < 4:
				if _, err := e.client.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: name}); err != nil {
					return fmt.Errorf("RemoveTarget: %w", err)
				}
			default:
				e.set(name+":80", rng.IntN(2) == 0)
				e.c.RunRound(ctx)
			}
		}
		return nil
	}
	err := churn()
	if err != nil {
		cancel() // the subscribers stop at once
	}
	close(churnDone)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	var resumes, resnaps, replays int
	for _, s := range subs {
		resumes += s.resumes
		resnaps += s.resnapshots
		replays += s.replays
	}
	t.Logf("%d resumes, %d snapshots, %d replay checks", resumes, resnaps, replays)
	if resumes == 0 || replays == 0 || resnaps == 0 {
		t.Errorf("the run did not exercise resuming (%d), snapshots under churn (%d) or replay checks (%d)", resumes, resnaps, replays)
	}
}

// propertySeed returns PULSE_PROPERTY_SEED when set, else a seed from the
// clock, and logs it: the same seed replays the same operations, filters'
// drops and replay checks (the goroutines' interleaving still varies).
func propertySeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("PULSE_PROPERTY_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("PULSE_PROPERTY_SEED=%q: want an unsigned integer", v)
		}
	}
	t.Logf("seed %d: replay with PULSE_PROPERTY_SEED=%d", seed, seed)
	return seed
}

// propSub is one subscriber of the property test.
type propSub struct {
	t      *testing.T
	ctx    context.Context // ends at the test's overall deadline
	e      *env
	filter *pb.WatchTransitionsRequest
	rng    *rand.Rand

	view map[string]*pb.TargetStatus
	last uint64     // revision of the last event applied (or snapshot)
	log  []logEntry // every event applied since the last snapshot

	resumes, resnapshots, replays int
}

type logEntry struct {
	rev  uint64
	desc string
}

func (s *propSub) matches(name, group string) bool {
	return (s.filter.GetGroup() == "" || s.filter.GetGroup() == group) &&
		(len(s.filter.GetNames()) == 0 || slices.Contains(s.filter.GetNames(), name))
}

func (s *propSub) fail(format string, args ...any) {
	s.t.Errorf("filter %v: %s", s.filter, fmt.Sprintf(format, args...))
}

// run follows the registry until the churn is over and the stream has
// caught up with the final revision, then checks completeness.
func (s *propSub) run(churnDone <-chan struct{}) {
	var finalRev uint64
	for {
		ctx, cancel := context.WithCancel(s.ctx)
		err := s.follow(ctx, churnDone, &finalRev)
		cancel()
		if err == nil {
			break
		}
		if s.t.Failed() {
			return
		}
		if s.ctx.Err() != nil {
			s.fail("at revision %d when the deadline passed, final revision %d (0: not known yet): the stream never caught up", s.last, finalRev)
			return
		}
	}
	list, err := s.e.client.ListTargets(s.ctx, &pb.ListTargetsRequest{Group: s.filter.GetGroup()})
	if err != nil {
		s.fail("ListTargets: %v", err)
		return
	}
	if list.GetRevision() != s.last {
		s.fail("caught up at %d, but ListTargets is at %d", s.last, list.GetRevision())
	}
	want := map[string]*pb.TargetStatus{}
	for _, st := range list.GetTargets() {
		if s.matches(st.GetSpec().GetName(), st.GetSpec().GetGroup()) {
			want[st.GetSpec().GetName()] = st
		}
	}
	// What changes with every result, without an event, is not the
	// stream's to carry: streaks, the last result, the verdict, the counts,
	// the schedule, and the weight (a function of the state and the time:
	// a client computes it from the transition's slow_start_end).
	if diff := cmp.Diff(want, s.view, protocmp.Transform(),
		protocmp.IgnoreFields(&pb.TargetStatus{}, "pass_streak", "fail_streak", "last_result", "last_transition_time", "routable",
			"verdict", "transitions_in_window", "probe_interval", "next_probe_time",
			"active_results", "passive_results", "passive_rate_limited", "ignored_timeouts", "weight", "slow_start_end", "unhealthy_since")); diff != "" {
		s.fail("view at %d differs from ListTargets (-want +got):\n%s", s.last, diff)
	}
}

// follow opens one stream (a snapshot when it has no view, else a resume),
// applies its events and drops it at random. It returns nil once the churn
// is over and the stream has reached the final revision.
func (s *propSub) follow(ctx context.Context, churnDone <-chan struct{}, finalRev *uint64) error {
	req := proto.Clone(s.filter).(*pb.WatchTransitionsRequest)
	if s.view != nil {
		req.StartRevision = s.last
		s.resumes++
	} else if s.last != 0 {
		s.resnapshots++
	}
	w, err := s.e.client.WatchTransitions(ctx, req)
	if err != nil {
		return err
	}
	snapshotting := req.StartRevision == 0
	var snap map[string]*pb.TargetStatus
	if snapshotting {
		snap = map[string]*pb.TargetStatus{}
	}
	for {
		ev, err := w.Recv()
		if code := status.Code(err); code == codes.OutOfRange || code == codes.ResourceExhausted {
			s.view = nil // too far behind: start again from a snapshot
			return err
		} else if err != nil {
			if ctx.Err() == nil {
				s.fail("stream: %v", err)
			}
			return err
		}
		rev := ev.GetRevision()
		switch e := ev.GetEvent().(type) {
		case *pb.WatchTransitionsResponse_Snapshot:
			if !snapshotting {
				s.fail("snapshot event on a resumed stream")
			}
			snap[e.Snapshot.GetSpec().GetName()] = e.Snapshot
			continue
		case *pb.WatchTransitionsResponse_SnapshotComplete:
			if !snapshotting || rev < s.last {
				s.fail("snapshot at %d after applying %d", rev, s.last)
			}
			s.view, s.last, s.log, snapshotting = snap, rev, nil, false
			continue
		case *pb.WatchTransitionsResponse_Progress:
			if rev < s.last {
				s.fail("progress at %d after applying %d", rev, s.last)
			}
			s.last = rev
		default:
			if snapshotting {
				s.fail("%s before the snapshot's end", describe(ev))
			}
			if rev <= s.last {
				s.fail("revision %d (%s) after %d: not ordered or not unique", rev, describe(ev), s.last)
			}
			s.apply(ev)
			s.last = rev
			s.log = append(s.log, logEntry{rev, describe(ev)})
		}
		if *finalRev == 0 {
			select {
			case <-churnDone:
				list, err := s.e.client.ListTargets(s.ctx, &pb.ListTargetsRequest{})
				if err != nil {
					s.fail("ListTargets: %v", err)
					return err
				}
				if list.GetRevision() == 0 {
					s.fail("ListTargets reports revision 0 after the churn")
					return errors.New("no final revision")
				}
				*finalRev = list.GetRevision()
			default:
			}
		}
		if *finalRev != 0 && s.last >= *finalRev {
			return nil
		}
		if s.rng.IntN(40) == 0 && len(s.log) > 0 {
			s.checkReplay()
		}
		if s.rng.IntN(60) == 0 {
			if s.rng.IntN(3) == 0 {
				s.view = nil // subscribe afresh: a snapshot in the middle of the churn
			}
			return fmt.Errorf("dropped on purpose")
		}
	}
}

func (s *propSub) apply(ev *pb.WatchTransitionsResponse) {
	switch e := ev.GetEvent().(type) {
	case *pb.WatchTransitionsResponse_Added:
		s.upsert(e.Added)
	case *pb.WatchTransitionsResponse_Updated:
		s.upsert(e.Updated)
	case *pb.WatchTransitionsResponse_Removed:
		if _, ok := s.view[e.Removed.GetName()]; !ok {
			s.fail("removal of %s, which the view lacks", e.Removed.GetName())
		}
		delete(s.view, e.Removed.GetName())
	case *pb.WatchTransitionsResponse_Transition:
		st, ok := s.view[e.Transition.GetTarget()]
		if !ok {
			s.fail("transition %q of a target the view lacks", e.Transition.GetText())
			return
		}
		if st.GetState() != e.Transition.GetFrom() {
			s.fail("transition %q from %v, but the view has %v", e.Transition.GetText(), e.Transition.GetFrom(), st.GetState())
		}
		st = proto.Clone(st).(*pb.TargetStatus)
		st.State = e.Transition.GetTo()
		s.view[e.Transition.GetTarget()] = st
	}
}

// upsert applies an added or updated target; one that no longer matches
// the filter (it moved to another group) leaves the view.
func (s *propSub) upsert(st *pb.TargetStatus) {
	name := st.GetSpec().GetName()
	if s.matches(name, st.GetSpec().GetGroup()) {
		s.view[name] = st
	} else {
		delete(s.view, name)
	}
}

// checkReplay resumes a second stream from a revision this one saw and
// checks it replays exactly the events seen since.
func (s *propSub) checkReplay() {
	from := s.log[s.rng.IntN(len(s.log))]
	var want []string
	for _, l := range s.log {
		if l.rev > from.rev {
			want = append(want, fmt.Sprintf("%d %s", l.rev, l.desc))
		}
	}
	if len(want) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	req := proto.Clone(s.filter).(*pb.WatchTransitionsRequest)
	req.StartRevision = from.rev
	w, err := s.e.client.WatchTransitions(ctx, req)
	if err != nil {
		s.fail("replay: %v", err)
		return
	}
	var got []string
	for len(got) < len(want) {
		ev, err := w.Recv()
		if status.Code(err) == codes.OutOfRange {
			return // the history moved on: nothing to compare
		}
		if err != nil {
			s.fail("replay from %d: %v", from.rev, err)
			return
		}
		if ev.GetProgress() != nil {
			continue
		}
		got = append(got, fmt.Sprintf("%d %s", ev.GetRevision(), describe(ev)))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		s.fail("replay from %d (-seen +replayed):\n%s", from.rev, diff)
	}
	s.replays++
}
