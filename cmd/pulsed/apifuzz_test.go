package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TestAPIFuzz drives the real pulsed with random, boundary and malformed
// requests for every method and field of pulse.v1.HealthChecker,
// interleaved with valid ones and with restarts on the same data dir, and
// checks after every step that:
//   - the call was answered within a second, and Healthy within 100ms
//     (in 99% of steps: a loaded machine may miss it; never over a second);
//   - a rejected write changed no spec and no group policy;
//   - a restart is ready within 5s and has every spec it had before;
//   - the log has no panic.
//
// It runs for PULSE_API_FUZZ_TIME (20s by default; `make fuzz-api` runs it
// longer) from the seed PULSE_API_FUZZ_SEED (random by default; the test
// logs it to replay a failure). Bounds scale by 3 under the race detector.
// Probes may only reach 127.0.0.0/8 and ::1: no generated address leaves
// the machine.
func TestAPIFuzz(t *testing.T) {
	run := 20 * time.Second
	if v := os.Getenv("PULSE_API_FUZZ_TIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PULSE_API_FUZZ_TIME: %v", err)
		}
		run = d
	}
	seed := rand.Uint64()
	if v := os.Getenv("PULSE_API_FUZZ_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PULSE_API_FUZZ_SEED: %v", err)
		}
		seed = s
	}
	t.Logf("seed %d (replay with PULSE_API_FUZZ_SEED=%d)", seed, seed)
	scale := time.Duration(1)
	if raceEnabled {
		scale = 3
	}

	bin := buildPulsed(t)
	dir := t.TempDir()
	args := []string{"-data-dir", dir, "-allow-targets", "127.0.0.0/8,::1/128", "-rate-limit", "0", "-max-targets", "64", "-log-level", "debug"}
	f := &apiFuzzer{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), scale: scale}
	f.start(bin, args)

	deadline := time.Now().Add(run)
	nextRestart := time.Now().Add(run / 4)
	steps := map[string]int{}
	for time.Now().Before(deadline) && !t.Failed() {
		if time.Now().After(nextRestart) {
			f.restart(bin, args)
			steps["restart"]++
			nextRestart = time.Now().Add(run / 4)
			continue
		}
		steps[f.step()]++
		f.healthyIsQuick()
	}
	f.checkLog()
	t.Logf("steps: %v; Healthy over %v in %d of %d calls", steps, 100*time.Millisecond*scale, f.healthySlow, f.healthyCalls)
	f.p.stop(t)
}

type apiFuzzer struct {
	t     *testing.T
	rng   *rand.Rand
	scale time.Duration
	p     *pulsed

	healthyCalls, healthySlow int // calls of healthyIsQuick, and those over its bound
	http                      string
	conn                      *grpc.ClientConn
	api                       pb.HealthCheckerClient
}

var writeMethods = map[string]bool{"AddTarget": true, "RemoveTarget": true, "SetGroupPolicy": true, "ReportOutcome": true, "UpdateTarget": true, "ProbeNow": true, "SetMode": true}

func (f *apiFuzzer) start(bin string, args []string) {
	t := f.t
	t.Helper()
	begun := time.Now()
	f.p = startPulsed(t, bin, args...)
	m := regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(f.p.Logs())
	if m == nil {
		t.Fatalf("no http address in the log:\n%s", f.p.Logs())
	}
	f.http = m[1]
	for {
		resp, err := http.Get("http://" + f.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(begun) > 5*time.Second*f.scale {
			t.Fatalf("pulsed not ready %v after it started", time.Since(begun))
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient(f.p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.conn, f.api = conn, pb.NewHealthCheckerClient(conn)
	// Connect now: the first call's dial is not what the bounds measure.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second*f.scale)
	defer cancel()
	if _, err := f.api.Healthy(ctx, &pb.HealthyRequest{}); err != nil {
		t.Fatalf("Healthy after start: %v", err)
	}
}

// restart stops pulsed and starts it again on the same data dir: every
// spec and group policy it had is there again.
func (f *apiFuzzer) restart(bin string, args []string) {
	before := f.registry()
	f.checkLog()
	f.conn.Close()
	f.p.stop(f.t)
	f.start(bin, args)
	if diff := cmp.Diff(before, f.registry(), protocmp.Transform()); diff != "" {
		f.t.Errorf("a restart changed the registry (-before +after):\n%s", diff)
	}
}

func (f *apiFuzzer) checkLog() {
	logs := f.p.Logs()
	for _, bad := range []string{"panic:", "handler panic", "goroutine ", "DATA RACE"} {
		if strings.Contains(logs, bad) {
			f.t.Fatalf("pulsed's log has %q:\n%s", bad, logs)
		}
	}
}

// registry is what a rejected call must not change: every spec (with its
// quarantine) and every group policy.
type registry struct {
	Targets  []*pb.Target
	Quarant  map[string]string
	Policies map[string]*pb.GroupPolicy
	Modes    map[string]string // a target's mode, reason, until and removal time
}

func (f *apiFuzzer) registry() registry {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 10*time.Second*f.scale)
	defer cancel()
	l, err := f.api.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		f.t.Fatalf("ListTargets: %v", err)
	}
	r := registry{Quarant: map[string]string{}, Policies: map[string]*pb.GroupPolicy{}, Modes: map[string]string{}}
	for _, st := range l.GetTargets() {
		if st.GetRemoveTime() != nil || st.GetModeUntil() != nil {
			// A drain or a mode with an until changes by itself when its
			// time comes, whatever call is made meanwhile.
			continue
		}
		r.Targets = append(r.Targets, st.GetSpec())
		r.Modes[st.GetSpec().GetName()] = fmt.Sprint(st.GetMode(), st.GetModeReason(), st.GetModeSince().AsTime(), st.GetModeUntil().AsTime(), st.GetRemoveTime().AsTime())
		if q := st.GetQuarantined(); q != "" {
			r.Quarant[st.GetSpec().GetName()] = q
		}
	}
	for _, g := range l.GetGroups() {
		if p := g.GetPolicy(); p != nil && p.MaxUnhealthyFraction != nil {
			r.Policies[g.GetGroup()] = p
		}
	}
	return r
}

// healthyIsQuick checks that Healthy answers within 100ms (times the
// scale). A loaded test machine can miss that now and then, which says
// nothing of pulsed; a wedge cannot: a miss is retried with a second, and
// more than 1% of steps (and at least 3) missing the bound fails the test.
func (f *apiFuzzer) healthyIsQuick() {
	f.healthyCalls++
	ctx, cancel := context.WithTimeout(f.t.Context(), 100*time.Millisecond*f.scale)
	defer cancel()
	if _, err := f.api.Healthy(ctx, &pb.HealthyRequest{}); err == nil {
		return
	}
	f.healthySlow++
	ctx, cancel = context.WithTimeout(f.t.Context(), time.Second*f.scale)
	defer cancel()
	if _, err := f.api.Healthy(ctx, &pb.HealthyRequest{}); err != nil {
		f.t.Fatalf("Healthy not answered within %v: %v", time.Second*f.scale, err)
	}
	if f.healthySlow >= 3 && f.healthySlow*100 > f.healthyCalls {
		f.t.Fatalf("Healthy took over %v in %d of %d calls", 100*time.Millisecond*f.scale, f.healthySlow, f.healthyCalls)
	}
}

// step sends one request and checks what it must not have done; it returns
// what kind of step it was.
func (f *apiFuzzer) step() string {
	t := f.t
	svc := pb.File_pulse_v1_pulse_proto.Services().ByName("HealthChecker")
	methods := svc.Methods()
	md := methods.Get(f.rng.IntN(methods.Len()))
	name := string(md.Name())
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		t.Fatal(err)
	}
	req := mt.New()
	kind := "random"
	switch r := f.rng.IntN(100); {
	case r < 40:
		kind = "valid"
		f.valid(name, req)
	case r < 75:
		kind = "mutated"
		f.valid(name, req)
		f.mutate(req.Interface(), 0)
	case r < 97:
		f.fill(req, 0)
	default:
		kind = "oversized"
		f.fill(req, 0)
		if fd := req.Descriptor().Fields().ByName("name"); fd != nil {
			req.Set(fd, protoreflect.ValueOfString(strings.Repeat("n", 2<<20)))
		} else if fd := req.Descriptor().Fields().ByName("group"); fd != nil {
			req.Set(fd, protoreflect.ValueOfString(strings.Repeat("g", 2<<20)))
		}
	}
	var before registry
	if writeMethods[name] {
		before = f.registry()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second*f.scale)
	defer cancel()
	full := "/" + string(svc.FullName()) + "/" + name
	if md.IsStreamingServer() {
		err = f.watch(ctx, full, req.Interface())
	} else {
		out, oerr := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		if oerr != nil {
			t.Fatal(oerr)
		}
		err = f.conn.Invoke(ctx, full, req.Interface(), out.New().Interface())
	}
	code := status.Code(err)
	if code == codes.DeadlineExceeded || code == codes.Unknown || code == codes.Internal {
		t.Fatalf("%s %s: %v (request %v)", kind, name, err, shorten(req.Interface()))
	}
	if code != codes.OK && writeMethods[name] {
		if diff := cmp.Diff(before, f.registry(), protocmp.Transform()); diff != "" {
			t.Fatalf("rejected %s (%v) changed the registry (-before +after):\n%s\nrequest: %v", name, err, diff, shorten(req.Interface()))
		}
	}
	return kind + " " + code.String()
}

// watch opens a stream, reads until its snapshot is complete (or it ends),
// and cancels it.
func (f *apiFuzzer) watch(ctx context.Context, method string, req proto.Message) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := f.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		var ev pb.WatchTransitionsResponse
		if err := s.RecvMsg(&ev); err != nil {
			return err
		}
		if ev.GetSnapshotComplete() != nil || ev.GetTransition() != nil || ev.GetProgress() != nil {
			return nil
		}
	}
}

var (
	fuzzNames  = []string{"web-1", "web-2", "db-1", "api.v2", "a", "z:9"}
	fuzzGroups = []string{"", "edge", "core"}
)

// valid fills req as a well-formed request of the method.
func (f *apiFuzzer) valid(method string, req protoreflect.Message) {
	pick := func(s []string) string { return s[f.rng.IntN(len(s))] }
	var m proto.Message
	target := func() *pb.Target {
		tg := &pb.Target{Name: pick(fuzzNames), Group: pick(fuzzGroups),
			Interval: durationpb.New([]time.Duration{time.Second, 2 * time.Second, time.Minute}[f.rng.IntN(3)])}
		switch f.rng.IntN(3) {
		case 0:
			tg.Probe = &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}
		case 1:
			tg.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:9/healthz", Headers: map[string]string{"Authorization": "Bearer fuzz-secret"}}}
		default:
			tg.Probe = &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: "127.0.0.1:9", Service: "svc"}}
		}
		if f.rng.IntN(2) == 0 {
			tg.PassiveOutcomes = true
		}
		return tg
	}
	switch method {
	case "AddTarget":
		m = &pb.AddTargetRequest{Target: target()}
	case "AddTargets":
		at := &pb.AddTargetsRequest{}
		for range 1 + f.rng.IntN(3) {
			at.Targets = append(at.Targets, target())
		}
		m = at
	case "Reload":
		m = &pb.ReloadRequest{}
	case "RemoveTarget":
		rm := &pb.RemoveTargetRequest{Name: pick(fuzzNames)}
		if f.rng.IntN(4) == 0 {
			rm.DrainFor = durationpb.New(time.Hour) // past the run: nothing expires meanwhile
		}
		m = rm
	case "SetMode":
		sm := &pb.SetModeRequest{Mode: pb.Mode(1 + f.rng.IntN(3)), Reason: pick([]string{"", "deploy 4711"})}
		if f.rng.IntN(2) == 0 {
			sm.Target = pick(fuzzNames)
		} else {
			sm.Group = pick(fuzzGroups[1:])
		}
		m = sm
	case "State":
		m = &pb.StateRequest{Name: pick(fuzzNames)}
	case "Healthy":
		m = &pb.HealthyRequest{Group: pick(fuzzGroups)}
	case "ListTargets":
		m = &pb.ListTargetsRequest{Group: pick(fuzzGroups)}
	case "SetGroupPolicy":
		frac := []float64{0.25, 0.5, 1}[f.rng.IntN(3)]
		m = &pb.SetGroupPolicyRequest{Group: pick(fuzzGroups[1:]), Policy: &pb.GroupPolicy{MaxUnhealthyFraction: &frac}}
	case "ReportOutcome":
		m = &pb.ReportOutcomeRequest{Target: pick(fuzzNames), Ok: f.rng.IntN(2) == 0, Latency: durationpb.New(time.Duration(f.rng.IntN(1000)) * time.Millisecond)}
	case "WatchTransitions":
		m = &pb.WatchTransitionsRequest{Group: pick(fuzzGroups)}
	case "UpdateTarget":
		paths := [][]string{{"group"}, {"interval"}, {"tcp.address"}, {"rise", "fall"}}[f.rng.IntN(4)]
		m = &pb.UpdateTargetRequest{
			Target: &pb.Target{Name: pick(fuzzNames), Group: pick(fuzzGroups), Interval: durationpb.New(time.Minute),
				Rise: proto.Int32(2), Fall: proto.Int32(3), Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: paths},
		}
	case "ProbeNow":
		m = &pb.ProbeNowRequest{Group: pick(fuzzGroups)}
	case "History":
		h := &pb.HistoryRequest{Window: durationpb.New([]time.Duration{time.Hour, 24 * time.Hour, 30 * 24 * time.Hour}[f.rng.IntN(3)])}
		if f.rng.IntN(2) == 0 {
			h.Target = pick(fuzzNames)
		} else {
			h.Group = pick(fuzzGroups[1:])
		}
		m = h
	case "ListDiscovery":
		m = &pb.ListDiscoveryRequest{}
	default:
		f.t.Fatalf("no valid request for %s: add one", method)
	}
	proto.Merge(req.Interface(), m)
}

// mutate sets one field somewhere in m to a boundary or malformed value.
func (f *apiFuzzer) mutate(m proto.Message, depth int) {
	r := m.ProtoReflect()
	var set []protoreflect.FieldDescriptor
	r.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		set = append(set, fd)
		return true
	})
	fields := r.Descriptor().Fields()
	if fields.Len() == 0 {
		return // a request without fields (ListDiscovery): nothing to malform
	}
	if len(set) > 0 && f.rng.IntN(3) > 0 && depth < 4 {
		fd := set[f.rng.IntN(len(set))]
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && f.rng.IntN(2) == 0 {
			f.mutate(r.Get(fd).Message().Interface(), depth+1)
			return
		}
		f.setField(r, fd, depth)
		return
	}
	if fields.Len() == 0 {
		return // a request with no field (ReloadRequest): nothing to break
	}
	f.setField(r, fields.Get(f.rng.IntN(fields.Len())), depth)
}

// fill sets a random subset of m's fields to random values.
func (f *apiFuzzer) fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		if f.rng.IntN(2) == 0 {
			f.setField(m, fields.Get(i), depth)
		}
	}
}

func (f *apiFuzzer) setField(m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) {
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		n := []int{0, 1, 3, 300}[f.rng.IntN(4)]
		for range n {
			if fd.Kind() == protoreflect.MessageKind {
				e := l.NewElement()
				f.fill(e.Message(), depth+1)
				l.Append(e)
			} else {
				l.Append(f.scalar(fd))
			}
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		for range []int{0, 1, 3, 200}[f.rng.IntN(4)] {
			k := f.scalar(fd.MapKey()).MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v := mp.NewValue()
				f.fill(v.Message(), depth+1)
				mp.Set(k, v)
			} else {
				mp.Set(k, f.scalar(fd.MapValue()))
			}
		}
	case fd.Kind() == protoreflect.MessageKind:
		if depth > 4 {
			return
		}
		v := m.NewField(fd)
		switch fd.Message().FullName() {
		case "google.protobuf.Duration", "google.protobuf.Timestamp":
			secs := []int64{0, 1, -1, 100000000000, math.MaxInt64, math.MinInt64, 86400, 86401, 315576000000}
			nanos := []int32{0, -1, 1, 999999999, 1000000000, math.MaxInt32}
			v.Message().Set(fd.Message().Fields().ByName("seconds"), protoreflect.ValueOfInt64(secs[f.rng.IntN(len(secs))]))
			v.Message().Set(fd.Message().Fields().ByName("nanos"), protoreflect.ValueOfInt32(nanos[f.rng.IntN(len(nanos))]))
		default:
			f.fill(v.Message(), depth+1)
		}
		m.Set(fd, v)
	default:
		m.Set(fd, f.scalar(fd))
	}
}

// scalar returns a boundary, malformed or plausible value of fd's kind.
func (f *apiFuzzer) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	r := f.rng
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if r.IntN(4) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber([]int32{-1, 99, math.MaxInt32}[r.IntN(3)]))
		}
		return protoreflect.ValueOfEnum(vals.Get(r.IntN(vals.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -1, 2, 3, 1000, 1001, math.MaxInt32, math.MinInt32}[r.IntN(9)])
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64([]int64{0, 1, -1, 2, math.MaxInt64, math.MinInt64}[r.IntN(6)])
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32([]uint32{0, 1, 2, math.MaxUint32}[r.IntN(4)])
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64([]uint64{0, 1, 2, math.MaxUint64, uint64(time.Now().UnixMicro()) + 1<<40}[r.IntN(5)])
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32([]float64{0, 1, -1, 0.5, math.NaN(), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat32}[r.IntN(8)]))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{0, 1, -1, 0.5, 1e-300, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64}[r.IntN(9)])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(f.str(fd)))
	default:
		// A proto3 string is UTF-8: grpc-go's client will not send
		// anything else, and its server refuses it before any handler.
		return protoreflect.ValueOfString(strings.ToValidUTF8(f.str(fd), "\uFFFD"))
	}
}

// str returns a string for fd. Addresses and URLs come from a list of
// loopback, malformed and denied ones only: a generated host name could
// make pulsed resolve or dial a host off this machine.
func (f *apiFuzzer) str(fd protoreflect.FieldDescriptor) string {
	r := f.rng
	switch fd.Name() {
	case "address":
		return []string{"127.0.0.1:9", "127.0.0.1:0", "127.0.0.1:65536", "[::1]:9", "", ":", "127.0.0.1", "unix:80", "169.254.169.254:80", "10.0.0.1:80", "[::1", "127.0.0.1:-1", "localhost:9", strings.Repeat("1", 300) + ":9"}[r.IntN(14)]
	case "url":
		return []string{"http://127.0.0.1:9/healthz", "https://127.0.0.1:9/", "http://[::1]:9/", "ftp://127.0.0.1/", "http://169.254.169.254/latest", "http://10.0.0.1/", "", "http://", "127.0.0.1:9", "http://127.0.0.1:9/" + strings.Repeat("a", 9000), "http://user:pw@127.0.0.1:9/", "http://127.0.0.1:9/\r\nX: y"}[r.IntN(12)]
	}
	pool := []string{"", "web-1", "edge", "a", "-lead", "web 1", "../etc", "héllo", "\x00", "\r\nInjected: 1", "GET", "HEAD", "POST", "Host", "User-Agent", "x-" + strings.Repeat("h", 200)}
	switch r.IntN(10) {
	case 0:
		return strings.Repeat("x", []int{129, 1025, 70000}[r.IntN(3)])
	case 1:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return string(b)
	case 2:
		return fuzzNames[r.IntN(len(fuzzNames))]
	}
	return pool[r.IntN(len(pool))]
}

// shorten prints a request with long strings cut, for a failure message.
func shorten(m proto.Message) string {
	s := fmt.Sprint(m)
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}
