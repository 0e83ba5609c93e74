package checker

import "testing"

// The vantages' verdict is a pure function of the stored verdicts: a
// quorum of the assigned vantages not suspect, capped at those assigned;
// short of it, suspect with the three-state model while they disagree,
// else unchanged.
func TestVantagesDecide(t *testing.T) {
	three := []Vantage{{"a", "a"}, {"b", "b"}, {"c", "c"}}
	none := func(string) bool { return false }
	cases := []struct {
		name     string
		assigned []Vantage
		verdicts map[string]State
		q        int
		model    Model
		cur      State
		suspect  func(string) bool
		want     State
	}{
		{"one of three down keeps healthy", three, map[string]State{"a": StateHealthy, "b": StateUnhealthy, "c": StateHealthy}, 2, ModelRiseFall, StateHealthy, none, StateHealthy},
		{"two of three down", three, map[string]State{"a": StateUnhealthy, "b": StateUnhealthy, "c": StateHealthy}, 2, ModelRiseFall, StateHealthy, none, StateUnhealthy},
		{"two of three up", three, map[string]State{"a": StateHealthy, "b": StateHealthy, "c": StateUnhealthy}, 2, ModelRiseFall, StateUnhealthy, none, StateHealthy},
		{"split, no quorum, unchanged", three, map[string]State{"a": StateHealthy, "b": StateUnhealthy}, 2, ModelRiseFall, StateUnhealthy, none, StateUnhealthy},
		{"split, three-state: suspect", three, map[string]State{"a": StateHealthy, "b": StateUnhealthy}, 2, ModelThreeState, StateHealthy, none, StateSuspect},
		{"a verdict of a vantage not assigned does not count", three[:2], map[string]State{"a": StateHealthy, "b": StateUnhealthy, "c": StateUnhealthy}, 2, ModelRiseFall, StateHealthy, none, StateHealthy},
		{"quorum capped at the vantages assigned", three[:1], map[string]State{"a": StateUnhealthy}, 2, ModelRiseFall, StateHealthy, none, StateUnhealthy},
		{"a suspect vantage is left out", three, map[string]State{"a": StateHealthy, "b": StateUnhealthy, "c": StateUnhealthy}, 2, ModelRiseFall, StateHealthy, func(m string) bool { return m == "c" }, StateHealthy},
		{"only suspect vantages left: stale is not down", three, map[string]State{"a": StateUnhealthy, "b": StateUnhealthy, "c": StateUnhealthy}, 2, ModelRiseFall, StateHealthy, func(m string) bool { return m != "a" }, StateHealthy},
	}
	for _, c := range cases {
		v := &vantageSet{assigned: c.assigned}
		for m, s := range c.verdicts {
			v.put(VantageVerdict{Member: m, Label: m, State: s})
		}
		if got := v.decide(c.q, c.model, c.cur, c.suspect); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
