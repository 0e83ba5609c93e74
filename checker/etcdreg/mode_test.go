package etcdreg_test

import (
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// A mode set on one replica is stored in etcd with the spec: both replicas
// show it, the target leaves both replicas' Healthy, only its owner still
// probes it, and a replica started afterwards loads it.
func TestModeIsShared(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "r1", b)
	r2 := startReplica(t, etcd.Endpoint, "r2", b)
	s := target("web-1")
	s.InitialState = checker.StateHealthy
	if _, _, err := r1.c.Add(s); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web-1 healthy on r2", func() bool { return state(r2, "web-1") == checker.StateHealthy })
	sts, err := r2.c.SetMode(checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Reason: "deploy 4711", Until: time.Now().Add(time.Hour)})
	if err != nil || len(sts) != 1 || sts[0].Spec.Admin().Mode != checker.ModeDraining {
		t.Fatalf("SetMode on r2: %+v, %v", sts, err)
	}
	for _, r := range []*replica{r1, r2} {
		eventually(t, "web-1 held out on "+r.id, func() bool {
			st, err := r.c.Status("web-1")
			return err == nil && st.Spec.Admin().Mode == checker.ModeDraining && st.Spec.Admin().Reason == "deploy 4711" && !st.Routable
		})
		if h := r.c.Healthy(""); len(h) != 0 {
			t.Errorf("Healthy on %s = %v", r.id, h)
		}
	}
	r3 := startReplica(t, etcd.Endpoint, "r3", b)
	if st, err := r3.c.Status("web-1"); err != nil || st.Spec.Admin().Mode != checker.ModeDraining || st.Routable {
		t.Errorf("loaded by r3: %+v, %v", st, err)
	}
}
