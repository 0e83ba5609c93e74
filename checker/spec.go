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
// mean "use the checker's Defaults"; the zero InitialState means unhealthy
// and the zero Model is ModelRiseFall.
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
	}
	return nil
}

// WithDefaults returns s with its unset fields taken from d. An unset
// timeout is d.Timeout capped at the interval.
func (s Spec) WithDefaults(d Defaults) Spec {
	if s.Interval == 0 {
		s.Interval = d.Interval
	}
	if s.Timeout == 0 {
		s.Timeout = min(d.Timeout, s.Interval)
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
