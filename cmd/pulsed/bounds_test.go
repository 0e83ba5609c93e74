package main

import (
	"bytes"
	"strings"
	"testing"
)

// The default flags have the bounds of the target fields they fill, and
// their errors name the bound.
func TestDefaultFlagBounds(t *testing.T) {
	checkFlags(t, []flagCase{
		{[]string{"-interval", "24h", "-timeout", "1h", "-rise", "1000", "-fall", "1000", "-fast-interval", "24h", "-down-interval", "24h"}, ""},
		{[]string{"-interval", "1ms", "-timeout", "1ms", "-fast-interval", "1ms"}, ""},
		{[]string{"-interval", "24h1s"}, "-interval: default interval must be between 1ms and 24h0m0s, got 24h0m1s"},
		{[]string{"-interval", "2562047h"}, "-interval: default interval must be between 1ms and 24h0m0s, got 2562047h0m0s"},
		{[]string{"-interval", "24h", "-timeout", "61m"}, "-timeout: default timeout must be between 1ms and 1h0m0s, got 1h1m0s"},
		{[]string{"-rise", "1001"}, "-rise: default rise must be between 1 and 1000, got 1001"},
		{[]string{"-fall", "100000"}, "-fall: default fall must be between 1 and 1000, got 100000"},
		{[]string{"-fast-interval", "1ms"}, "-fast-interval: default fast interval must be at least the default timeout 1s (0: each target's interval), got 1ms"},
		{[]string{"-down-interval", "48h"}, "-down-interval: default down interval must be at most 24h0m0s, got 48h0m0s"},
		{[]string{"-down-interval", "-1s"}, "-down-interval: default down interval must not be negative (0: each target's interval), got -1s"},
		{[]string{"-interval", "2s", "-timeout", "3s"}, "-timeout: default timeout must be at most the default interval 2s, got 3s"},
		{[]string{"-schedule-tick", "1s", "-schedule-tick-max", "1s", "-schedule-burst", "100000"}, ""},
		{[]string{"-schedule-tick", "0", "-schedule-tick-max", "0", "-schedule-burst", "1"}, ""},
		{[]string{"-schedule-tick", "30ms"}, ""}, // above -schedule-tick-max: a fixed tick
		{[]string{"-schedule-tick", "1001ms"}, "-schedule-tick must be between 0 and 1s, got 1.001s"},
		{[]string{"-schedule-tick-max", "-1ms"}, "-schedule-tick-max must be between 0 and 1s, got -1ms"},
		{[]string{"-schedule-tick-max", "2s"}, "-schedule-tick-max must be between 0 and 1s, got 2s"},
		{[]string{"-schedule-burst", "0"}, "-schedule-burst must be between 1 and 100000, got 0"},
		{[]string{"-schedule-burst", "100001"}, "-schedule-burst must be between 1 and 100000, got 100001"},
		{[]string{"-page-out-after", "0"}, ""},
		{[]string{"-page-out-after", "24h"}, ""},
		{[]string{"-page-out-after", "-1s"}, "-page-out-after must be between 0 and 24h0m0s, got -1s"},
		{[]string{"-page-out-after", "25h"}, "-page-out-after must be between 0 and 24h0m0s, got 25h0m0s"},
	})
}

// flagCase is a command line and what parseFlags says of it.
type flagCase struct {
	args []string
	want string // "" means accepted, else a part of the error
}

// checkFlags checks parseFlags' answer to each case.
func checkFlags(t *testing.T, cases []flagCase) {
	t.Helper()
	for _, tt := range cases {
		var stderr bytes.Buffer
		_, err := parseFlags(tt.args, &stderr)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v, want accepted", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}
