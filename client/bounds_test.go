package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
)

// wantField fails t unless err is ErrInvalidArgument about field.
func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ce *client.Error
	if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &ce) || !strings.HasPrefix(ce.Message, field+":") {
		t.Errorf("%s: %v; want INVALID_ARGUMENT about %s", what, err, field)
	}
}

// A number past int32 is refused, naming its field, by whichever call
// sends it: narrowed for the wire by wrapping, Fall 1<<32+3 was stored as
// 3, PassiveRate 1<<32 as 0 (the default) and a negative one as positive.
func TestNumbersPastInt32(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)

	httpProbe := func(tg *client.Target, h client.HTTPProbe) {
		h.URL = "http://127.0.0.1:1/healthz"
		tg.TCP, tg.HTTP = nil, &h
	}
	for _, tc := range []struct {
		field string
		set   func(*client.Target)
	}{
		{"target.rise", func(tg *client.Target) { tg.Rise = 1<<32 + 2 }},
		{"target.fall", func(tg *client.Target) { tg.Fall = 1<<32 + 3 }},
		{"target.fall", func(tg *client.Target) { tg.Fall = -(1 << 32) + 3 }},
		{"target.initial_state", func(tg *client.Target) { tg.InitialState = 1<<32 + client.StateHealthy }},
		{"target.model", func(tg *client.Target) { tg.Model = 1<<32 + client.ModelThreeState }},
		{"target.flap_threshold", func(tg *client.Target) { tg.FlapThreshold = 1<<32 + 4 }},
		{"target.passive_rate", func(tg *client.Target) { tg.PassiveOutcomes, tg.PassiveRate = true, 1<<32 }},
		{"target.vantages", func(tg *client.Target) { tg.Vantages = 1<<32 + 1 }},
		{"target.vantages", func(tg *client.Target) { tg.Vantages = -(1 << 32) + 1 }},
		{"target.quorum", func(tg *client.Target) { tg.Quorum = 1<<32 + 1 }},
		{"target.http.body_limit", func(tg *client.Target) { httpProbe(tg, client.HTTPProbe{BodyLimit: 1<<32 + 100}) }},
		{"target.http.expected_status", func(tg *client.Target) { httpProbe(tg, client.HTTPProbe{ExpectedStatus: []int{1<<32 + 200}}) }},
		{"target.tcp.steps[0].read_limit", func(tg *client.Target) {
			tg.TCP.Steps = []client.TCPStep{{Expect: "+PONG", ReadLimit: 1<<32 + 64}}
		}},
	} {
		tg := tcpTarget("web-1", "edge", "127.0.0.1:1")
		tc.set(&tg)
		_, _, err := c.Add(ctx, tg)
		wantField(t, "Add with "+tc.field+" past int32", err, tc.field)
	}
	if _, err := c.State(ctx, "web-1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a target was registered: %v", err)
	}

	bad := tcpTarget("web-2", "edge", "127.0.0.1:2")
	bad.Fall = 1<<32 + 3
	res, err := c.AddMany(ctx, []client.Target{tcpTarget("web-1", "edge", "127.0.0.1:1"), bad})
	if err != nil || len(res) != 2 {
		t.Fatalf("AddMany: %v, %v", res, err)
	}
	if res[0].Err != nil {
		t.Errorf("AddMany refused web-1: %v", res[0].Err)
	}
	wantField(t, "AddMany with fall past int32", res[1].Err, "targets[1].fall")

	upd := client.Target{Name: "web-1", Fall: 1<<32 + 3}
	_, _, err = c.Update(ctx, upd, "fall")
	wantField(t, "Update of fall past int32", err, "target.fall")
	if st, err := c.State(ctx, "web-1"); err != nil || st.Target.Fall == 3 {
		t.Errorf("web-1's fall after the refused update: %d, %v", st.Target.Fall, err)
	}

	_, err = c.SetGroupPolicy(ctx, "edge", client.GroupPolicy{Vantages: 1<<32 + 1})
	wantField(t, "SetGroupPolicy with vantages past int32", err, "policy.vantages")
	_, err = c.SetGroupPolicy(ctx, "edge", client.GroupPolicy{Quorum: -(1 << 32) + 1})
	wantField(t, "SetGroupPolicy with quorum past int32", err, "policy.quorum")
}

// A target with two probes is refused by Add, Update and AddMany before
// anything is sent, naming the probes; nothing changes. (Sent, the wire's
// oneof would have kept one of them without a word.)
func TestTwoProbesRefused(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	two := tcpTarget("two", "edge", "127.0.0.1:1")
	two.HTTP = &client.HTTPProbe{URL: "http://127.0.0.1:2/healthz"}
	_, _, err := c.Add(ctx, two)
	wantField(t, "Add", err, "target.probe")
	if err != nil && !strings.Contains(err.Error(), "got http and tcp") {
		t.Errorf("Add: %v; want the probes named", err)
	}
	if _, err := c.State(ctx, "two"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("after a refused Add: State = %v, want ErrNotFound", err)
	}
	one := tcpTarget("one", "edge", "127.0.0.1:1")
	if _, _, err := c.Add(ctx, one); err != nil {
		t.Fatal(err)
	}
	one.HTTP = &client.HTTPProbe{URL: "http://127.0.0.1:2/healthz"}
	_, _, err = c.Update(ctx, one, "http")
	wantField(t, "Update", err, "target.probe")
	if st, err := c.State(ctx, "one"); err != nil || st.Target.TCP == nil || st.Target.HTTP != nil {
		t.Errorf("after a refused Update: %+v, %v; want its TCP probe alone", st.Target, err)
	}
	res, err := c.AddMany(ctx, []client.Target{tcpTarget("a", "edge", "127.0.0.1:1"), two})
	wantField(t, "AddMany", err, "targets[1].probe")
	if res != nil {
		t.Errorf("AddMany refused: results %v, want none", res)
	}
	if _, err := c.State(ctx, "a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("after a refused AddMany: State(a) = %v, want ErrNotFound", err)
	}
}
