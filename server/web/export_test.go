package web

import "github.com/pulsehealth/pulse/checker"

// RowForTest is the status page's row of st, with no recent results.
func RowForTest(st checker.Status) any { return toRow(st, nil) }

// SummarizeForTest counts list by group as /api/targets does.
func SummarizeForTest(list []checker.Status) any { return summarize(list) }

// StateFilterForTest reports whether /api/targets?state=name keeps st, and
// whether name is a state it takes.
func StateFilterForTest(name string, st checker.Status) (keep, known bool) {
	f, ok := stateFilters[name]
	if !ok {
		return false, false
	}
	return f(st), true
}
