package etcdreg_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/checker/outlier"
	"github.com/pulsehealth/pulse/checker/probe"
)

// delays is how long each target takes to answer, set by the test.
type delays struct {
	mu sync.Mutex
	d  map[string]time.Duration
}

func (d *delays) set(name string, v time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.d[name] = v
}

type delayProber struct {
	d    *delays
	name string
}

func (p delayProber) Probe(ctx context.Context) error {
	p.d.mu.Lock()
	wait := p.d.d[p.name]
	p.d.mu.Unlock()
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func startDelayed(t *testing.T, endpoint, id string, d *delays) *replica {
	t.Helper()
	reg, err := etcdreg.Open(context.Background(), etcdreg.Options{Endpoints: []string{endpoint}, Prefix: prefix, ID: id, LeaseTTL: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := checker.New(checker.Config{
		Shared:   reg,
		Logger:   testLogger(t),
		Defaults: checker.Defaults{Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 1, Fall: 1},
		NewProber: func(s probe.Spec) (checker.Prober, error) {
			return delayProber{d: d, name: s.HTTP.URL[strings.LastIndex(s.HTTP.URL, "/")+1:]}, nil
		},
	})
	if err != nil {
		reg.Close()
		t.Fatal(err)
	}
	reg.Run(c)
	c.Start()
	r := &replica{id: id, reg: reg, c: c}
	t.Cleanup(r.stop)
	return r
}

// A group's slow member, its targets owned by three replicas: the judge
// finds it from every owner's samples, and every replica shows the same
// outlier and streams the same OUTLIER_STARTED at the same revision;
// enforced, it is ejected everywhere, its transition written by its owner.
func TestOutliersAcrossReplicas(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	d := &delays{d: map[string]time.Duration{"m5": 60 * time.Millisecond}}
	var rs []*replica
	for i := range 3 {
		rs = append(rs, startDelayed(t, etcd.Endpoint, fmt.Sprintf("r%d", i+1), d))
	}
	eventually(t, "every replica sees every member", func() bool {
		for _, r := range rs {
			if len(r.reg.Members()) != 3 {
				return false
			}
		}
		return true
	})
	policy := checker.GroupPolicy{MaxUnhealthyFraction: 1, Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 1, Samples: 3, Interval: time.Second, BaseEjectionTime: time.Hour}}
	if _, err := rs[0].c.SetGroupPolicy("edge", policy); err != nil {
		t.Fatal(err)
	}
	var ws []*checker.Watcher
	for _, r := range rs {
		w, err := r.c.Watch(checker.Filter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	owners := map[string]bool{}
	for i := range 6 {
		s := target(fmt.Sprintf("m%d", i))
		s.Group, s.InitialState = "edge", checker.StateHealthy
		if _, _, err := rs[i%3].c.Add(s); err != nil {
			t.Fatal(err)
		}
		owners[rs[0].reg.Owner(s.Name)] = true
	}
	if len(owners) < 2 {
		t.Logf("the six targets have %d owners", len(owners))
	}
	var started []string
	for i, w := range ws {
		evs := drain(t, w, func(evs []checker.Event) bool {
			for _, e := range evs {
				if e.Kind == checker.EventOutlierStarted {
					return true
				}
			}
			return false
		})
		for _, e := range evs {
			if e.Kind == checker.EventOutlierStarted {
				started = append(started, fmt.Sprintf("%d %s", e.Revision, e.Policy.Text))
				if e.Policy.Target != "m5" || !strings.HasPrefix(e.Policy.Text, "m5: outlier, degraded (routable at 10%): p50 6") {
					t.Errorf("%s: %s; want m5 degraded", rs[i].id, e.Policy.Text)
				}
			}
		}
	}
	for _, s := range started[1:] {
		if s != started[0] {
			t.Errorf("replicas disagree: %q", started)
		}
	}
	for _, r := range rs {
		st, _ := r.c.Status("m5")
		if st.Outlier == nil || st.Weight != outlier.Weight || !st.Routable {
			t.Errorf("%s: m5 outlier %+v, weight %d", r.id, st.Outlier, st.Weight)
		}
	}

	// Enforced: ejected, its owner writes the transition.
	policy.Outlier.Enforce = true
	if _, err := rs[1].c.SetGroupPolicy("edge", policy); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		eventually(t, r.id+" sees m5 ejected", func() bool {
			st, _ := r.c.Status("m5")
			return st.Outlier != nil && st.Outlier.Ejected && st.State == checker.StateUnhealthy
		})
	}
	var downs []string
	for _, w := range ws {
		evs := drain(t, w, func(evs []checker.Event) bool { return len(transitions(evs, "m5")) > 0 })
		for _, e := range evs {
			if e.Kind == checker.EventTransition && e.Transition.Target == "m5" {
				downs = append(downs, fmt.Sprintf("%d %s (%s)", e.Revision, e.Transition, e.Transition.Reason))
			}
		}
	}
	for _, s := range downs[1:] {
		if s != downs[0] {
			t.Errorf("replicas disagree on m5's ejection: %q", downs)
		}
	}
	if !strings.Contains(downs[0], "m5: healthy -> unhealthy (outlier ejected: p50 6") {
		t.Errorf("m5's transition: %q", downs[0])
	}
}
