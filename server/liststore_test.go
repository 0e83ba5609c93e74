package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// stateFailingStore stores specs but cannot store states, as a full disk
// would.
type stateFailingStore struct{}

func (stateFailingStore) Load() ([]checker.StoredTarget, uint64, error) { return nil, 0, nil }
func (stateFailingStore) PutSpec(checker.Spec) error                    { return nil }
func (stateFailingStore) PutSpecs([]checker.Spec) error                 { return nil }
func (stateFailingStore) LoadGroupPolicies() (map[string]checker.GroupPolicy, error) {
	return nil, nil
}
func (stateFailingStore) PutGroupPolicy(string, checker.GroupPolicy) error { return nil }
func (stateFailingStore) DeleteTarget(string) error                        { return nil }
func (stateFailingStore) CommitStates([]checker.StoredState, []string, uint64) error {
	return errors.New("no space left on device")
}

// While the store cannot write, ListTargets answers UNAVAILABLE with the
// store's error within its bound, instead of waiting for a revision that
// is never stored.
func TestListTargetsDoesNotHangOnAFailingStore(t *testing.T) {
	e := start(t, checker.Config{Store: stateFailingStore{}})
	if _, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "web-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "web-1:80"}}}}); err != nil {
		t.Fatal(err)
	}
	e.c.RunRound(t.Context()) // a transition whose state cannot be stored
	start := time.Now()
	_, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "the store cannot write: ") || !strings.Contains(st.Message(), "no space left on device") {
		t.Fatalf("ListTargets with a failing store: %v, want UNAVAILABLE naming the store's error", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("ListTargets answered after %v", took)
	}
}
