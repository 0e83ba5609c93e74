package checker_test

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

// replay feeds results ("T" pass, "F" failure) to m and returns the state
// after each one.
func replay(m *checker.Machine, results string) []checker.State {
	var out []checker.State
	for _, r := range strings.Fields(results) {
		m.Observe(r == "T")
		out = append(out, m.State)
	}
	return out
}

const (
	H = checker.StateHealthy
	U = checker.StateUnhealthy
	S = checker.StateSuspect
)

// inPool renders states as an in-pool trace: YES when routable, NO when not.
func inPool(states []checker.State) string {
	var b strings.Builder
	for i, s := range states {
		if i > 0 {
			b.WriteByte(' ')
		}
		if (checker.Machine{State: s}).Routable() {
			b.WriteString("YES")
		} else {
			b.WriteString("NO")
		}
	}
	return b.String()
}

func changes(states []checker.State, initial checker.State) int {
	n := 0
	prev := initial
	for _, s := range states {
		if s != prev {
			n++
		}
		prev = s
	}
	return n
}

func TestMachineRiseFall(t *testing.T) {
	tests := []struct {
		name       string
		rise, fall int
		initial    checker.State
		results    string
		want       []checker.State
	}{
		{"new target starts unhealthy and needs rise passes", 2, 3, U, "T T", []checker.State{U, H}},
		{"fall consecutive failures make it unhealthy", 2, 3, H, "F F F", []checker.State{H, H, U}},
		{"a pass resets the failure streak", 2, 3, H, "F F T F F F", []checker.State{H, H, H, H, H, U}},
		{"a failure resets the pass streak", 2, 2, U, "T F T T", []checker.State{U, U, U, H}},
		{"rise 1 fall 1 follows every result", 1, 1, U, "T F T", []checker.State{H, U, H}},
		{"extra passes keep healthy", 2, 2, U, "T T T T", []checker.State{U, H, H, H}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &checker.Machine{Model: checker.ModelRiseFall, Rise: tt.rise, Fall: tt.fall, State: tt.initial}
			if diff := cmp.Diff(tt.want, replay(m, tt.results)); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
		})
	}
}

// A crash and recovery with down=3, up=2, starting in the pool: two
// passes, five failures, three passes. The backend leaves the pool on the
// third failure and comes back on the second pass; the whole in-pool trace
// is pinned.
func TestCrashAndRecoveryDown3Up2(t *testing.T) {
	m := &checker.Machine{Rise: 2, Fall: 3, State: H}
	got := inPool(replay(m, "T T F F F F F T T T"))
	if want := "YES YES YES YES NO NO NO NO YES YES"; got != want {
		t.Errorf("in_pool = %s, want %s", got, want)
	}
}

// A flapping server, up threshold 1, starting in the pool: 6 state changes
// at down threshold 1, 2 at down threshold 3.
func TestFlappingServerThreshold1(t *testing.T) {
	const flaky = "T F T F T F F F F T"
	for _, tt := range []struct {
		fall        int
		trace       string
		wantChanges int
	}{
		{1, "O x O x O x x x x O", 6},
		{3, "O O O O O O O x x O", 2},
	} {
		m := &checker.Machine{Rise: 1, Fall: tt.fall, State: H}
		states := replay(m, flaky)
		trace := strings.NewReplacer("YES", "O", "NO", "x").Replace(inPool(states))
		if trace != tt.trace {
			t.Errorf("fall %d: pool state %s, want %s", tt.fall, trace, tt.trace)
		}
		if got := changes(states, H); got != tt.wantChanges {
			t.Errorf("fall %d: %d state changes, want %d", tt.fall, got, tt.wantChanges)
		}
	}
}

// Down 2, up 2, starting in the pool, with a pass between failures and a
// failure between passes: it leaves at probe 3 and comes back at probe 8.
func TestLeaveAndReturnDown2Up2(t *testing.T) {
	m := &checker.Machine{Rise: 2, Fall: 2, State: H}
	states := replay(m, "T T F F F T F T T")
	if got, want := inPool(states), "YES YES YES NO NO NO NO NO YES"; got != want {
		t.Fatalf("in_pool = %s, want %s", got, want)
	}
	leave, back := -1, -1
	for i := 1; i < len(states); i++ {
		switch {
		case states[i-1] == H && states[i] == U:
			leave = i
		case states[i-1] == U && states[i] == H:
			back = i
		}
	}
	if leave != 3 || back != 8 {
		t.Errorf("leaves at probe %d and comes back at %d, want 3 and 8", leave, back)
	}
}

// The three-state model with fall 3 and rise 2: three failures from
// HEALTHY (SUSPECT on the first, UNHEALTHY only on the third), then two
// successes from UNHEALTHY (SUSPECT, then HEALTHY). HEALTHY and SUSPECT are
// routable, UNHEALTHY is not.
func TestSuspectThenDownWalkthrough(t *testing.T) {
	m := &checker.Machine{Model: checker.ModelThreeState, Rise: 2, Fall: 3, State: H}
	if diff := cmp.Diff([]checker.State{S, S, U}, replay(m, "F F F")); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]checker.State{S, H}, replay(m, "T T")); diff != "" {
		t.Errorf("recovery (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		s    checker.State
		want bool
	}{{H, true}, {S, true}, {U, false}} {
		if got := (checker.Machine{State: tt.s}).Routable(); got != tt.want {
			t.Errorf("eligible(%v) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

// Three-state, fall 3: at exactly 2 consecutive failures the backend is
// SUSPECT, not UNHEALTHY yet; at exactly 3 it is.
func TestThreeStateUnhealthyAtExactlyFall(t *testing.T) {
	m := &checker.Machine{Model: checker.ModelThreeState, Rise: 2, Fall: 3, State: H}
	got := replay(m, "F F")
	if got[1] != S {
		t.Errorf("after 2 failures: %v, want suspect", got[1])
	}
	m.Observe(false)
	if m.State != U || m.FailStreak != 3 {
		t.Errorf("after 3 failures: %v with fail streak %d, want unhealthy at 3", m.State, m.FailStreak)
	}
}

// Three-state, fall 3, rise 2: after UNHEALTHY the next success lands on
// SUSPECT; a following success makes it HEALTHY. A following failure resets
// the pass streak and leaves it SUSPECT (the machine falls only at 3
// consecutive failures), so it takes three failures to be UNHEALTHY again.
func TestThreeStateRecoveryFromUnhealthy(t *testing.T) {
	down := func() *checker.Machine {
		return &checker.Machine{Model: checker.ModelThreeState, Rise: 2, Fall: 3, State: U}
	}

	m := down()
	if diff := cmp.Diff([]checker.State{S, H}, replay(m, "T T")); diff != "" {
		t.Errorf("success, success (-want +got):\n%s", diff)
	}

	m = down()
	if diff := cmp.Diff([]checker.State{S, S, S, U}, replay(m, "T F F F")); diff != "" {
		t.Errorf("success then failures (-want +got):\n%s", diff)
	}
}

func TestMachineThreeStateResetsStreaks(t *testing.T) {
	// A success in a failure streak resets the count: SUSPECT until the
	// third failure after it.
	m := &checker.Machine{Model: checker.ModelThreeState, Rise: 2, Fall: 3, State: H}
	if diff := cmp.Diff([]checker.State{S, S, S, S, S, U}, replay(m, "F F T F F F")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSetModel(t *testing.T) {
	m := &checker.Machine{Model: checker.ModelThreeState, Rise: 2, Fall: 3, State: S, PassStreak: 1}
	from, changed := m.SetModel(checker.ModelRiseFall)
	if from != S || !changed || m.State != H || m.PassStreak != 1 {
		t.Errorf("SetModel(rise_fall) from suspect: from %v changed %v state %v streak %d", from, changed, m.State, m.PassStreak)
	}
	if _, changed := m.SetModel(checker.ModelThreeState); changed || m.State != H {
		t.Errorf("SetModel(three_state) from healthy changed the state to %v", m.State)
	}
}

func TestStateAndModelStrings(t *testing.T) {
	for s, want := range map[checker.State]string{H: "healthy", U: "unhealthy", S: "suspect", checker.StateUnknown: "state(0)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
	if checker.ModelRiseFall.String() != "rise_fall" || checker.ModelThreeState.String() != "three_state" {
		t.Errorf("model strings: %v %v", checker.ModelRiseFall, checker.ModelThreeState)
	}
}

// A streak at its largest stays there: it never wraps to a negative one,
// which would turn a healthy target unhealthy after 2^63 passes.
func TestMachineStreaksSaturate(t *testing.T) {
	m := checker.Machine{Rise: 2, Fall: 3, State: checker.StateHealthy, PassStreak: math.MaxInt}
	if from, changed := m.Observe(true); changed || m.PassStreak != math.MaxInt || m.State != checker.StateHealthy {
		t.Errorf("pass at streak MaxInt: %v -> %v (changed %v), streak %d", from, m.State, changed, m.PassStreak)
	}
	m = checker.Machine{Rise: 2, Fall: 3, State: checker.StateUnhealthy, FailStreak: math.MaxInt}
	if _, changed := m.Observe(false); changed || m.FailStreak != math.MaxInt || m.State != checker.StateUnhealthy {
		t.Errorf("failure at streak MaxInt: %v (changed %v), streak %d", m.State, changed, m.FailStreak)
	}
}
