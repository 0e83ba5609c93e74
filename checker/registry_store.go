package checker

import (
	"fmt"
	"time"
)

// The registry's side of a Store (see store.go): registering what it
// loaded, as a shared registry's load is (putSpecLocked).

// load registers the stored group policies and the stored targets, with
// their stored states carried over.
func (r *registry) load(targets []StoredTarget, policies map[string]GroupPolicy) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for group, p := range policies {
		if err := ValidateGroup(group); err != nil || group == "" {
			return fmt.Errorf("stored policy of group %q: bad group name", group)
		}
		if err := ValidateFraction(p.MaxUnhealthyFraction); err != nil {
			return fmt.Errorf("stored policy of group %q: max_unhealthy_fraction %w", group, err)
		}
		r.poolLocked(group).policy = p
	}
	for _, st := range targets {
		spec := st.Spec.WithDefaults(r.defaults)
		err := st.Err
		if err == nil {
			err = spec.Validate()
		}
		var p Prober
		if err == nil {
			p, err = r.newProber(spec.Probe)
		}
		if err != nil {
			// A record that today's rules refuse (a stricter bound or egress
			// policy, a probe kind this version does not know, damaged bytes)
			// must neither keep pulsed from starting nor be dropped silently:
			// it is listed, quarantined with the reason, never probed, until
			// AddTarget fixes it or RemoveTarget removes it.
			r.logger.Warn("stored target quarantined: it is listed but not probed until fixed or removed", "target", st.Spec.Name, "error", err)
			r.targets[st.Spec.Name] = newQuarantined(st.Spec, err)
			continue
		}
		state := st.State
		if state == StateUnknown {
			state = spec.InitialState
		}
		r.putSpecLocked(spec, p, &SharedState{State: state, Time: st.LastTransition, Flap: st.Flap, Held: st.Held}, 0, now, time.Time{})
	}
	r.panicFromHoldsLocked()
	return nil
}
