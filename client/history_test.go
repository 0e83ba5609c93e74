package client_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
	"github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

func TestHistory(t *testing.T) {
	rec := history.New(history.Options{})
	e := newEnv(t, 1, checker.Config{Observer: rec}, server.WithHistory(rec))
	c := e.client(t)
	ctx := within(t)
	if _, _, err := c.Add(ctx, tcpTarget("db-1", "data", "10.0.0.1:5432")); err != nil {
		t.Fatal(err)
	}
	e.set("10.0.0.1:5432", true)
	e.round(t)
	e.set("10.0.0.1:5432", false)
	e.round(t)
	// The checker tells the recorder of a result just after applying it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if s, err := rec.Query("db-1", time.Now(), time.Hour, time.Minute); err == nil && s.Probes == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("2 probes not recorded")
		}
	}

	h, err := c.History(ctx, client.HistoryQuery{Target: "db-1", Window: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if h.Target != "db-1" || h.Group != "data" || h.Resolution != time.Hour || len(h.Points) != 48 || h.Probes != 2 || h.Failures != 1 || h.Availability != 0.5 {
		t.Errorf("history = %+v; want db-1 of data, 48 hours, 2 probes, 1 failure, 0.5", h)
	}
	if len(h.Events) != 2 || h.Events[1].To != client.StateUnhealthy || h.Events[1].Result == nil || h.Events[1].Result.Error == "" || h.Events[1].Mode != client.ModeActive {
		t.Errorf("events = %+v; want up, then down with its error", h.Events)
	}
	g, err := c.History(ctx, client.HistoryQuery{Group: "data", Window: time.Hour, Resolution: time.Minute})
	if err != nil || g.Target != "" || g.Probes != 2 || len(g.Points) != 60 || g.SLO != nil {
		t.Errorf("group history = %+v, %v", g, err)
	}
	// A group's panic and its objective.
	rec.ObservePolicy(checker.EventPanicEntered, time.Now(), checker.PolicyChange{Group: "data", Text: "data: panic entered"})
	if _, err := c.SetGroupPolicy(ctx, "data", client.GroupPolicy{Objective: 0.9, ObjectiveWindow: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	g, err = c.History(ctx, client.HistoryQuery{Group: "data", Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Policies) != 1 || g.Policies[0].Kind != client.PolicyPanicEntered || g.Policies[0].Text != "data: panic entered" || len(g.Events) != 2 {
		t.Errorf("group history's policies %+v and events %+v; want the panic, and the 2 transitions", g.Policies, g.Events)
	}
	if g.TimeAvailability < 0 || g.TimeAvailability > 1 {
		t.Errorf("group time availability = %v, want a share", g.TimeAvailability)
	}
	if h.TimeAvailability != -1 {
		t.Errorf("a target's time availability = %v, want -1", h.TimeAvailability)
	}
	if s := g.SLO; s == nil || s.Objective != 0.9 || s.Window != 24*time.Hour || s.Availability != 0.5 || s.BudgetLeft > -3.99 || s.BudgetLeft < -4.01 || s.BurnRate < 4.99 || s.BurnRate > 5.01 {
		t.Errorf("group SLO = %+v; want 0.9 over 24h, availability 0.5, budget left -4, burn rate 5", g.SLO)
	}
	if _, err := c.History(ctx, client.HistoryQuery{Target: "nobody", Window: time.Hour}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown target: %v; want ErrNotFound", err)
	}
	if _, err := c.History(ctx, client.HistoryQuery{Target: "db-1", Window: time.Hour, Resolution: time.Second}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("resolution 1s: %v; want ErrInvalidArgument", err)
	}
}

// With replicas, History's NOT_FOUND for a target another replica probes
// keeps the ErrorInfo that says where that replica is reached.
func TestHistoryErrorKeepsItsDetails(t *testing.T) {
	info := &errdetails.ErrorInfo{Reason: client.ReasonProbedElsewhere, Domain: client.ErrorDomain,
		Metadata: map[string]string{"replica": "r2", "address": "127.0.0.2:50051"}}
	f := &fakePulse{history: func(*pb.HistoryRequest) (*pb.HistoryResponse, error) {
		st, err := status.New(codes.NotFound, `no history of target "web-1" here: replica r2 probes it; ask it at 127.0.0.2:50051`).WithDetails(info)
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}}
	c, err := client.New(t.Context(), []string{f.serve(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.History(t.Context(), client.HistoryQuery{Target: "web-1", Window: time.Hour})
	details := status.Convert(err).Details()
	if !errors.Is(err, client.ErrNotFound) || len(details) != 1 || !proto.Equal(details[0].(proto.Message), info) {
		t.Errorf("History: %v with details %v, want ErrNotFound with %v", err, details, info)
	}
}
