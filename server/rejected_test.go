package server_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

// faultyStore is the real bolt store whose writes fail while broken is set.
type faultyStore struct {
	*boltstore.Store
	broken atomic.Bool
}

var errDiskFull = errors.New("no space left on device")

func (f *faultyStore) PutSpec(s checker.Spec) error {
	if f.broken.Load() {
		return errDiskFull
	}
	return f.Store.PutSpec(s)
}

func (f *faultyStore) PutSpecs(specs []checker.Spec) error {
	if f.broken.Load() {
		return errDiskFull
	}
	return f.Store.PutSpecs(specs)
}

func (f *faultyStore) DeleteTarget(name string) error {
	if f.broken.Load() {
		return errDiskFull
	}
	return f.Store.DeleteTarget(name)
}

func (f *faultyStore) PutGroupPolicy(g string, p checker.GroupPolicy) error {
	if f.broken.Load() {
		return errDiskFull
	}
	return f.Store.PutGroupPolicy(g, p)
}

// storeDump is everything the store holds.
type storeDump struct {
	Targets  []checker.StoredTarget
	Rev      uint64
	Policies map[string]checker.GroupPolicy
}

func dumpStore(t *testing.T, s *boltstore.Store) storeDump {
	t.Helper()
	targets, rev, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	policies, err := s.LoadGroupPolicies()
	if err != nil {
		t.Fatal(err)
	}
	return storeDump{targets, rev, policies}
}

// TestARejectedCallChangesNothing sends every RPC that writes, in every
// class of rejection (validation, egress, limits, auth, a failing store,
// an unknown name, a precondition), and checks after each that the store,
// the registry and the revision are as before; then that a watcher that
// followed it all sees, as its next event, the first accepted change.
func TestARejectedCallChangesNothing(t *testing.T) {
	bolt, err := boltstore.Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	store := &faultyStore{Store: bolt}
	egress, err := probe.ParseEgressPolicy(nil, nil) // the default deny list
	if err != nil {
		t.Fatal(err)
	}
	factory := probe.NewFactoryWith(probe.FactoryOptions{Egress: egress})
	defer factory.Close()
	tokens, err := server.ParseTokens(strings.NewReader(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := checker.New(checker.Config{
		Clock:              fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
		Store:              store,
		NewProber:          func(s probe.Spec) (checker.Prober, error) { return factory.New(s) },
		Defaults:           checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
		MaxTargets:         4,
		MaxTargetsPerGroup: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{Tokens: tokens, Logger: nilLogger()})
	client := pb.NewHealthCheckerClient(serveBufconn(t, gs, c))
	ctx := t.Context()
	write := withToken(ctx, "writer-token-0123456789")
	read := withToken(ctx, "reader-token-0123456789")

	tcp := func(name, group string) *pb.Target {
		return &pb.Target{Name: name, Group: group, Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}, Interval: durationpb.New(time.Minute)}
	}
	passive := tcp("c", "g2")
	passive.PassiveOutcomes = true
	for _, tg := range []*pb.Target{tcp("a", "g1"), tcp("b", "g1"), passive} {
		if _, err := client.AddTarget(write, &pb.AddTargetRequest{Target: tg}); err != nil {
			t.Fatal(err)
		}
	}
	half := 0.5
	if _, err := client.SetGroupPolicy(write, &pb.SetGroupPolicyRequest{Group: "g1", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: &half}}); err != nil {
		t.Fatal(err)
	}
	w, err := client.WatchTransitions(read, &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetSnapshotComplete() != nil {
			break
		}
	}

	with := func(tg *pb.Target, edit func(*pb.Target)) *pb.Target {
		edit(tg)
		return tg
	}
	add := func(ctx context.Context, tg *pb.Target) func() error {
		return func() error { _, err := client.AddTarget(ctx, &pb.AddTargetRequest{Target: tg}); return err }
	}
	// addMany fails with the first refused target's code, as AddTarget
	// would have failed with it.
	addMany := func(ctx context.Context, tgs ...*pb.Target) func() error {
		return func() error {
			resp, err := client.AddTargets(ctx, &pb.AddTargetsRequest{Targets: tgs})
			if err != nil {
				return err
			}
			for _, r := range resp.GetResults() {
				if r.GetCode() != "" {
					var c codes.Code
					if err := c.UnmarshalJSON([]byte(`"` + r.GetCode() + `"`)); err != nil {
						return err
					}
					return status.Error(c, r.GetError())
				}
			}
			return nil
		}
	}
	tooMany := make([]*pb.Target, checker.MaxAddMany+1)
	for i := range tooMany {
		tooMany[i] = tcp(fmt.Sprintf("n%d", i), "")
	}
	remove := func(ctx context.Context, name string) func() error {
		return func() error { _, err := client.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: name}); return err }
	}
	policy := func(ctx context.Context, group string, f float64) func() error {
		return func() error {
			_, err := client.SetGroupPolicy(ctx, &pb.SetGroupPolicyRequest{Group: group, Policy: &pb.GroupPolicy{MaxUnhealthyFraction: &f}})
			return err
		}
	}
	outcome := func(ctx context.Context, req *pb.ReportOutcomeRequest) func() error {
		return func() error { _, err := client.ReportOutcome(ctx, req); return err }
	}
	update := func(ctx context.Context, tg *pb.Target, paths ...string) func() error {
		return func() error {
			_, err := client.UpdateTarget(ctx, &pb.UpdateTargetRequest{Target: tg, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
			return err
		}
	}
	probeNow := func(ctx context.Context, names ...string) func() error {
		return func() error { _, err := client.ProbeNow(ctx, &pb.ProbeNowRequest{Names: names}); return err }
	}
	denied := func(name string) *pb.Target {
		return &pb.Target{Name: name, Group: "g2", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://169.254.169.254/latest"}}}
	}
	cases := []struct {
		class, name string
		call        func() error
		code        codes.Code
		broken      bool // with the store failing
	}{
		{"validation", "AddTarget rise -1", add(write, with(tcp("d", "g2"), func(tg *pb.Target) { tg.Rise = proto.Int32(-1) })), codes.InvalidArgument, false},
		{"validation", "AddTarget update with timeout past interval", add(write, with(tcp("a", "g1"), func(tg *pb.Target) { tg.Timeout = durationpb.New(time.Hour) })), codes.InvalidArgument, false},
		{"validation", "AddTarget without a probe", add(write, &pb.Target{Name: "d"}), codes.InvalidArgument, false},
		{"validation", "AddTarget negative interval", add(write, with(tcp("a", "g1"), func(tg *pb.Target) { tg.Interval = durationpb.New(-time.Second) })), codes.InvalidArgument, false},
		{"validation", "RemoveTarget bad name", remove(write, "../a"), codes.InvalidArgument, false},
		{"validation", "AddTarget bad body regex", add(write, with(tcp("a", "g1"), func(tg *pb.Target) {
			tg.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:9/", BodyRegex: "(ready"}}
		})), codes.InvalidArgument, false},
		{"validation", "AddTarget unreadable CA file", add(write, with(tcp("a", "g1"), func(tg *pb.Target) {
			tg.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: "https://127.0.0.1:9/", Tls: &pb.TlsOptions{CaFile: "/nonexistent/ca.pem"}}}
		})), codes.InvalidArgument, false},
		{"validation", "AddTarget unknown TLS version", add(write, with(tcp("a", "g1"), func(tg *pb.Target) {
			tg.Probe = &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: "127.0.0.1:9", TlsOptions: &pb.TlsOptions{MinVersion: "1.4"}}}
		})), codes.InvalidArgument, false},
		{"validation", "AddTarget empty expect step", add(write, with(tcp("a", "g1"), func(tg *pb.Target) {
			tg.GetTcp().Steps = []*pb.TcpStep{{Send: "PING\r\n"}, {}}
		})), codes.InvalidArgument, false},
		{"validation", "AddTarget DNS probe without a server", add(write, with(tcp("d", "g2"), func(tg *pb.Target) {
			tg.Probe = &pb.Target_Dns{Dns: &pb.DnsProbe{Name: "api.internal"}}
		})), codes.InvalidArgument, false},
		{"validation", "SetGroupPolicy fraction 2", policy(write, "g1", 2), codes.InvalidArgument, false},
		{"validation", "SetGroupPolicy fraction NaN", policy(write, "g1", math.NaN()), codes.InvalidArgument, false},
		{"validation", "SetGroupPolicy fraction -Inf", policy(write, "g1", math.Inf(-1)), codes.InvalidArgument, false},
		{"validation", "ReportOutcome negative latency", outcome(write, &pb.ReportOutcomeRequest{Target: "c", Latency: durationpb.New(-time.Second)}), codes.InvalidArgument, false},
		{"validation", "UpdateTarget unknown path", update(write, tcp("a", ""), "intervl"), codes.InvalidArgument, false},
		{"validation", "UpdateTarget name", update(write, tcp("a", ""), "name"), codes.InvalidArgument, false},
		{"validation", "UpdateTarget timeout past interval", update(write, with(tcp("a", ""), func(tg *pb.Target) { tg.Timeout = durationpb.New(time.Hour) }), "timeout"), codes.InvalidArgument, false},
		{"validation", "UpdateTarget clearing the probe", update(write, &pb.Target{Name: "a"}, "tcp"), codes.InvalidArgument, false},
		{"validation", "ProbeNow bad name", probeNow(write, "a b"), codes.InvalidArgument, false},
		{"egress", "UpdateTarget moving a target to a denied address", update(write, denied("c"), "http"), codes.InvalidArgument, false},
		{"limits", "UpdateTarget moving a target into a full group", update(write, tcp("c", "g1"), "group"), codes.ResourceExhausted, false},
		{"auth", "UpdateTarget with a read token", update(read, tcp("a", "g2"), "group"), codes.PermissionDenied, false},
		{"auth", "ProbeNow with a read token", probeNow(read), codes.PermissionDenied, false},
		{"store", "UpdateTarget", update(write, with(tcp("a", "g1"), func(tg *pb.Target) { tg.Rise = proto.Int32(5) }), "rise"), codes.Unavailable, true},
		{"not found", "UpdateTarget unknown", update(write, tcp("nobody", ""), "group"), codes.NotFound, false},
		{"not found", "ProbeNow unknown", probeNow(write, "a", "nobody"), codes.NotFound, false},
		{"egress", "AddTarget of a denied address", add(write, denied("meta")), codes.InvalidArgument, false},
		{"egress", "AddTarget moving a target to a denied address", add(write, denied("c")), codes.InvalidArgument, false},
		{"egress", "AddTarget of a DNS probe asking a denied server", add(write, &pb.Target{Name: "d", Group: "g2", Probe: &pb.Target_Dns{Dns: &pb.DnsProbe{Name: "api.internal", Server: "169.254.169.254:53"}}}), codes.InvalidArgument, false},
		{"limits", "AddTarget of a new target into a full group", add(write, tcp("d", "g1")), codes.ResourceExhausted, false},
		{"limits", "AddTarget moving a target into a full group", add(write, tcp("c", "g1")), codes.ResourceExhausted, false},
		{"auth", "AddTarget without a token", add(ctx, tcp("a", "g2")), codes.Unauthenticated, false},
		{"auth", "AddTarget with a read token", add(read, tcp("a", "g2")), codes.PermissionDenied, false},
		{"auth", "RemoveTarget with a read token", remove(read, "a"), codes.PermissionDenied, false},
		{"auth", "RemoveTarget with an unknown token", remove(withToken(ctx, "not-a-known-token-at-all"), "a"), codes.Unauthenticated, false},
		{"auth", "SetGroupPolicy with a read token", policy(read, "g1", 1), codes.PermissionDenied, false},
		{"auth", "ReportOutcome with a read token", outcome(read, &pb.ReportOutcomeRequest{Target: "c", Ok: true}), codes.PermissionDenied, false},
		{"store", "AddTarget new", add(write, with(tcp("a", "g1"), func(tg *pb.Target) { tg.Name = "d"; tg.Group = "g2" })), codes.Unavailable, true},
		{"store", "AddTarget update", add(write, with(tcp("a", "g1"), func(tg *pb.Target) { tg.Rise = proto.Int32(5) })), codes.Unavailable, true},
		{"store", "RemoveTarget", remove(write, "a"), codes.Unavailable, true},
		{"store", "SetGroupPolicy", policy(write, "g1", 0.9), codes.Unavailable, true},
		{"validation", "AddTargets of one target too many", addMany(write, tooMany...), codes.InvalidArgument, false},
		{"validation", "AddTargets rise -1", addMany(write, with(tcp("d", "g2"), func(tg *pb.Target) { tg.Rise = proto.Int32(-1) })), codes.InvalidArgument, false},
		{"validation", "AddTargets naming a target twice, the first refused", addMany(write, denied("d"), tcp("d", "g2")), codes.InvalidArgument, false},
		{"egress", "AddTargets of a denied address", addMany(write, denied("meta")), codes.InvalidArgument, false},
		{"limits", "AddTargets of new targets into a full group", addMany(write, tcp("d", "g1"), tcp("e", "g1")), codes.ResourceExhausted, false},
		{"auth", "AddTargets with a read token", addMany(read, tcp("d", "g2")), codes.PermissionDenied, false},
		{"store", "AddTargets new and updated", addMany(write, tcp("d", "g2"), with(tcp("a", "g1"), func(tg *pb.Target) { tg.Rise = proto.Int32(5) })), codes.Unavailable, true},
		{"not found", "RemoveTarget unknown (removed: false)", remove(write, "nobody"), codes.OK, false},
		{"not found", "ReportOutcome unknown", outcome(write, &pb.ReportOutcomeRequest{Target: "nobody", Ok: true}), codes.NotFound, false},
		{"precondition", "ReportOutcome with passive outcomes off", outcome(write, &pb.ReportOutcomeRequest{Target: "a", Ok: true}), codes.FailedPrecondition, false},
	}
	list := func() *pb.ListTargetsResponse {
		t.Helper()
		l, err := client.ListTargets(read, &pb.ListTargetsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range cases {
		beforeStore, beforeList := dumpStore(t, bolt), list()
		store.broken.Store(tc.broken)
		err := tc.call()
		store.broken.Store(false)
		if got := status.Code(err); got != tc.code {
			t.Errorf("%s: %s: %v, want %v", tc.class, tc.name, err, tc.code)
		}
		if diff := cmp.Diff(beforeStore, dumpStore(t, bolt)); diff != "" {
			t.Errorf("%s: %s changed the store (-before +after):\n%s", tc.class, tc.name, diff)
		}
		after := list()
		opts := []cmp.Option{protocmp.Transform()}
		if tc.broken {
			// The registry does not change, but the operator learns of the
			// refused write: the registry error names it until a write
			// goes through again.
			if got := after.GetChecker().GetRegistryError(); !strings.Contains(got, "no space left on device") {
				t.Errorf("%s: %s: registry error %q, want the store's", tc.class, tc.name, got)
			}
			opts = append(opts, protocmp.IgnoreFields(&pb.CheckerStatus{}, "registry_error"))
		}
		if diff := cmp.Diff(beforeList, after, opts...); diff != "" {
			t.Errorf("%s: %s changed the registry or its revision (-before +after):\n%s", tc.class, tc.name, diff)
		}
	}

	// Nothing reached the stream: its next event is the next accepted call.
	if _, err := client.AddTarget(write, &pb.AddTargetRequest{Target: tcp("b", "g2")}); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := ev.GetUpdated().GetSpec().GetName(); got != "b" {
		t.Errorf("the watcher's next event after the rejected calls is %v, want b's update", ev)
	}
}
