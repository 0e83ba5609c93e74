package xds

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
	"github.com/pulsehealth/pulse/checker/probe"
)

// A degraded outlier is sent DEGRADED with its lowered weight and its
// reason in the metadata; an ejected one follows its state; when it ends,
// the endpoint is HEALTHY and unweighted again.
func TestOutlierAsHealthStatusAndWeight(t *testing.T) {
	spec := func(name, addr string) checker.Spec {
		return checker.Spec{Name: name, Group: "edge", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: addr}}}
	}
	v := newView()
	v.reset([]checker.Status{
		{Spec: spec("a", "127.0.0.1:81"), State: checker.StateHealthy},
		{Spec: spec("b", "127.0.0.1:82"), State: checker.StateHealthy},
		{Spec: spec("c", "127.0.0.1:83"), State: checker.StateUnhealthy,
			Outlier: &outlier.State{Ejected: true, Reason: "failed 80% of 50 outcomes", Ejections: 1}},
	}, 10)
	deg := &outlier.State{Reason: "p50 38ms vs group 4ms"}
	v.apply([]checker.Event{{Kind: checker.EventOutlierStarted, Revision: 11, Policy: checker.PolicyChange{Target: "b", Group: "edge", Outlier: deg}}})

	type row struct {
		health corev3.HealthStatus
		weight uint32
		md     string
	}
	check := func(want []row) {
		t.Helper()
		eps, _ := v.endpoints("edge")
		lbs := loadAssignment("edge", eps, time.Now()).GetEndpoints()[0].GetLbEndpoints()
		for i, w := range want {
			lb := lbs[i]
			md := lb.GetMetadata().GetFilterMetadata()[MetadataKey].GetFields()["outlier"].GetStringValue()
			got := row{lb.GetHealthStatus(), lb.GetLoadBalancingWeight().GetValue(), md}
			if got != w {
				t.Errorf("endpoint %d: %+v, want %+v", i, got, w)
			}
		}
	}
	check([]row{
		{corev3.HealthStatus_HEALTHY, 100, ""},
		{corev3.HealthStatus_DEGRADED, outlier.Weight, "b degraded: p50 38ms vs group 4ms"},
		{corev3.HealthStatus_UNHEALTHY, 100, "c ejected: failed 80% of 50 outcomes"},
	})
	v.apply([]checker.Event{{Kind: checker.EventOutlierEnded, Revision: 12, Policy: checker.PolicyChange{Target: "b", Group: "edge", Outlier: deg}}})
	if !v.dirty["edge"] {
		t.Error("the end of an outlier left its group clean")
	}
	check([]row{
		{corev3.HealthStatus_HEALTHY, 0, ""},
		{corev3.HealthStatus_HEALTHY, 0, ""},
		{corev3.HealthStatus_UNHEALTHY, 0, "c ejected: failed 80% of 50 outcomes"},
	})
}
