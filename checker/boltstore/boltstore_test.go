package boltstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/probe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	web := checker.Spec{
		Name: "web-1", Group: "edge",
		Probe:    probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.1:8080/healthz", Method: "HEAD", ExpectedStatus: []int{200, 204}, Headers: map[string]string{"Host": "example"}}},
		Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3,
		InitialState: checker.StateHealthy, Model: checker.ModelThreeState, MaxLatency: 500 * time.Millisecond,
	}
	db := checker.Spec{Name: "db-1", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:5432"}}, Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	gone := checker.Spec{Name: "gone", Probe: probe.Spec{GRPC: &probe.GRPCSpec{Address: "127.0.0.1:9", Service: "x", TLS: true}}}
	for _, sp := range []checker.Spec{web, db, gone} {
		if err := s.PutSpec(sp); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	// web-1's flap log and hold are stored with its state: a restart keeps
	// a flapping target damped and a held one held.
	flap := &checker.FlapRecord{Verdict: checker.StateUnhealthy, Changes: []time.Time{at.Add(-time.Second), at}, Flapping: true, Time: at}
	if err := s.CommitStates([]checker.StoredState{{Name: "web-1", State: checker.StateSuspect, LastTransition: at, Flap: flap, Held: true}, {Name: "gone", State: checker.StateHealthy}, {Name: "never-added", State: checker.StateHealthy}}, nil, 41); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTarget("gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStates(nil, []string{"gone"}, 42); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	got, rev, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := []checker.StoredTarget{
		{Spec: db},
		{Spec: web, State: checker.StateSuspect, LastTransition: at, Flap: flap, Held: true},
	}
	if diff := cmp.Diff(want, got); diff != "" || rev != 42 {
		t.Errorf("Load: revision %d (-want +got):\n%s", rev, diff)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	_, err := boltstore.Open(dir, 50*time.Millisecond)
	if !errors.Is(err, boltstore.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	t.Log(err)
}

func TestEmptyStore(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	got, rev, err := s.Load()
	if err != nil || len(got) != 0 || rev != 0 {
		t.Errorf("Load of a new store: %v %d %v", got, rev, err)
	}
}

func TestBackupWhileOpen(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	spec := checker.Spec{Name: "a", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:1"}}}
	if err := s.PutSpec(spec); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStates([]checker.StoredState{{Name: "a", State: checker.StateHealthy}}, nil, 7); err != nil {
		t.Fatal(err)
	}
	backupDir := t.TempDir()
	f, err := os.Create(filepath.Join(backupDir, boltstore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Backup(f); err != nil || n == 0 {
		t.Fatalf("Backup: %d bytes, %v", n, err)
	}
	f.Close()
	b := open(t, backupDir)
	defer b.Close()
	got, rev, err := b.Load()
	if err != nil || rev != 7 || len(got) != 1 || got[0].State != checker.StateHealthy || !cmp.Equal(got[0].Spec, spec) {
		t.Errorf("the backup holds %+v at %d (%v)", got, rev, err)
	}
}

// Group policies are stored with the registry: a checker on the same data
// dir after a restart has them, and clearing one deletes it. Specs keep
// their policy fields.
func TestGroupPoliciesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	newChecker := func(s *boltstore.Store) *checker.Checker {
		c, err := checker.New(checker.Config{Store: s, MaxUnhealthyFraction: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := open(t, dir)
	c := newChecker(s)
	web := checker.Spec{Name: "web-1", Group: "edge", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}},
		FastInterval: time.Second, DownInterval: 5 * time.Second, FlapThreshold: 4, FlapWindow: time.Minute, PassiveOutcomes: true, PassiveRate: 3}
	if _, _, err := c.Add(web); err != nil {
		t.Fatal(err)
	}
	for group, f := range map[string]float64{"edge": 0.25, "empty": 1, "gone": 0.75} {
		if _, err := c.SetGroupPolicy(group, checker.GroupPolicy{MaxUnhealthyFraction: f}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SetGroupPolicy("gone", checker.GroupPolicy{}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.Close()

	s = open(t, dir)
	defer s.Close()
	c = newChecker(s)
	defer c.Close()
	got := map[string]float64{}
	for _, g := range c.Groups("") {
		got[g.Group] = g.MaxUnhealthyFraction
	}
	if diff := cmp.Diff(map[string]float64{"edge": 0.25, "empty": 1}, got); diff != "" {
		t.Errorf("group policies after a restart (-want +got):\n%s", diff)
	}
	st, err := c.Status("web-1")
	if err != nil {
		t.Fatal(err)
	}
	if sp := st.Spec; sp.FastInterval != time.Second || sp.DownInterval != 5*time.Second || sp.FlapThreshold != 4 || !sp.PassiveOutcomes || sp.PassiveRate != 3 {
		t.Errorf("stored spec lost its policy fields: %+v", sp)
	}
}

// An update of an existing target and a changed group policy are as
// durable as a new target: after a restart on the same data dir the last
// acknowledged spec and policy are the ones in force.
func TestUpdatesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	newChecker := func(s *boltstore.Store) *checker.Checker {
		c, err := checker.New(checker.Config{Store: s, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := open(t, dir)
	c := newChecker(s)
	first := checker.Spec{Name: "web-1", Group: "edge", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}}
	if _, created, err := c.Add(first); err != nil || !created {
		t.Fatalf("Add: created %v, %v", created, err)
	}
	updated := first
	updated.Group = "core"
	updated.Probe = probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:10"}}
	updated.Interval, updated.Rise, updated.Fall = 3*time.Second, 2, 4
	if _, created, err := c.Add(updated); err != nil || created {
		t.Fatalf("update: created %v, %v", created, err)
	}
	want, err := c.Status("web-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []float64{0.25, 0.5} { // a policy set, then changed
		if _, err := c.SetGroupPolicy("core", checker.GroupPolicy{MaxUnhealthyFraction: f}); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	s.Close()

	s = open(t, dir)
	defer s.Close()
	c = newChecker(s)
	defer c.Close()
	got, err := c.Status("web-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
		t.Errorf("spec after an update and a restart (-updated +got):\n%s", diff)
	}
	groups := map[string]float64{}
	for _, g := range c.Groups("") {
		groups[g.Group] = g.MaxUnhealthyFraction
	}
	if groups["core"] != 0.5 {
		t.Errorf("group core's policy after a restart: %v, want the last one set, 0.5", groups)
	}
}

// DeleteTarget removes the state with the spec, at once: a target added
// again under the same name, before any commit, starts without the old
// state (it must not come back after a crash and a restart).
func TestDeleteTargetDropsTheState(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	spec := checker.Spec{Name: "a", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:1"}}}
	if err := s.PutSpec(spec); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStates([]checker.StoredState{{Name: "a", State: checker.StateHealthy, LastTransition: time.Unix(100, 0)}}, nil, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTarget("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSpec(spec); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]checker.StoredTarget{{Spec: spec}}, got); diff != "" {
		t.Errorf("Load after delete and re-add (-want +got):\n%s", diff)
	}
}

// A spec with a lifecycle (a mode, a slow start, an automatic removal) is
// stored and loaded whole, beside one without, whose record keeps the
// version an older pulsed reads; PutSpecs stores both at once.
func TestLifecycleRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	drained := checker.Spec{Name: "web-1", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:80"}},
		Lifecycle: &checker.Lifecycle{SlowStart: 30 * time.Second, RemoveAfterUnhealthy: time.Hour,
			Admin: checker.Admin{Mode: checker.ModeDraining, Reason: "deploy 4711", Since: at, Until: at.Add(time.Hour), RemoveAt: at.Add(time.Minute)}}}
	plain := checker.Spec{Name: "web-2", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:81"}}}
	if err := s.PutSpecs([]checker.Spec{drained, plain}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutGroupPolicy("edge", checker.GroupPolicy{SlowStart: time.Minute, RemoveAfterUnhealthy: 2 * time.Hour, Objective: 0.995, ObjectiveWindow: 168 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]checker.StoredTarget{{Spec: drained}, {Spec: plain}}, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	pols, err := s.LoadGroupPolicies()
	if err != nil || pols["edge"] != (checker.GroupPolicy{SlowStart: time.Minute, RemoveAfterUnhealthy: 2 * time.Hour, Objective: 0.995, ObjectiveWindow: 168 * time.Hour}) {
		t.Errorf("policies %+v, %v", pols, err)
	}
}

// PutSpecs and CommitStates write their records in key order whatever
// order they are given in; a name given twice in one batch keeps the
// last one given, as writing them one by one would.
func TestBatchesInAnyOrder(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	spec := func(name string, port int) checker.Spec {
		return checker.Spec{Name: name, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: fmt.Sprintf("127.0.0.1:%d", port)}}}
	}
	batch := []checker.Spec{spec("c", 1), spec("b", 2), spec("c", 3), spec("a", 4), spec("b", 5)}
	if err := s.PutSpecs(batch); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	states := []checker.StoredState{{Name: "b", State: checker.StateHealthy, LastTransition: at},
		{Name: "a", State: checker.StateUnhealthy, LastTransition: at}, {Name: "c", State: checker.StateHealthy, LastTransition: at}}
	given := slices.Clone(states)
	if err := s.CommitStates(states, nil, 9); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(states, given) {
		t.Errorf("CommitStates reordered its caller's slice: %v", states)
	}
	got, rev, err := s.Load()
	if err != nil || rev != 9 {
		t.Fatalf("Load: rev %d, %v", rev, err)
	}
	want := []checker.StoredTarget{
		{Spec: spec("a", 4), State: checker.StateUnhealthy, LastTransition: at},
		{Spec: spec("b", 5), State: checker.StateHealthy, LastTransition: at},
		{Spec: spec("c", 3), State: checker.StateHealthy, LastTransition: at},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}
