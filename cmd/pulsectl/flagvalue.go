package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The values of pulsectl's flags, and what a refused one says: the form
// the flag takes ("want a whole number", "want a revision"), and for a
// number too large to send, the flag's bound where its help states one,
// else the limit of the type that carries it. A value pulsectl can send
// is pulsed's to judge: its error names the field and its bound.

// intFlag is a flag of an int32 field of the API. It refuses only what
// int32 cannot carry; lo and hi are the bound its message names then:
// the flag's, when its help states one, else int32's.
type intFlag struct {
	p      *int
	lo, hi int
}

// int32Flag returns a flag that sets *p, bounded by int32's range.
func int32Flag(p *int) *intFlag { return &intFlag{p: p, lo: math.MinInt32, hi: math.MaxInt32} }

// within sets the bound the flag's help states.
func (f *intFlag) within(lo, hi int) *intFlag {
	f.lo, f.hi = lo, hi
	return f
}

func (f *intFlag) String() string {
	if f == nil || f.p == nil {
		return "0"
	}
	return strconv.Itoa(*f.p)
}

func (f *intFlag) Set(v string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
	switch {
	case errors.Is(err, strconv.ErrSyntax):
		if f.lo == math.MinInt32 && f.hi == math.MaxInt32 {
			return errors.New("want a whole number")
		}
		return fmt.Errorf("want a whole number from %d to %d", f.lo, f.hi)
	case n > math.MaxInt32:
		return fmt.Errorf("too large: want a whole number up to %d", f.hi)
	case n < math.MinInt32:
		return fmt.Errorf("too small: want a whole number from %d", f.lo)
	}
	*f.p = int(n)
	return nil
}

// valueError matches the flag package's error for a value one of its own
// numeric flags cannot read.
var valueError = regexp.MustCompile(`^invalid value ("(?:[^"\\]|\\.)*") for flag -([A-Za-z0-9-]+): (parse error|value out of range)$`)

// numericValueError rewrites msg, when it is the flag package's error for
// a value of one of its numeric flags, into what the flag takes:
// `invalid value "abc" for flag --since: want a revision`, or for
// --workers 99999999999999999999 "too large: want a whole number up to
// 9223372036854775807". ok is false for other errors.
func numericValueError(fs *flag.FlagSet, msg string) (string, bool) {
	m := valueError.FindStringSubmatch(msg)
	if m == nil {
		return "", false
	}
	f := fs.Lookup(m[2])
	if f == nil {
		return "", false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "", false
	}
	var form, limit string
	switch g.Get().(type) {
	case int, int64:
		form, limit = "a whole number", strconv.FormatInt(math.MaxInt64, 10)
	case uint, uint64:
		form, limit = "a whole number, 0 or more", strconv.FormatUint(math.MaxUint64, 10)
	case float64:
		form = "a number such as 0.5"
	case time.Duration:
		form = "a duration such as 30s"
	default:
		return "", false
	}
	if name, _ := flag.UnquoteUsage(f); name != "" && name != "int" && name != "uint" && name != "float" && name != "duration" {
		form = article(name) + " " + name // the flag's own word: a revision
	}
	want := "want " + form
	switch {
	case m[3] != "value out of range":
	case strings.HasPrefix(m[1], `"-`):
		want = "too small: " + want
		if limit != "" {
			want += " from " + strconv.FormatInt(math.MinInt64, 10)
		}
	default:
		want = "too large: " + want
		if limit != "" {
			want += " up to " + limit
		}
	}
	return fmt.Sprintf("invalid value %s for flag %s: %s", m[1], flagName(f.Name), want), true
}

// article is "a" or "an", as word takes.
func article(word string) string {
	if strings.ContainsAny(word[:1], "aeiouAEIOU") {
		return "an"
	}
	return "a"
}

// secondsFlag is a positive duration given as a Go duration ("20s", "1m")
// or as seconds ("20", "2.5").
type secondsFlag time.Duration

func (s *secondsFlag) String() string { return time.Duration(*s).String() }

func (s *secondsFlag) Set(v string) error { return setSeconds((*time.Duration)(s), v, false) }

// zeroSecondsFlag is a duration flag as secondsFlag that also takes 0: the
// default, or none.
type zeroSecondsFlag time.Duration

func (s *zeroSecondsFlag) String() string { return time.Duration(*s).String() }

func (s *zeroSecondsFlag) Set(v string) error { return setSeconds((*time.Duration)(s), v, true) }

// setSeconds sets *d to v read by parseSeconds, which must be positive,
// or with zeroOK 0 or more.
func setSeconds(d *time.Duration, v string, zeroOK bool) error {
	got, err := parseSeconds(v)
	switch {
	case err != nil:
		return err
	case zeroOK && got < 0:
		return fmt.Errorf("must be 0 or more, got %v", v)
	case !zeroOK && got <= 0:
		return fmt.Errorf("must be positive, got %v", v)
	}
	*d = got
	return nil
}

// errTooLong is a duration flag's error for a value past the longest
// duration there is, about 292 years, when the flag states no bound of
// its own (atMost).
var errTooLong = fmt.Errorf("too large: must be at most %v", time.Duration(math.MaxInt64))

// durationForm matches what time.ParseDuration reads: a value of this
// form it refuses is too large for a duration.
var durationForm = regexp.MustCompile(`^[-+]?(([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// parseSeconds reads a duration flag's value: a Go duration or a number
// of seconds. A value too large to be a duration is errTooLong.
func parseSeconds(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) || errors.Is(err, strconv.ErrRange) {
		if math.Abs(f) < math.MaxInt64/float64(time.Second) {
			return time.Duration(f * float64(time.Second)), nil
		}
		return tooLong(v)
	}
	d, err := time.ParseDuration(v)
	switch {
	case err == nil:
		return d, nil
	case !durationForm.MatchString(v):
		return 0, fmt.Errorf("want a duration such as 20s or a number of seconds, got %q", v)
	}
	return tooLong(v)
}

// tooLong is parseSeconds's answer for v, a number too large to be a
// duration: errTooLong, or for a negative one the most negative duration,
// which the flags refuse as negative.
func tooLong(v string) (time.Duration, error) {
	if strings.HasPrefix(v, "-") {
		return math.MinInt64, nil
	}
	return 0, errTooLong
}

// bounded is a duration flag, a *secondsFlag or *zeroSecondsFlag, whose
// help states its bound, max (the API's, or pulsectl's own): a value too
// large to be a duration is refused naming it, as pulsed or pulsectl
// refuses any value past it.
type bounded struct {
	flag.Value
	max time.Duration
}

// atMost returns d bounded by max.
func atMost(d flag.Value, max time.Duration) *bounded { return &bounded{Value: d, max: max} }

func (b *bounded) String() string {
	if b == nil || b.Value == nil {
		return time.Duration(0).String() // the zero value, for the help
	}
	return b.Value.String()
}

func (b *bounded) Set(v string) error {
	err := b.Value.Set(v)
	if errors.Is(err, errTooLong) {
		return fmt.Errorf("too large: must be at most %v", b.max)
	}
	return err
}
