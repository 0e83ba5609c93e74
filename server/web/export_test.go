package web

import "github.com/pulsehealth/pulse/checker"

// RowForTest is the status page's row of st, with no recent results.
func RowForTest(st checker.Status) any { return toRow(st, nil) }
