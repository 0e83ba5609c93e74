package checker

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
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
//
// Every field's JSON tag leaves out a zero value (here and in the probe
// specs): the store and a shared registry keep a spec as JSON, and most
// fields of most specs are zero.
type Spec struct {
	Name  string     `json:",omitzero"`
	Group string     `json:",omitzero"`
	Probe probe.Spec `json:",omitzero"`
	// Interval is the time between the starts of two probes, in
	// [MinInterval, MaxInterval].
	Interval time.Duration `json:",omitzero"`
	// Timeout bounds one probe: in [MinTimeout, MaxTimeout] and at most
	// Interval.
	Timeout time.Duration `json:",omitzero"`
	// Rise is the consecutive passes that make a target healthy, in
	// [1, MaxRise].
	Rise int `json:",omitzero"`
	// Fall is the consecutive failures that make a target unhealthy, in
	// [1, MaxFall].
	Fall int `json:",omitzero"`
	// InitialState is a new target's state: StateUnhealthy or StateHealthy.
	InitialState State `json:",omitzero"`
	Model        Model `json:",omitzero"`
	// MaxLatency, when positive, fails a probe that passed but took longer.
	// At most Timeout.
	MaxLatency time.Duration `json:",omitzero"`
	// Source says who registered the target: "" for the API, "file" for a
	// targets file. It is kept with the spec and shown in its status.
	Source string `json:",omitzero"`

	// FastInterval is the interval while the target is on its way to a
	// transition (Machine.Transitioning): a dead target is detected in its
	// first failure plus (Fall-1) x FastInterval. If 0, Interval. At least
	// Timeout, at most MaxInterval.
	FastInterval time.Duration `json:",omitzero"`
	// DownInterval is the interval while the target's verdict is unhealthy
	// with no pass streak. If 0, Interval. At least Timeout, at most
	// MaxInterval.
	DownInterval time.Duration `json:",omitzero"`

	// FlapWindow is the sliding window over which transitions are counted
	// (Status.Transitions) and flapping is judged. If 0, DefaultFlapWindow.
	// At most MaxFlapWindow.
	FlapWindow time.Duration `json:",omitzero"`
	// FlapThreshold, when at least 2, turns flap damping on: a target whose
	// verdict changes FlapThreshold times within FlapWindow is flapping and
	// held unhealthy until its verdict has not changed for FlapStableFor.
	// 0 means no damping. At most MaxFlapThreshold.
	FlapThreshold int `json:",omitzero"`
	// FlapStableFor is how long a flapping target's verdict must stay
	// unchanged before it is released. If 0, FlapWindow. Only with
	// FlapThreshold; at most MaxFlapStableFor.
	FlapStableFor time.Duration `json:",omitzero"`

	// PassiveOutcomes lets ReportOutcome feed the target's machine. Off by
	// default.
	PassiveOutcomes bool `json:",omitzero"`

	// Vantages is how many replicas probe the target, each with its own
	// machine, in distinct vantages where there are enough (see
	// vantage.go); 0 or 1: its owner alone. Above 1 only with a shared
	// registry that assigns vantages; at most MaxVantages. (Small counts,
	// in the padding after PassiveOutcomes: a target stays within 448
	// bytes.)
	Vantages uint8 `json:",omitzero"`
	// Quorum is how many vantages must agree to change the target's
	// verdict; 0: a majority of Vantages. At most Vantages.
	Quorum uint8 `json:",omitzero"`

	// PassiveRate is how many passive outcomes a second are counted at
	// most, with a burst of as many. If 0, DefaultPassiveRate. Only with
	// PassiveOutcomes; at most MaxPassiveRate.
	PassiveRate int `json:",omitzero"`

	// Lifecycle is the target's slow start, automatic removal and
	// administrative mode; nil for none (see Lifecycle).
	Lifecycle *Lifecycle `json:",omitzero"`
}

// Bounds of a Spec's durations and counts, checked by Validate (the
// durations and counts of Defaults too, by Defaults.Validate). Nothing a
// health check needs lies beyond them, and they keep every accepted value
// far from the limits of time arithmetic: a time.Duration holds about 292
// years, and a time past the year 2262 has no UnixNano.
const (
	// MinInterval and MaxInterval bound Interval, FastInterval and
	// DownInterval.
	MinInterval = time.Millisecond
	MaxInterval = 24 * time.Hour
	// MinTimeout and MaxTimeout bound Timeout, which is also at most the
	// interval.
	MinTimeout = time.Millisecond
	MaxTimeout = time.Hour
	// MaxRise and MaxFall bound Rise and Fall.
	MaxRise = 1000
	MaxFall = 1000
	// MaxFlapWindow and MaxFlapStableFor bound FlapWindow and
	// FlapStableFor.
	MaxFlapWindow    = 24 * time.Hour
	MaxFlapStableFor = 24 * time.Hour
	// MaxFlapThreshold bounds FlapThreshold: it is as many verdict changes
	// as a target remembers, so a larger threshold could never be reached.
	MaxFlapThreshold = 256
	// MaxPassiveRate bounds PassiveRate, in outcomes a second.
	MaxPassiveRate = 10000
)

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
// StandardDefaults. Each field has the bounds of the Spec field it fills
// (see Validate).
type Defaults struct {
	Interval time.Duration
	// Timeout fills an unset Timeout, capped at the spec's Interval.
	Timeout time.Duration
	Rise    int
	Fall    int
	// FastInterval and DownInterval, when positive, fill a spec's unset
	// FastInterval and DownInterval, raised to the spec's timeout if they
	// are shorter (a spec may set a longer timeout than Timeout). Zero
	// leaves them unset: each target's own Interval. When set, at least
	// Timeout.
	FastInterval time.Duration
	DownInterval time.Duration
}

// StandardDefaults returns the defaults pulsed uses unless its flags say
// otherwise: probe every 2s with a 1s timeout, rise 2, fall 3.
func StandardDefaults() Defaults {
	return Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
}

// Validate reports whether d can fill a Spec: every field within the
// bounds of the Spec field it fills, a timeout no longer than the interval,
// and fast and down intervals, when set, no shorter than the timeout. It
// returns a *FieldError naming the first bad field as the Spec field it
// fills ("interval", "fast_interval").
func (d Defaults) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case d.Interval < MinInterval || d.Interval > MaxInterval:
		return bad("interval", "default interval must be between %v and %v, got %v", MinInterval, MaxInterval, d.Interval)
	case d.Timeout < MinTimeout || d.Timeout > MaxTimeout:
		return bad("timeout", "default timeout must be between %v and %v, got %v", MinTimeout, MaxTimeout, d.Timeout)
	case d.Timeout > d.Interval:
		return bad("timeout", "default timeout must be at most the default interval %v, got %v", d.Interval, d.Timeout)
	case d.Rise < 1 || d.Rise > MaxRise:
		return bad("rise", "default rise must be between 1 and %d, got %d", MaxRise, d.Rise)
	case d.Fall < 1 || d.Fall > MaxFall:
		return bad("fall", "default fall must be between 1 and %d, got %d", MaxFall, d.Fall)
	}
	for _, iv := range []struct {
		name string
		d    time.Duration
	}{{"fast", d.FastInterval}, {"down", d.DownInterval}} {
		field := iv.name + "_interval"
		switch {
		case iv.d < 0:
			return bad(field, "default %s interval must not be negative (0: each target's interval), got %v", iv.name, iv.d)
		case iv.d > 0 && iv.d < d.Timeout:
			return bad(field, "default %s interval must be at least the default timeout %v (0: each target's interval), got %v", iv.name, d.Timeout, iv.d)
		case iv.d > MaxInterval:
			return bad(field, "default %s interval must be at most %v, got %v", iv.name, MaxInterval, iv.d)
		}
	}
	return nil
}

// WithDefaults returns s with its unset fields taken from d. An unset
// timeout is d.Timeout capped at the interval; it is not capped at a
// shorter FastInterval or DownInterval, which Validate then rejects: a
// probe must be able to time out before the next one is due.
func (s Spec) WithDefaults(d Defaults) Spec {
	if s.Interval == 0 {
		s.Interval = d.Interval
	}
	if s.Timeout == 0 {
		s.Timeout = min(d.Timeout, s.Interval)
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
	if err := s.validateTiming(); err != nil {
		return err
	}
	if err := s.validateLifecycle(); err != nil {
		return err
	}
	if err := s.validateVantages(); err != nil {
		return err
	}
	switch {
	case s.Rise < 1 || s.Rise > MaxRise:
		return &FieldError{"rise", fmt.Sprintf("must be between 1 and %d, got %d", MaxRise, s.Rise)}
	case s.Fall < 1 || s.Fall > MaxFall:
		return &FieldError{"fall", fmt.Sprintf("must be between 1 and %d, got %d", MaxFall, s.Fall)}
	case s.InitialState != StateHealthy && s.InitialState != StateUnhealthy:
		return &FieldError{"initial_state", fmt.Sprintf("must be healthy or unhealthy, got %v", s.InitialState)}
	case s.Model != ModelRiseFall && s.Model != ModelThreeState:
		return &FieldError{"model", fmt.Sprintf("must be rise_fall or three_state, got %v", s.Model)}
	case s.FlapThreshold < 0 || s.FlapThreshold == 1:
		return &FieldError{"flap_threshold", fmt.Sprintf("must be 0 (no damping) or at least %d (one transition is not a flap), got %d", MinFlapThreshold, s.FlapThreshold)}
	case s.FlapThreshold > MaxFlapThreshold:
		return &FieldError{"flap_threshold", fmt.Sprintf("must be at most %d (the transitions a target remembers), got %d", MaxFlapThreshold, s.FlapThreshold)}
	case s.FlapStableFor > 0 && s.FlapThreshold == 0:
		return &FieldError{"flap_stable_for", "needs flap_threshold: without it there is no damping to be stable from"}
	case s.PassiveRate < 0:
		return &FieldError{"passive_rate", fmt.Sprintf("must be positive when set, got %d", s.PassiveRate)}
	case s.PassiveRate > MaxPassiveRate:
		return &FieldError{"passive_rate", fmt.Sprintf("must be at most %d a second, got %d", MaxPassiveRate, s.PassiveRate)}
	case s.PassiveRate > 0 && !s.PassiveOutcomes:
		return &FieldError{"passive_rate", "needs passive_outcomes: true"}
	}
	return nil
}

// validateTiming checks the durations: each within its bounds, the
// timeout within every interval, max_latency within the timeout.
func (s Spec) validateTiming() error {
	if err := checkRange("interval", s.Interval, MinInterval, MaxInterval); err != nil {
		return err
	}
	if err := checkRange("timeout", s.Timeout, MinTimeout, MaxTimeout); err != nil {
		return err
	}
	if s.Timeout > s.Interval {
		return &FieldError{"timeout", fmt.Sprintf("must be at most the interval (%v), got %v", s.Interval, s.Timeout)}
	}
	switch {
	case s.MaxLatency < 0:
		return &FieldError{"max_latency", fmt.Sprintf("must be positive when set, got %v", s.MaxLatency)}
	case s.MaxLatency > s.Timeout:
		return &FieldError{"max_latency", fmt.Sprintf("must be at most the timeout (%v), got %s", s.Timeout, durText(s.MaxLatency))}
	}
	for _, iv := range []struct {
		field string
		d     time.Duration
	}{{"fast_interval", s.FastInterval}, {"down_interval", s.DownInterval}} {
		switch {
		case iv.d < 0:
			return &FieldError{iv.field, fmt.Sprintf("must be positive when set, got %v", iv.d)}
		case iv.d > 0 && iv.d < s.Timeout:
			return &FieldError{iv.field, fmt.Sprintf("must be at least the timeout (%v), got %v: set timeout to at most %v, or a longer %s", s.Timeout, iv.d, iv.d, iv.field)}
		case iv.d > MaxInterval:
			return &FieldError{iv.field, fmt.Sprintf("must be at most %v, got %s", MaxInterval, durText(iv.d))}
		}
	}
	for _, w := range []struct {
		field string
		d     time.Duration
		max   time.Duration
	}{{"flap_window", s.FlapWindow, MaxFlapWindow}, {"flap_stable_for", s.FlapStableFor, MaxFlapStableFor}} {
		switch {
		case w.d < 0:
			return &FieldError{w.field, fmt.Sprintf("must be positive when set, got %v", w.d)}
		case w.d > w.max:
			return &FieldError{w.field, fmt.Sprintf("must be at most %v, got %s", w.max, durText(w.d))}
		}
	}
	return nil
}

// checkRange checks a required duration against its bounds.
func checkRange(field string, d, lo, hi time.Duration) error {
	switch {
	case d <= 0:
		return &FieldError{field, fmt.Sprintf("must be positive, got %v", d)}
	case d < lo:
		return &FieldError{field, fmt.Sprintf("must be at least %v, got %v", lo, d)}
	case d > hi:
		return &FieldError{field, fmt.Sprintf("must be at most %v, got %s", hi, durText(d))}
	}
	return nil
}

// durText formats a duration for an error message. A converted duration
// too long for a time.Duration (the API's seconds can say 10,000 years)
// arrives as the largest one, whose text would be a made-up number.
func durText(d time.Duration) string {
	if d == math.MaxInt64 {
		return "more than 292 years"
	}
	return d.String()
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
