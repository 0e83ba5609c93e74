package checker

import (
	"errors"
	"fmt"
	"time"

	"pulse/checker/probe"
)

// Limits on names. A name is 1 to MaxNameLen characters from
// [A-Za-z0-9._:-] and starts with a letter or digit; a group follows the same
// rule but may be empty and is at most MaxGroupLen long.
const (
	MaxNameLen  = 128
	MaxGroupLen = 64
)

// Spec is what to probe and how to judge it. Zero durations and thresholds
// mean "use the checker's Defaults", which WithDefaults fills in; the zero
// InitialState means unhealthy and the zero Model is ModelRiseFall. The
// policy fields (FastInterval and after) stay zero when unset, and the
// checker applies the default each one states.
type Spec struct {
	Name  string
	Group string
	Probe probe.Spec
	// Interval is the time between the starts of two probes.
	Interval time.Duration
	// Timeout bounds one probe; at most Interval.
	Timeout time.Duration
	// Rise is the consecutive passes that make a target healthy.
	Rise int
	// Fall is the consecutive failures that make a target unhealthy.
	Fall int
	// InitialState is a new target's state: StateUnhealthy or StateHealthy.
	InitialState State
	Model        Model
	// MaxLatency, when positive, fails a probe that passed but took longer.
	MaxLatency time.Duration
	// Source says who registered the target: "" for the API, "file" for a
	// targets file. It is kept with the spec and shown in its status.
	Source string

	// FastInterval is the interval while the target is on its way to a
	// transition (Machine.Transitioning): a dead target is detected in its
	// first failure plus (Fall-1) x FastInterval. If 0, Interval. At least
	// Timeout.
	FastInterval time.Duration
	// DownInterval is the interval while the target's verdict is unhealthy
	// with no pass streak. If 0, Interval. At least Timeout.
	DownInterval time.Duration

	// FlapWindow is the sliding window over which transitions are counted
	// (Status.Transitions) and flapping is judged. If 0, DefaultFlapWindow.
	FlapWindow time.Duration
	// FlapThreshold, when at least 2, turns flap damping on: a target whose
	// verdict changes FlapThreshold times within FlapWindow is flapping and
	// held unhealthy until its verdict has not changed for FlapStableFor.
	// 0 means no damping.
	FlapThreshold int
	// FlapStableFor is how long a flapping target's verdict must stay
	// unchanged before it is released. If 0, FlapWindow. Only with
	// FlapThreshold.
	FlapStableFor time.Duration

	// PassiveOutcomes lets ReportOutcome feed the target's machine. Off by
	// default.
	PassiveOutcomes bool
	// PassiveRate is how many passive outcomes a second are counted at
	// most, with a burst of as many. If 0, DefaultPassiveRate. Only with
	// PassiveOutcomes.
	PassiveRate int
}

// Defaults of the Spec fields that Defaults does not carry.
const (
	// DefaultFlapWindow is FlapWindow's default.
	DefaultFlapWindow = time.Minute
	// DefaultPassiveRate is PassiveRate's default, in outcomes a second.
	DefaultPassiveRate = 10
	// MinFlapThreshold is the smallest FlapThreshold that turns damping on:
	// one transition is not a flap.
	MinFlapThreshold = 2
)

// IntervalFor returns the interval a target with this spec is probed at
// while its machine is m: FastInterval on its way to a transition,
// DownInterval while unhealthy, Interval otherwise (an unset one is
// Interval). s must have its defaults filled in.
func (s Spec) IntervalFor(m Machine) time.Duration {
	switch {
	case m.Transitioning() && s.FastInterval > 0:
		return s.FastInterval
	case !m.Transitioning() && m.State == StateUnhealthy && s.DownInterval > 0:
		return s.DownInterval
	}
	return s.Interval
}

// flapWindow is FlapWindow or its default.
func (s Spec) flapWindow() time.Duration {
	if s.FlapWindow > 0 {
		return s.FlapWindow
	}
	return DefaultFlapWindow
}

// flapStableFor is FlapStableFor or its default, the flap window.
func (s Spec) flapStableFor() time.Duration {
	if s.FlapStableFor > 0 {
		return s.FlapStableFor
	}
	return s.flapWindow()
}

// passiveRate is PassiveRate or its default.
func (s Spec) passiveRate() int {
	if s.PassiveRate > 0 {
		return s.PassiveRate
	}
	return DefaultPassiveRate
}

// SourceFile marks targets registered from a targets file.
const SourceFile = "file"

// Defaults fill a Spec's unset fields. The zero value means
// StandardDefaults.
type Defaults struct {
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
	// FastInterval and DownInterval, when positive, fill a spec's unset
	// FastInterval and DownInterval, raised to the spec's timeout if they
	// are shorter. Zero leaves them unset: each target's own Interval.
	FastInterval time.Duration
	DownInterval time.Duration
}

// StandardDefaults returns the defaults pulsed uses unless its flags say
// otherwise: probe every 2s with a 1s timeout, rise 2, fall 3.
func StandardDefaults() Defaults {
	return Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
}

// Validate reports whether d can fill a Spec: positive durations and
// thresholds, and a timeout no longer than the interval.
func (d Defaults) Validate() error {
	switch {
	case d.Interval <= 0:
		return fmt.Errorf("default interval must be positive, got %v", d.Interval)
	case d.Timeout <= 0 || d.Timeout > d.Interval:
		return fmt.Errorf("default timeout must be positive and at most the default interval %v, got %v", d.Interval, d.Timeout)
	case d.Rise < 1 || d.Fall < 1:
		return fmt.Errorf("default rise and fall must be at least 1, got rise %d, fall %d", d.Rise, d.Fall)
	case d.FastInterval < 0 || d.DownInterval < 0:
		return fmt.Errorf("default fast and down intervals must not be negative (0: each target's interval), got %v and %v", d.FastInterval, d.DownInterval)
	}
	return nil
}

// WithDefaults returns s with its unset fields taken from d. An unset
// timeout is d.Timeout capped at the shortest interval set.
func (s Spec) WithDefaults(d Defaults) Spec {
	if s.Interval == 0 {
		s.Interval = d.Interval
	}
	if s.Timeout == 0 {
		s.Timeout = min(d.Timeout, s.Interval)
		if s.FastInterval > 0 {
			s.Timeout = min(s.Timeout, s.FastInterval)
		}
		if s.DownInterval > 0 {
			s.Timeout = min(s.Timeout, s.DownInterval)
		}
	}
	if s.FastInterval == 0 && d.FastInterval > 0 {
		s.FastInterval = max(d.FastInterval, s.Timeout)
	}
	if s.DownInterval == 0 && d.DownInterval > 0 {
		s.DownInterval = max(d.DownInterval, s.Timeout)
	}
	if s.Rise == 0 {
		s.Rise = d.Rise
	}
	if s.Fall == 0 {
		s.Fall = d.Fall
	}
	if s.InitialState == StateUnknown {
		s.InitialState = StateUnhealthy
	}
	return s
}

// FieldError says which field of a Spec is wrong and how to fix it. Field
// uses the API's field names ("rise", "http.url").
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Validate checks a complete Spec (one that went through WithDefaults) and
// returns a *FieldError naming the first bad field.
func (s Spec) Validate() error {
	if err := ValidateName(s.Name); err != nil {
		return &FieldError{"name", err.Error()}
	}
	if err := ValidateGroup(s.Group); err != nil {
		return &FieldError{"group", err.Error()}
	}
	if err := s.Probe.Validate(); err != nil {
		var fe *probe.FieldError
		if errors.As(err, &fe) {
			return &FieldError{fe.Field, fe.Reason}
		}
		return &FieldError{"probe", err.Error()}
	}
	switch {
	case s.Interval <= 0:
		return &FieldError{"interval", fmt.Sprintf("must be positive, got %v", s.Interval)}
	case s.Timeout <= 0:
		return &FieldError{"timeout", fmt.Sprintf("must be positive, got %v", s.Timeout)}
	case s.Timeout > s.Interval:
		return &FieldError{"timeout", fmt.Sprintf("must be at most the interval (%v), got %v", s.Interval, s.Timeout)}
	case s.Rise < 1:
		return &FieldError{"rise", fmt.Sprintf("must be at least 1, got %d", s.Rise)}
	case s.Fall < 1:
		return &FieldError{"fall", fmt.Sprintf("must be at least 1, got %d", s.Fall)}
	case s.InitialState != StateHealthy && s.InitialState != StateUnhealthy:
		return &FieldError{"initial_state", fmt.Sprintf("must be healthy or unhealthy, got %v", s.InitialState)}
	case s.Model != ModelRiseFall && s.Model != ModelThreeState:
		return &FieldError{"model", fmt.Sprintf("must be rise_fall or three_state, got %v", s.Model)}
	case s.MaxLatency < 0:
		return &FieldError{"max_latency", fmt.Sprintf("must be positive when set, got %v", s.MaxLatency)}
	case s.MaxLatency > s.Timeout:
		return &FieldError{"max_latency", fmt.Sprintf("must be at most the timeout (%v), got %v", s.Timeout, s.MaxLatency)}
	case s.FastInterval < 0:
		return &FieldError{"fast_interval", fmt.Sprintf("must be positive when set, got %v", s.FastInterval)}
	case s.FastInterval > 0 && s.FastInterval < s.Timeout:
		return &FieldError{"fast_interval", fmt.Sprintf("must be at least the timeout (%v), got %v", s.Timeout, s.FastInterval)}
	case s.DownInterval < 0:
		return &FieldError{"down_interval", fmt.Sprintf("must be positive when set, got %v", s.DownInterval)}
	case s.DownInterval > 0 && s.DownInterval < s.Timeout:
		return &FieldError{"down_interval", fmt.Sprintf("must be at least the timeout (%v), got %v", s.Timeout, s.DownInterval)}
	case s.FlapWindow < 0:
		return &FieldError{"flap_window", fmt.Sprintf("must be positive when set, got %v", s.FlapWindow)}
	case s.FlapThreshold < 0 || s.FlapThreshold == 1:
		return &FieldError{"flap_threshold", fmt.Sprintf("must be 0 (no damping) or at least %d (one transition is not a flap), got %d", MinFlapThreshold, s.FlapThreshold)}
	case s.FlapStableFor < 0:
		return &FieldError{"flap_stable_for", fmt.Sprintf("must be positive when set, got %v", s.FlapStableFor)}
	case s.FlapStableFor > 0 && s.FlapThreshold == 0:
		return &FieldError{"flap_stable_for", "needs flap_threshold: without it there is no damping to be stable from"}
	case s.PassiveRate < 0:
		return &FieldError{"passive_rate", fmt.Sprintf("must be positive when set, got %d", s.PassiveRate)}
	case s.PassiveRate > 0 && !s.PassiveOutcomes:
		return &FieldError{"passive_rate", "needs passive_outcomes: true"}
	}
	return nil
}

// ValidateName checks a target name against the documented charset and
// length.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("is required")
	}
	return validateIdent(name, MaxNameLen)
}

// ValidateGroup checks a group name; the empty group is valid.
func ValidateGroup(group string) error {
	if group == "" {
		return nil
	}
	return validateIdent(group, MaxGroupLen)
}

func validateIdent(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("must be at most %d characters, got %d", max, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("must start with a letter or digit, got %q", s)
		}
		if !alnum && c != '.' && c != '_' && c != ':' && c != '-' {
			return fmt.Errorf("may contain only letters, digits and . _ : -, got %q", s)
		}
	}
	return nil
}
