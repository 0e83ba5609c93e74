package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func addCommand() *command {
	return &command{
		name:    "add",
		args:    "(--name NAME (--http URL | --tcp HOST:PORT | --grpc HOST:PORT | --dns NAME) | --file FILE) [flags]",
		summary: "register a target, or replace the spec of an existing one",
		about: `
add registers a target with pulsed. Adding a name that exists replaces its
spec and keeps its state and streaks. Flags left out stay unset in the request,
so pulsed's defaults apply (see pulsed --help): interval 2s, timeout 1s,
rise 2, fall 3, initial state unhealthy, model rise_fall, any 2xx passes.

With --file, add registers every target of a targets file (the YAML of
pulsed -targets: a "targets:" list of pulse.v1.Target) in as few AddTargets
calls as its size allows, each durable when it returns. A target pulsed
refuses is named with the reason, and the others are registered; the exit
code is then 1. The targets are not marked as the file's: pulsed's own
-targets file removes targets it stops listing, pulsectl add --file never
removes any.`,
		example: `
pulsectl add --name web-1 --group edge --http http://127.0.0.1:8080/healthz
pulsectl add --name db --tcp 192.0.2.5:5432 --interval 5s --fall 2
pulsectl add --name api --grpc 192.0.2.7:50051 --grpc-service api.v1.Orders --grpc-tls
pulsectl add --name web-2 --http http://192.0.2.6/healthz --expect-status 200,204 --header Host=web.internal
pulsectl add --name web-3 --http https://192.0.2.6/ready --expect-status 200-399 --body-contains ready \
    --probe-tls-ca-file ca.pem --probe-tls-cert-file client.pem --probe-tls-key-file client.key \
    --probe-tls-server-name web.internal
pulsectl add --name cache --tcp 192.0.2.8:6379 --send 'PING\r\n' --expect '+PONG\r\n'
pulsectl add --name api-dns --dns api.internal --dns-server 192.0.2.2:53 --dns-answer-contains 192.0.2.7
pulsectl add --file fleet.yaml`,
		run: runAdd,
	}
}

// addFlags are add's flags; which ones were set is found with flag.Visit.
type addFlags struct {
	fs                         *flag.FlagSet
	file                       string
	name, group                string
	httpURL, method, tcp, grpc string
	grpcService                string
	grpcTLS                    bool
	interval, timeout, maxLat  secondsFlag
	rise, fall                 int
	policy                     policyFlags
	initialState, model        string
	expectStatus               intList
	headers                    headerMap
	probe                      *probeFlags
	client                     *clientFlags
	output                     *outputFlag
}

func (c *command) addFlagSet(e *env) *addFlags {
	a := &addFlags{fs: c.flags(e), headers: headerMap{}}
	fs := a.fs
	fs.StringVar(&a.name, "name", "", "target `name`: 1-128 of [A-Za-z0-9._:-], starting with a letter or digit (required without --file)")
	fs.StringVar(&a.file, "file", "", "register every target of a targets `file` (YAML, as pulsed -targets reads), in batches")
	fs.StringVar(&a.group, "group", "", "`group` of the target")
	fs.StringVar(&a.httpURL, "http", "", "probe with an HTTP request to `URL` (http:// or https://)")
	fs.StringVar(&a.method, "method", "", "HTTP `method`: GET, HEAD or POST (pulsed's default: GET)")
	fs.Var(&a.expectStatus, "expect-status", "HTTP status `codes` or ranges (200-399) that pass, comma-separated or repeated (pulsed's default: any 2xx)")
	fs.Var(&a.headers, "header", "HTTP header `K=V` to send, repeatable; Host=... sets the virtual host")
	fs.StringVar(&a.tcp, "tcp", "", "probe by opening a TCP connection to `host:port`")
	fs.StringVar(&a.grpc, "grpc", "", "probe with grpc.health.v1 Check at `host:port`")
	fs.StringVar(&a.grpcService, "grpc-service", "", "grpc.health.v1 `service` name to ask about (default: the whole server)")
	fs.BoolVar(&a.grpcTLS, "grpc-tls", false, "connect to the gRPC target with TLS")
	fs.Var(atMost(&a.interval, 24*time.Hour), "interval", "time between the starts of two probes: a `duration` (5s) or seconds (5), 1ms to 24h")
	fs.Var(atMost(&a.timeout, time.Hour), "timeout", "bound on one probe (at most --interval and 1h): a `duration` or seconds")
	fs.Var(int32Flag(&a.rise), "rise", "consecutive `passes` to become healthy")
	fs.Var(int32Flag(&a.fall), "fall", "consecutive `failures` to become unhealthy")
	fs.StringVar(&a.initialState, "initial-state", "", "`state` of a new target: healthy or unhealthy")
	fs.StringVar(&a.model, "model", "", "state `model`: rise_fall or three_state")
	fs.Var(atMost(&a.maxLat, time.Hour), "max-latency", "fail probes that pass slower than this `duration` (or seconds), at most --timeout and 1h")
	a.policy.register(fs)
	a.probe = addProbeFlags(fs)
	a.client = addClientFlags(fs)
	a.output = addOutputFlag(fs, "the response", "yaml")
	return a
}

func runAdd(ctx context.Context, e *env, c *command, args []string) int {
	a := c.addFlagSet(e)
	pos, code, ok := c.parse(e, a.fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(e, "unexpected argument %q: give the name with --name", pos[0])
	}
	if a.file != "" {
		return a.addFile(ctx, e, c)
	}
	target, err := a.target()
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
	// The spec add replaces, if any, to say what changed: add sends the
	// whole spec, so a flag left out puts its field back to the default.
	var prev *pb.Target
	if !a.output.structured() {
		if old, err := cl.State(cctx, &pb.StateRequest{Name: target.GetName()}); err == nil {
			prev = escaped(old.GetStatus().GetSpec())
		}
	}
	resp, err := cl.AddTarget(cctx, &pb.AddTargetRequest{Target: target})
	if err != nil {
		return cl.fail(e, err, "")
	}
	// pulsed caps its default timeout at the interval: say so when
	// --interval is what set it.
	note := ""
	if spec := resp.GetStatus().GetSpec(); isSet(a.fs, "interval") && !isSet(a.fs, "timeout") && spec.GetTimeout().AsDuration() == spec.GetInterval().AsDuration() {
		note = fmt.Sprintf("timeout %v: pulsed's default, at most the interval (give --timeout to choose it)\n", spec.GetTimeout().AsDuration())
	}
	if a.output.structured() {
		fmt.Fprint(e.stderr, note)
		return e.printAs(a.output, resp)
	}
	st := escaped(resp.GetStatus())
	verb := "updated"
	if resp.GetCreated() {
		verb = "added"
	}
	fmt.Fprintf(e.stdout, "%s %s: %s; %s; state %s\n%s", verb, st.GetSpec().GetName(),
		probeSummary(st.GetSpec()), scheduleSummary(st.GetSpec()), stateName(st.GetState()), note)
	if !resp.GetCreated() && prev != nil {
		changes := specChanges(prev, st.GetSpec())
		sent := hiddenSent(target)
		switch name := st.GetSpec().GetName(); {
		case len(changes) > 0:
			fmt.Fprintf(e.stdout, "replaced the spec of %s: %s%s\n(to change only some fields, use pulsectl set)\n", name, strings.Join(changes, ", "), alsoSent(sent))
		case len(sent) > 0:
			fmt.Fprintln(e.stdout, noChangeShown(name, sent))
		default:
			fmt.Fprintf(e.stdout, "the spec of %s was already this one\n", name)
		}
	}
	if m := st.GetMode(); !resp.GetCreated() && m != pb.Mode_MODE_ACTIVE && m != pb.Mode_MODE_UNSPECIFIED {
		// add replaces the spec, not the mode: a target an earlier rm
		// --drain is removing would otherwise vanish without a word.
		name := st.GetSpec().GetName()
		fmt.Fprintf(e.stdout, "%s is still %s: add keeps a target's mode (pulsectl activate %s makes it active)\n", name, modeSummary(st), name)
	}
	return exitOK
}

// target builds the request's Target from the flags that were set; the
// others stay unset so that pulsed's defaults apply. It checks only what
// the flags themselves get wrong; pulsed validates the values.
func (a *addFlags) target() (*pb.Target, error) {
	set := map[string]bool{}
	a.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["name"] {
		return nil, fmt.Errorf("--name is required")
	}
	t := &pb.Target{Name: a.name, Group: a.group}

	var kinds []string
	for _, k := range []string{"http", "tcp", "grpc", "dns"} {
		if set[k] {
			kinds = append(kinds, "--"+k)
		}
	}
	switch len(kinds) {
	case 0:
		return nil, fmt.Errorf("set one of --http URL, --tcp HOST:PORT, --grpc HOST:PORT or --dns NAME")
	case 1:
	default:
		return nil, fmt.Errorf("set only one of --http, --tcp, --grpc and --dns; got %s", strings.Join(kinds, " and "))
	}
	if err := a.probe.check(set); err != nil {
		return nil, err
	}
	for _, f := range []string{"method", "expect-status", "header"} {
		if set[f] && !set["http"] {
			return nil, fmt.Errorf("--%s applies to --http targets only", f)
		}
	}
	for _, f := range []string{"grpc-service", "grpc-tls"} {
		if set[f] && !set["grpc"] {
			return nil, fmt.Errorf("--%s applies to --grpc targets only", f)
		}
	}
	switch {
	case set["http"]:
		h := &pb.HttpProbe{Url: a.httpURL, Method: a.method, ExpectedStatus: a.expectStatus.codes, ExpectedStatusRanges: a.expectStatus.ranges}
		if len(a.headers) > 0 {
			h.Headers = a.headers
		}
		a.probe.applyHTTP(h, set)
		t.Probe = &pb.Target_Http{Http: h}
	case set["tcp"]:
		t.Probe = &pb.Target_Tcp{Tcp: a.probe.tcp(a.tcp, set)}
	case set["dns"]:
		t.Probe = &pb.Target_Dns{Dns: a.probe.dnsProbe()}
	default:
		g := &pb.GrpcProbe{Address: a.grpc, Service: a.grpcService, Tls: a.grpcTLS}
		a.probe.applyGRPC(g, set)
		t.Probe = &pb.Target_Grpc{Grpc: g}
	}

	if err := a.setCommon(t, func(f string) bool { return set[f] }); err != nil {
		return nil, err
	}
	return t, nil
}

// setCommon sets t's fields that are not about its probe from the flags
// that were set (is reports which).
func (a *addFlags) setCommon(t *pb.Target, is func(string) bool) error {
	for _, f := range []struct {
		name string
		v    secondsFlag
		dst  **durationpb.Duration
	}{{"interval", a.interval, &t.Interval}, {"timeout", a.timeout, &t.Timeout}, {"max-latency", a.maxLat, &t.MaxLatency}} {
		if is(f.name) {
			*f.dst = durationpb.New(time.Duration(f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    int
		dst  **int32
	}{{"rise", a.rise, &t.Rise}, {"fall", a.fall, &t.Fall}} {
		if is(f.name) {
			*f.dst = proto.Int32(int32(f.v)) // int32Flag took only what fits
		}
	}
	if is("initial-state") {
		switch normalize(a.initialState, "state_") {
		case "healthy":
			t.InitialState = pb.State_STATE_HEALTHY
		case "unhealthy":
			t.InitialState = pb.State_STATE_UNHEALTHY
		default:
			return fmt.Errorf("--initial-state must be healthy or unhealthy, got %q", a.initialState)
		}
	}
	if is("model") {
		switch normalize(a.model, "model_") {
		case "rise_fall":
			t.Model = pb.Model_MODEL_RISE_FALL
		case "three_state":
			t.Model = pb.Model_MODEL_THREE_STATE
		default:
			return fmt.Errorf("--model must be rise_fall or three_state, got %q", a.model)
		}
	}
	a.policy.apply(t, is)
	return nil
}

// normalize lower-cases an enum flag value, turns dashes into underscores
// and drops the enum's prefix, so "STATE_HEALTHY", "healthy" and
// "three-state" are all accepted.
func normalize(v, prefix string) string {
	v = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(v)), "-", "_")
	return strings.TrimPrefix(v, prefix)
}

// intList is a repeatable flag of comma-separated status codes and
// ranges of them ("200-399").
type intList struct {
	codes  []int32
	ranges []string
}

func (l *intList) String() string {
	return strings.Join(append([]string{joinInts(l.codes)}, l.ranges...), ",")
}

func (l *intList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if lo, hi, ok := strings.Cut(part, "-"); ok {
			_, err1 := strconv.Atoi(lo)
			_, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("%q is not a range of status codes such as 200-399", part)
			}
			l.ranges = append(l.ranges, part)
			continue
		}
		n, err := strconv.ParseInt(part, 10, 32)
		if err != nil {
			return fmt.Errorf("%q is not a status code", part)
		}
		l.codes = append(l.codes, int32(n))
	}
	return nil
}

// headerMap is a repeatable K=V flag.
type headerMap map[string]string

func (h headerMap) String() string { return "" }

func (h headerMap) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", v)
	}
	h[strings.TrimSpace(k)] = val
	return nil
}
