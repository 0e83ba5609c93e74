package checker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// BenchmarkTransitionWithWatchers measures one round that flips one target
// (probe, apply, record, publish) with different watchers attached. A
// watcher that never reads must cost the checker about what a reading one
// does: compare the sub-benchmarks' ns/op against "none" from the same run.
func BenchmarkTransitionWithWatchers(b *testing.B) {
	for _, tc := range []struct {
		name          string
		stuck, filter int // watchers that never read; watchers of another group
		reader        bool
	}{
		{name: "none"},
		{name: "reader", reader: true},
		{name: "reader+1stuck", reader: true, stuck: 1},
		{name: "reader+1000stuck", reader: true, stuck: 1000},
		{name: "reader+1000filtered", reader: true, filter: 1000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			t := &testing.T{}
			e := newEnv(t, checker.Config{HistorySize: 10000, Defaults: checker.Defaults{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
			defer e.c.Close()
			e.add(t, spec("flappy"))
			for i := range tc.stuck {
				if _, err := e.c.Watch(checker.Filter{}, e.c.Revision()); err != nil {
					b.Fatal(i, err)
				}
			}
			for i := range tc.filter {
				if _, err := e.c.Watch(checker.Filter{Group: fmt.Sprint("other-", i)}, e.c.Revision()); err != nil {
					b.Fatal(err)
				}
			}
			var reader *checker.Watcher
			if tc.reader {
				reader, _ = e.c.Watch(checker.Filter{}, e.c.Revision())
			}
			b.ResetTimer()
			for i := range b.N {
				e.probes.set("flappy", map[bool]outcome{true: pass, false: fail}[i%2 == 0])
				e.c.RunRound(b.Context())
				if reader != nil && i%1000 == 999 {
					if _, err := reader.Next(1 << 20); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
