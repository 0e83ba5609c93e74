package web

import (
	"slices"

	"github.com/pulsehealth/pulse/checker"
)

// vantageJSON is one vantage's verdict on a target probed from several.
type vantageJSON struct {
	Member string `json:"member"`
	Label  string `json:"label"`
	// State is "healthy", "unhealthy", "suspect", or "none" while the
	// vantage has stored no verdict.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	Time  string `json:"time,omitempty"`
	// Suspect: the vantage itself is suspect, its verdicts left out of the
	// quorum (see checker.EventVantageSuspect).
	Suspect bool `json:"suspect,omitempty"`
}

// vantagesJSON converts the vantages' verdicts; suspect says which members
// are suspect (nil: none).
func vantagesJSON(vs []checker.VantageVerdict, suspect map[string]bool) []vantageJSON {
	if len(vs) == 0 {
		return nil
	}
	out := make([]vantageJSON, len(vs))
	for i, v := range vs {
		out[i] = vantageJSON{Member: v.Member, Label: v.Label, State: "none", Error: v.Error, Suspect: suspect[v.Member]}
		if v.State != checker.StateUnknown {
			out[i].State = v.State.String()
		}
		if !v.Time.IsZero() {
			out[i].Time = stamp(v.Time)
		}
	}
	return out
}

// suspectVantageJSON is a vantage the checker leaves out of every quorum,
// as the page's alerts show it.
type suspectVantageJSON struct {
	Member   string `json:"member"`
	Label    string `json:"label"`
	Disagree int    `json:"disagree"`
	Judged   int    `json:"judged"`
	Since    string `json:"since,omitempty"`
}

// suspectVantages returns the vantages the checker judges suspect, by
// member.
func (h *Handler) suspectVantages() []checker.VantageState {
	return slices.DeleteFunc(h.c.Vantages(), func(v checker.VantageState) bool { return !v.Suspect })
}

// suspectSet returns the members of vs.
func suspectSet(vs []checker.VantageState) map[string]bool {
	if len(vs) == 0 {
		return nil
	}
	out := make(map[string]bool, len(vs))
	for _, v := range vs {
		out[v.Member] = true
	}
	return out
}
