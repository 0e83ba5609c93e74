package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func setCommand() *command {
	return &command{
		name:    "set",
		args:    "[flags] NAME",
		summary: "change some fields of a target, keeping the others",
		about: `
set changes only the fields whose flags are given (pulsed's UpdateTarget): the
rest of the spec, the state and the streaks stay as they are. It takes add's
flags but --name and --initial-state. --http, --tcp and --grpc change the
probe's address; a probe of another kind replaces the probe. --header replaces
every header. --clear FIELD puts a field back to pulsed's default (repeatable;
the field's name in the API: group, max_latency, fast_interval, ...). An
--interval below the target's timeout lowers the timeout to it, as add caps
pulsed's default timeout, unless --timeout is given. set prints what it
changed.`,
		example: `
pulsectl set web-1 --interval 5s --group edge
pulsectl set web-1 --http http://192.0.2.6:8080/healthz
pulsectl set web-1 --clear max_latency --clear group`,
		run: runSet,
	}
}

// setPaths maps add's flags to the field of Target they set, for set's
// update mask. A flag that is not here cannot be used with set.
var setPaths = map[string]string{
	"group":         "group",
	"http":          "http.url",
	"method":        "http.method",
	"expect-status": "http.expected_status", // and http.expected_status_ranges, added by update
	"header":        "http.headers",
	"tcp":           "tcp.address",
	"grpc":          "grpc.address",
	"grpc-service":  "grpc.service",
	"grpc-tls":      "grpc.tls",
	// The probes' options: TLS options are set with add, since their
	// field depends on the probe's kind.
	"body-contains":       "http.body_contains",
	"body-not-contains":   "http.body_not_contains",
	"body-regex":          "http.body_regex",
	"body-limit":          "http.body_limit",
	"header-match":        "http.header_matches",
	"body":                "http.body",
	"follow-redirects":    "http.follow_redirects",
	"send":                "tcp.steps",
	"send-hex":            "tcp.steps",
	"expect":              "tcp.steps",
	"expect-hex":          "tcp.steps",
	"expect-contains":     "tcp.steps",
	"expect-regex":        "tcp.steps",
	"read-limit":          "tcp.steps",
	"grpc-authority":      "grpc.authority",
	"grpc-metadata":       "grpc.metadata",
	"grpc-expect-status":  "grpc.expected_statuses",
	"dns":                 "dns.name",
	"dns-server":          "dns.server",
	"dns-type":            "dns.type",
	"dns-rcode":           "dns.rcode",
	"dns-answer-contains": "dns.answer_contains",
	"dns-answer-regex":    "dns.answer_regex",
	"interval":            "interval",
	"timeout":             "timeout",
	"rise":                "rise",
	"fall":                "fall",
	"model":               "model",
	"max-latency":         "max_latency",
	"fast-interval":       "fast_interval",
	"down-interval":       "down_interval",
	"flap-window":         "flap_window",
	"flap-threshold":      "flap_threshold",
	"flap-stable-for":     "flap_stable_for",
	"passive":             "passive_outcomes",
	"passive-rate":        "passive_rate",

	"slow-start":             "slow_start",
	"remove-after-unhealthy": "remove_after_unhealthy",
	"vantages":               "vantages",
	"quorum":                 "quorum",
}

// notTargetFlags are set's flags that are not about the target: the
// connection's, the output's and --clear.
var notTargetFlags = map[string]bool{
	"addr": true, "o": true, "clear": true, "tls": true, "tls-ca": true, "tls-cert": true, "tls-key": true,
	"tls-server-name": true, "token": true, "token-file": true,
}

func runSet(ctx context.Context, e *env, c *command, args []string) int {
	a := c.addFlagSet(e)
	var clear fieldList
	a.fs.Var(&clear, "clear", "put `FIELD` back to pulsed's default, by its API name (repeatable)")
	pos, code, ok := c.parse(e, a.fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(e, "name one target, got %d arguments", len(pos))
	}
	req, err := a.update(pos[0], clear)
	if err != nil {
		return c.usageError(e, "%v", err)
	}
	cl, code, ok := a.client.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.writeCtx(ctx)
	defer cancel()
	lowered, err := a.fitTimeout(cctx, cl, req, clear)
	if err != nil {
		return cl.fail(e, err, pos[0])
	}
	note := ""
	if lowered {
		note = fmt.Sprintf("timeout lowered to %v to fit the interval (give --timeout to choose it)\n", time.Duration(a.interval))
	}
	resp, err := cl.UpdateTarget(cctx, req)
	if err != nil {
		code := cl.fail(e, err, pos[0])
		if lowered { // pulsed refused what set sent, not only what was typed
			fmt.Fprintf(e.stderr, "The request had the %s", note)
		}
		return code
	}
	if a.output.structured() {
		fmt.Fprint(e.stderr, note)
		return e.printAs(a.output, resp)
	}
	resp = escaped(resp)
	changes := specChanges(resp.GetPrevious(), resp.GetStatus().GetSpec())
	sent := hiddenSent(req.GetTarget())
	switch {
	case len(changes) == 0 && len(sent) > 0:
		fmt.Fprintln(e.stdout, noChangeShown(pos[0], sent))
	case len(changes) == 0:
		fmt.Fprintf(e.stdout, "%s unchanged\n", pos[0])
	default:
		fmt.Fprintf(e.stdout, "updated %s: %s%s\n%s", pos[0], strings.Join(changes, ", "), alsoSent(sent), note)
	}
	return exitOK
}

// fitTimeout lowers the target's timeout to the new interval in req when
// --interval shortens the interval below the timeout pulsed holds and
// --timeout does not say what it should be, as an unset timeout is capped
// at the interval for add: pulsed would refuse the interval otherwise. It
// reports whether it did. The timeout is read before the update: a
// change between the two is overwritten only if it left the timeout
// above the new interval.
func (a *addFlags) fitTimeout(ctx context.Context, cl *client, req *pb.UpdateTargetRequest, clear []string) (bool, error) {
	if !isSet(a.fs, "interval") || isSet(a.fs, "timeout") || slices.Contains(clear, "timeout") {
		return false, nil
	}
	st, err := cl.State(ctx, &pb.StateRequest{Name: req.GetTarget().GetName()})
	if err != nil {
		return false, err
	}
	interval := time.Duration(a.interval)
	if st.GetStatus().GetSpec().GetTimeout().AsDuration() <= interval {
		return false, nil
	}
	req.Target.Timeout = durationpb.New(interval)
	req.UpdateMask.Paths = append(req.UpdateMask.Paths, "timeout")
	return true, nil
}

// update builds set's request from the flags that were set and the fields
// to clear.
func (a *addFlags) update(name string, clear []string) (*pb.UpdateTargetRequest, error) {
	var set []string
	a.fs.Visit(func(f *flag.Flag) {
		if !notTargetFlags[f.Name] {
			set = append(set, f.Name)
		}
	})
	if slices.Contains(set, "name") {
		return nil, fmt.Errorf("give the name as an argument; a target cannot be renamed (add a new one and remove the old)")
	}
	if slices.Contains(set, "initial-state") {
		return nil, fmt.Errorf("--initial-state applies only to a new target (pulsectl add)")
	}
	var kinds []string
	for _, f := range set {
		if p := setPaths[f]; strings.Contains(p, ".") {
			if k, _, _ := strings.Cut(p, "."); !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	if len(kinds) > 1 {
		return nil, fmt.Errorf("the flags given are of probes of different kinds (%s): a target has one probe", strings.Join(kinds, ", "))
	}
	// The probe's fields go into a probe of their kind.
	t := &pb.Target{Name: name}
	var paths []string
	for _, f := range set {
		p, ok := setPaths[f]
		if !ok {
			return nil, fmt.Errorf("--%s cannot be changed with set; use pulsectl add with the whole spec", f)
		}
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
		if f == "expect-status" { // codes and ranges are one flag
			paths = append(paths, "http.expected_status_ranges")
		}
	}
	for _, f := range clear {
		if strings.Contains(f, "-") {
			f = strings.ReplaceAll(f, "-", "_")
		}
		paths = append(paths, f) // pulsed checks the name
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("nothing to change: give a flag such as --interval 5s, or --clear FIELD")
	}
	full, err := a.fill(set)
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		if slices.Contains(clear, p) {
			continue
		}
		copyPath(t, full, p)
	}
	return &pb.UpdateTargetRequest{Target: t, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}}, nil
}

// fill returns a Target with the fields set flags give, probe fields in a
// probe of their kind (http for --method, and so on).
func (a *addFlags) fill(set []string) (*pb.Target, error) {
	is := func(f string) bool { return slices.Contains(set, f) }
	setMap := map[string]bool{}
	kind := ""
	for _, f := range set {
		setMap[f] = true
		if k, _, ok := strings.Cut(setPaths[f], "."); ok {
			kind = k
		}
	}
	t := &pb.Target{Group: a.group}
	switch kind {
	case "http":
		h := &pb.HttpProbe{Url: a.httpURL, Method: a.method, ExpectedStatus: a.expectStatus.codes, ExpectedStatusRanges: a.expectStatus.ranges}
		if len(a.headers) > 0 {
			h.Headers = a.headers
		}
		a.probe.applyHTTP(h, setMap)
		t.Probe = &pb.Target_Http{Http: h}
	case "tcp":
		t.Probe = &pb.Target_Tcp{Tcp: a.probe.tcp(a.tcp, setMap)}
	case "grpc":
		g := &pb.GrpcProbe{Address: a.grpc, Service: a.grpcService, Tls: a.grpcTLS}
		a.probe.applyGRPC(g, setMap)
		t.Probe = &pb.Target_Grpc{Grpc: g}
	case "dns":
		t.Probe = &pb.Target_Dns{Dns: a.probe.dnsProbe()}
	}
	if err := a.setCommon(t, is); err != nil {
		return nil, err
	}
	return t, nil
}

// copyPath copies the field path names from src into dst.
func copyPath(dst, src *pb.Target, path string) {
	d, s := dst.ProtoReflect(), src.ProtoReflect()
	segs := strings.Split(path, ".")
	for _, seg := range segs[:len(segs)-1] {
		fd := d.Descriptor().Fields().ByName(protoreflect.Name(seg))
		if fd == nil || !s.Has(fd) {
			return
		}
		s = s.Get(fd).Message()
		d = d.Mutable(fd).Message()
	}
	fd := d.Descriptor().Fields().ByName(protoreflect.Name(segs[len(segs)-1]))
	if fd != nil && s.Has(fd) {
		d.Set(fd, s.Get(fd))
	}
}

// fieldList is a repeatable flag of field names.
type fieldList []string

func (l *fieldList) String() string     { return strings.Join(*l, ",") }
func (l *fieldList) Set(v string) error { *l = append(*l, v); return nil }

func probeCommand() *command {
	return &command{
		name:    "probe",
		args:    "[flags] [NAME...]",
		summary: "probe targets now and print the transitions",
		about: `
probe asks pulsed to probe targets now (pulsed's ProbeNow): the named ones, a
group's with --group, or every target. It waits for their results, bounded by
their timeouts, and prints the transitions of that round, in name order, as
"name: old -> new" lines; with --results, then each target's result. The
scheduled probes go on as before. pulsed allows 1 round a second, with bursts
of 5.`,
		example: `
pulsectl probe web-1 web-2
pulsectl probe --group edge --results
pulsectl probe -o json`,
		run: runProbe,
	}
}

// probeWait bounds how long probe waits for pulsed's round.
const probeWait = 2 * time.Minute

func runProbe(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	group := fs.String("group", "", "probe only this `group`'s targets")
	results := fs.Bool("results", false, "print each target's result after the transitions")
	out := addOutputFlag(fs, "the ProbeNowResponse", "yaml")
	names, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	resp, err := cl.ProbeNow(cctx, &pb.ProbeNowRequest{Group: *group, Names: names})
	if err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			e.errorf("%s", escape(status.Convert(err).Message()))
			return exitServer
		}
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			e.errorf("no answer from pulsed at %s within %v", cl.addr, probeWait)
			return exitServer
		}
		return cl.fail(e, err, "")
	}
	if out.structured() {
		return e.printAs(out, resp)
	}
	resp = escaped(resp)
	for _, tr := range resp.GetTransitions() {
		fmt.Fprintf(e.stdout, "%s: %s -> %s\n", tr.GetTarget(), stateName(tr.GetFrom()), stateName(tr.GetTo()))
	}
	if *results {
		for _, r := range resp.GetResults() {
			fmt.Fprintf(e.stdout, "%s\t%s\t%s\n", r.GetName(), stateName(r.GetState()), resultText(r))
		}
	}
	if len(resp.GetTransitions()) == 0 && !*results {
		fmt.Fprintf(e.stderr, "probed %d %s: no transitions\n", len(resp.GetResults()), plural(len(resp.GetResults()), "target"))
	}
	return exitOK
}

// resultText describes one result of a probe-now round.
func resultText(r *pb.ProbeNowResult) string {
	if s := r.GetSkipped(); s != "" {
		return "skipped: " + s
	}
	res := r.GetResult()
	if res.GetPass() {
		return "pass in " + latency(res.GetLatency().AsDuration())
	}
	return "fail in " + latency(res.GetLatency().AsDuration()) + ": " + res.GetError()
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
