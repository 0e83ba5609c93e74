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
