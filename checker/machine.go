package checker

import (
	"fmt"
	"math"
)

// State is a target's health as the checker has decided it. The zero value is
// StateUnknown, which no target ever has: it means "not set" in a Spec.
type State int

// The states. StateSuspect exists only in ModelThreeState.
const (
	StateUnknown State = iota
	StateHealthy
	StateUnhealthy
	StateSuspect
)

// String returns the lower-case name used in transition texts ("healthy").
func (s State) String() string {
	switch s {
	case StateHealthy:
		return "healthy"
	case StateUnhealthy:
		return "unhealthy"
	case StateSuspect:
		return "suspect"
	default:
		return fmt.Sprintf("state(%d)", int(s))
	}
}

// Model is the state machine that turns results into a state. The zero value
// is ModelRiseFall.
type Model int

// The models.
const (
	// ModelRiseFall is the classic machine: two states with hysteresis.
	ModelRiseFall Model = iota
	// ModelThreeState adds a warning state: HEALTHY, SUSPECT and UNHEALTHY.
	ModelThreeState
)

// String returns "rise_fall" or "three_state".
func (m Model) String() string {
	switch m {
	case ModelRiseFall:
		return "rise_fall"
	case ModelThreeState:
		return "three_state"
	default:
		return fmt.Sprintf("model(%d)", int(m))
	}
}

// Machine is the pure rise/fall state machine of one target: no clock, no
// logging, no locking. Callers own it and serialise access to it.
//
// Initial state: a Machine starts in whatever State its creator sets; the
// checker uses the spec's initial state, unhealthy by default, so a new
// target must prove itself before it receives traffic.
//
// Every result first updates the streaks: a pass adds one to PassStreak and
// zeroes FailStreak, a failure does the mirror image. Then the model decides.
//
// ModelRiseFall:
//   - unhealthy -> healthy when PassStreak >= Rise;
//   - healthy -> unhealthy when FailStreak >= Fall.
//
// ModelThreeState:
//   - on a pass: unhealthy -> suspect; suspect -> healthy when
//     PassStreak >= Rise;
//   - on a failure: healthy -> suspect; suspect -> unhealthy when
//     FailStreak >= Fall.
//
// With Rise 2 and Fall 3 a healthy three-state target is unhealthy at its
// third consecutive failure and back to healthy at its second consecutive
// pass, always through suspect.
type Machine struct {
	Model      Model
	Rise, Fall int
	State      State
	PassStreak int
	FailStreak int
}

// Observe records one result (pass is true only for an explicit pass) and
// returns the state before it and whether the state changed.
func (m *Machine) Observe(pass bool) (from State, changed bool) {
	from = m.State
	if pass {
		m.PassStreak = inc(m.PassStreak)
		m.FailStreak = 0
	} else {
		m.FailStreak = inc(m.FailStreak)
		m.PassStreak = 0
	}
	switch m.Model {
	case ModelThreeState:
		m.State = m.nextThreeState(pass)
	default:
		m.State = m.nextRiseFall(pass)
	}
	return from, m.State != from
}

// inc adds one to a streak, saturating: a target that passes for ever
// keeps a streak of math.MaxInt rather than wrapping to a negative one.
func inc(n int) int {
	if n == math.MaxInt {
		return n
	}
	return n + 1
}

func (m *Machine) nextRiseFall(pass bool) State {
	switch {
	case pass && m.State != StateHealthy && m.PassStreak >= m.Rise:
		return StateHealthy
	case !pass && m.State != StateUnhealthy && m.FailStreak >= m.Fall:
		return StateUnhealthy
	}
	return m.State
}

func (m *Machine) nextThreeState(pass bool) State {
	if pass {
		switch {
		case m.State == StateUnhealthy:
			return StateSuspect
		case m.State == StateSuspect && m.PassStreak >= m.Rise:
			return StateHealthy
		}
		return m.State
	}
	switch {
	case m.State == StateHealthy:
		return StateSuspect
	case m.State == StateSuspect && m.FailStreak >= m.Fall:
		return StateUnhealthy
	}
	return m.State
}

// Routable reports whether a target in this state should receive traffic:
// healthy always, suspect too (a warning label, not a quarantine).
func (m Machine) Routable() bool {
	return m.State == StateHealthy || m.State == StateSuspect
}

// Transitioning reports whether the results are on their way to a
// transition: a healthy target with a failure streak, an unhealthy one with
// a pass streak, or a suspect one. The scheduler probes such a target at
// its FastInterval.
func (m Machine) Transitioning() bool {
	switch m.State {
	case StateHealthy:
		return m.FailStreak > 0
	case StateUnhealthy:
		return m.PassStreak > 0
	case StateSuspect:
		return true
	}
	return false
}

// SetModel switches the machine to model, keeping streaks. A suspect target
// moving to ModelRiseFall, which has no suspect state, becomes healthy: it
// was routable and stays routable. It returns the state before and whether
// the state changed.
func (m *Machine) SetModel(model Model) (from State, changed bool) {
	from = m.State
	m.Model = model
	if model == ModelRiseFall && m.State == StateSuspect {
		m.State = StateHealthy
	}
	return from, m.State != from
}
