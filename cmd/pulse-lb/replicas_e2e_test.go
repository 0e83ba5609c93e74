package main

import (
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// TestRemoteReplicas follows two pulsed replicas sharing one registry on a
// real etcd (--pulse addr1,addr2): when the replica pulse-lb follows is
// killed, it fails over to the other and resumes its stream there (no
// re-list), and health keeps flowing once the survivor has taken the dead
// replica's targets over.
func TestRemoteReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed and etcd")
	}
	etcd := etcdtest.Start(t, 0)
	bin := buildPulsed(t)
	flags := []string{"-registry", "etcd", "-etcd-endpoints", etcd.Endpoint, "-etcd-prefix", "/pulse-lb-test/", "-etcd-lease-ttl", "2s"}
	p1 := startPulsed(t, bin, append(flags, "-replica-id", "r1")...)
	p2 := startPulsed(t, bin, append(flags, "-replica-id", "r2")...)

	bs := []*testBackend{newTestBackend(t, "web-1"), newTestBackend(t, "web-2")}
	names := []string{bs[0].addr, bs[1].addr}
	lb := startLB(t, append(e2eFlags(), "--backends", backendList(bs), "--pulse", p1.Addr+","+p2.Addr, "--group", "edge")...)
	lb.logs.waitFor(t, 0, `msg="registered backends with pulsed"`)
	lb.logs.waitFor(t, 0, `msg="pulse snapshot applied"`)
	for _, name := range names { // healthy in the snapshot, or after it
		lb.logs.waitHealthy(t, 0, name)
	}
	load := startLoad(lb)
	load.waitCount(t, time.Time{}, 10)
	checkOnly(t, load.stop(t), bs[0].name, bs[1].name)

	mark := lb.logs.mark()
	p1.kill(t) // the replica listed first, which pulse-lb follows
	lb.logs.waitFor(t, mark, `msg="pulse watch down; routing with the last known view"`)
	lb.logs.waitFor(t, mark, `msg="pulse watch resumed"`)
	if line, ok := lb.logs.find(mark, "snapshot"); ok {
		t.Errorf("pulse-lb re-listed instead of resuming on the other replica: %s", line.text)
	}
	// Both backends' health now comes from r2, including those r1 probed.
	streamWorks(t, lb, bs[0], names[0], bs[1])
	streamWorks(t, lb, bs[1], names[1], bs[0])
	_ = p2
}
