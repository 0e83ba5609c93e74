package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
	pulse "github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// HistorySource answers the History call and the badges; a
// *history.Recorder is one. Its methods must be safe for concurrent use.
type HistorySource interface {
	Query(name string, now time.Time, window, resolution time.Duration) (history.Summary, error)
	QueryGroup(group string, now time.Time, window, resolution time.Duration) (history.Summary, error)
}

// Directory says where clients reach a replica: Addresses returns the gRPC
// address and the status page's URL the live replica id gives, empty for
// what it does not give. A *etcdreg.Registry is one. Its methods must be
// safe for concurrent use.
type Directory interface {
	Addresses(id string) (api, page string)
}

// WithDirectory sets where History finds the address of the replica that
// keeps a target's history, to name it to the client. Without it, History
// names the replica only.
func WithDirectory(d Directory) Option {
	return func(s *Server) { s.directory = d }
}

// WithHistory sets what the History call reads. Without it, History
// answers UNIMPLEMENTED.
func WithHistory(h HistorySource) Option {
	return func(s *Server) { s.history = h }
}

// History returns a target's or a group's recorded history.
func (s *Server) History(ctx context.Context, req *pb.HistoryRequest) (*pb.HistoryResponse, error) {
	if s.history == nil {
		return nil, status.Error(codes.Unimplemented, "this pulsed keeps no history")
	}
	window, res, err := historyRange(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	now := time.Now()
	var sum history.Summary
	if req.GetTarget() != "" {
		sum, err = s.targetHistory(req.GetTarget(), now, window, res)
	} else {
		sum, err = s.history.QueryGroup(req.GetGroup(), now, window, res)
	}
	var split groupSplit
	if req.GetGroup() != "" {
		split = s.splitGroup(req.GetGroup())
	}
	if err != nil {
		if errors.Is(err, history.ErrUnknownGroup) && split.elsewhere > 0 {
			who := "replica " + split.replicas[0] + " probes its targets and keeps their history; ask it"
			if len(split.replicas) > 1 {
				who = "replicas " + strings.Join(split.replicas, ", ") + " probe its targets and keep their history; ask them"
			}
			return nil, status.Errorf(codes.NotFound, "no history of group %s here: %s", Quote(req.GetGroup()), who)
		}
		return nil, s.historyStatus(err, req, peerHost(ctx))
	}
	out := HistoryToProto(sum, res)
	if split.elsewhere > 0 {
		out.TargetsElsewhere, out.GroupTargets, out.ReplicasElsewhere = uint32(split.elsewhere), uint32(split.total), split.replicas
	}
	if sum.TimeAvailability >= 0 {
		out.TimeAvailability = &sum.TimeAvailability
	}
	if req.GetGroup() != "" {
		if out.Slo, err = s.groupSLO(req.GetGroup(), now); err != nil {
			return nil, s.historyStatus(err, req, peerHost(ctx))
		}
	}
	return out, nil
}

// targetHistory returns what this pulsed recorded of the named target. A
// target registered but not probed yet has an empty history. With
// replicas, one that another replica probes, of which this one recorded
// no probe in the window (what it keeps then is the transitions every
// replica sees), is a *probedElsewhere naming that replica: the history
// is there. The checker is asked only when the history has no probe.
func (s *Server) targetHistory(name string, now time.Time, window, res time.Duration) (history.Summary, error) {
	sum, err := s.history.Query(name, now, window, res)
	switch {
	case err != nil && !errors.Is(err, history.ErrUnknownTarget):
		return sum, err
	case err == nil && sum.Probes > 0:
		return sum, nil
	}
	st, serr := s.c.Status(name)
	if serr != nil {
		return sum, err // unknown here and to the checker: no such target
	}
	if self, _ := s.c.Replica(); !st.ProbedBy(self) {
		return sum, &probedElsewhere{owner: st.Owner}
	}
	if err != nil { // registered, not probed yet
		return history.Empty(name, st.Spec.Group, now, window, res), nil
	}
	return sum, nil
}

// groupSplit is how a group's targets divide between this replica and the
// others, which keep the history of those they probe.
type groupSplit struct {
	total, elsewhere int
	replicas         []string // that probe the targets elsewhere, sorted
}

// splitGroup returns how group's targets divide between this replica and
// the others; without replicas, none is elsewhere.
func (s *Server) splitGroup(group string) groupSplit {
	self, _ := s.c.Replica()
	if self == "" {
		return groupSplit{}
	}
	list, _ := s.c.ListNow(group)
	split := groupSplit{total: len(list)}
	for i := range list {
		if !list[i].ProbedBy(self) {
			split.elsewhere++
			if !slices.Contains(split.replicas, list[i].Owner) {
				split.replicas = append(split.replicas, list[i].Owner)
			}
		}
	}
	slices.Sort(split.replicas)
	return split
}

// probedElsewhere is History's answer, on a replica, for a target another
// replica probes.
type probedElsewhere struct{ owner string }

func (e *probedElsewhere) Error() string { return "replica " + e.owner + " probes it" }

// groupSLO returns where group stands against its availability objective,
// nil when it has none.
func (s *Server) groupSLO(group string, now time.Time) (*pb.GroupSLO, error) {
	gs := s.c.Groups(group)
	if len(gs) != 1 || gs[0].Policy.Objective == 0 {
		return nil, nil
	}
	slo, err := history.GroupSLO(s.history, group, gs[0].Policy.Objective, gs[0].Policy.ObjectiveWindow, now)
	if err != nil {
		return nil, err
	}
	return SLOToProto(slo), nil
}

// SLOToProto converts a group's SLO measure for the API.
func SLOToProto(s history.SLO) *pb.GroupSLO {
	out := &pb.GroupSLO{Objective: s.Objective, Window: durationpb.New(s.Window)}
	if s.Availability >= 0 {
		out.Availability = &s.Availability
		out.ErrorBudgetRemaining = &s.BudgetLeft
	}
	if s.BurnRate >= 0 {
		out.BurnRate = &s.BurnRate
	}
	return out
}

// historyRange checks a History request and returns its window and
// resolution; its error names the field and the bound.
func historyRange(req *pb.HistoryRequest) (window, res time.Duration, err error) {
	switch {
	case req.GetTarget() != "" && req.GetGroup() != "":
		return 0, 0, errors.New("target: set exactly one of target and group, not both")
	case req.GetTarget() == "" && req.GetGroup() == "":
		return 0, 0, errors.New("target: set exactly one of target and group")
	case req.GetTarget() != "":
		err = field("target", checker.ValidateName(req.GetTarget()))
	default:
		err = field("group", checker.ValidateGroup(req.GetGroup()))
	}
	if err != nil {
		return 0, 0, err
	}
	w := req.GetWindow()
	if w == nil {
		return 0, 0, errors.New("window: must be set: whole minutes up to 24h, or whole hours up to 720h (30 days)")
	}
	if err := w.CheckValid(); err != nil {
		return 0, 0, fmt.Errorf("window: %w", err)
	}
	window = w.AsDuration()
	res = time.Minute
	if window > history.MinuteSlots*time.Minute {
		res = time.Hour
	}
	if r := req.GetResolution(); r != nil {
		if err := r.CheckValid(); err != nil {
			return 0, 0, fmt.Errorf("resolution: %w", err)
		}
		res = r.AsDuration()
	}
	if err := history.CheckRange(window, res); err != nil {
		var re *history.RangeError
		if errors.As(err, &re) && re.Field == "window" {
			return 0, 0, fmt.Errorf("%w, got %v", err, window)
		}
		return 0, 0, fmt.Errorf("%w, got %v", err, res)
	}
	return window, res, nil
}

// historyStatus is History's error for err, to a client at peer.
func (s *Server) historyStatus(err error, req *pb.HistoryRequest, peer string) error {
	var elsewhere *probedElsewhere
	switch {
	case errors.As(err, &elsewhere):
		return s.probedElsewhereStatus(req.GetTarget(), elsewhere.owner, peer)
	case errors.Is(err, history.ErrUnknownTarget):
		return status.Errorf(codes.NotFound, "no history of target %s here: no such target", Quote(req.GetTarget()))
	case errors.Is(err, history.ErrUnknownGroup):
		return status.Errorf(codes.NotFound, "no history of group %s here: none of its targets was probed by this pulsed", Quote(req.GetGroup()))
	}
	var re *history.RangeError
	if errors.As(err, &re) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Errorf(codes.Unavailable, "reading the history: %v; retry", err)
}

// probedElsewhereStatus is History's NOT_FOUND, to a client at peer, for a
// target replica owner probes: its message names the replica and its
// address, and an ErrorInfo (client.ReasonProbedElsewhere) gives them to a
// client that follows it.
func (s *Server) probedElsewhereStatus(target, owner, peer string) error {
	api, page := AddressesFor(s.directory, owner, peer)
	where := ""
	if api != "" {
		where = " at " + api
	}
	st := status.Newf(codes.NotFound, "no history of target %s here: replica %s probes it; ask it%s", Quote(target), owner, where)
	md := map[string]string{"replica": owner}
	if api != "" {
		md["address"] = api
	}
	if page != "" {
		md["page"] = page
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: pulse.ReasonProbedElsewhere, Domain: pulse.ErrorDomain, Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

// AddressesFor returns where replica id says its clients reach it, as d
// gives them, for a client at peer: what ReachableFrom refuses is left
// out, and both are empty without a directory.
func AddressesFor(d Directory, id, peer string) (api, page string) {
	if d == nil {
		return "", ""
	}
	api, page = d.Addresses(id)
	if !ReachableFrom(api, peer) {
		api = ""
	}
	if !ReachableFrom(page, peer) {
		page = ""
	}
	return api, page
}

// ReachableFrom reports whether a replica's address, host:port or a URL,
// is one to give a client at peer (an IP address): a loopback address
// names the client's own machine unless the client is on loopback too, as
// with replicas tried on one machine.
func ReachableFrom(addr, peer string) bool {
	if addr == "" {
		return false
	}
	host := addr
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		host = u.Hostname()
	} else if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	return !isLoopback(host) || isLoopback(peer)
}

// isLoopback reports whether host, an IP address or a name, is loopback.
func isLoopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return host == "localhost"
}

// HistoryToProto returns the wire form of a history at a resolution.
func HistoryToProto(sum history.Summary, res time.Duration) *pb.HistoryResponse {
	out := &pb.HistoryResponse{
		Target:      sum.Target,
		Group:       sum.Group,
		Resolution:  durationpb.New(res),
		Probes:      sum.Probes,
		Failures:    sum.Fails,
		LatencyP50:  optDuration(sum.P50),
		LatencyP95:  optDuration(sum.P95),
		LatencyP99:  optDuration(sum.P99),
		LatencyMean: optDuration(sum.Mean),
		Points:      make([]*pb.HistoryPoint, len(sum.Points)),
		Events:      make([]*pb.HistoryEvent, len(sum.Events)),
	}
	if sum.Availability >= 0 {
		out.Availability = &sum.Availability
	}
	for i, p := range sum.Points {
		out.Points[i] = &pb.HistoryPoint{Start: timestamppb.New(p.Start), Probes: p.Probes, Failures: p.Fails,
			LatencyP50: optDuration(p.P50), LatencyP95: optDuration(p.P95), LatencyP99: optDuration(p.P99)}
	}
	for i, e := range sum.Events {
		if e.Policy != 0 {
			out.Events[i] = &pb.HistoryEvent{Time: timestamppb.New(e.Time), Target: e.Target, Kind: e.Policy.String(), Text: e.Text}
			if e.Policy == checker.EventModeChanged {
				out.Events[i].Mode = ModeToProto(e.Mode)
			}
			continue
		}
		out.Events[i] = &pb.HistoryEvent{Time: timestamppb.New(e.Time), Target: e.Target, From: stateToProto(e.From),
			To: stateToProto(e.To), Reason: e.Reason, Error: e.Err, Mode: ModeToProto(e.Mode)}
	}
	return out
}

func optDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}
