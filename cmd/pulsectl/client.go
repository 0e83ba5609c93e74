package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"buf.build/go/protoyaml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pulse "github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/cmd/internal/dial"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// callTimeout bounds each unary call that reads, connecting included, so
// that a server that does not answer is reported in seconds rather than
// never.
const callTimeout = 5 * time.Second

// connectTimeout bounds getting a connection to pulsed, within each unary
// call's bound (see connectFirst): an address that drops packets, or a
// listener that never finishes the TLS or HTTP/2 handshake, is reported
// after it, not after a write's 30s.
const connectTimeout = 5 * time.Second

// writeTimeout bounds each call that changes the registry. With replicas,
// pulsed waits up to 10 seconds (a millisecond more a target of a batch)
// for the shared registry to confirm a write, then answers that it is
// unavailable or the write uncertain: pulsectl waits longer, so that while
// etcd is down it shows that answer instead of calling pulsed stalled.
const writeTimeout = 30 * time.Second

// listTimeout bounds each ListTargets call. pulsed answers ListTargets
// only with a revision its store holds, and waits up to 5s for it while
// the store cannot write (a full disk) before it answers UNAVAILABLE with
// the store's error: pulsectl waits longer, so that it shows that answer
// rather than call pulsed stalled while its /healthz says ok.
const listTimeout = 15 * time.Second

// clientFlags are the flags of every command that talks to pulsed, and,
// once resolve has run, where each setting came from.
type clientFlags struct {
	addr       string
	conn       dial.Flags // TLS, mutual TLS and token
	configPath string     // --config
	context    string     // --context

	fs          *flag.FlagSet
	output      *outputFlag       // the command's -o, if it has one
	sources     map[string]string // setting name -> where its value came from
	configUsed  string            // the config file read, if any
	contextUsed string            // its context in force, if any
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	cf := &clientFlags{fs: fs}
	fs.StringVar(&cf.addr, "addr", defaultAddr, "`host:port` of pulsed (or a gRPC target such as unix:PATH), or several replicas, comma-separated (env PULSE_ADDR)")
	fs.StringVar(&cf.configPath, "config", "", "config `file` with named contexts (env PULSE_CONFIG; default: pulse/pulsectl.yaml in the user's config directory)")
	fs.StringVar(&cf.context, "context", "", "the config file's context to use (env PULSE_CONTEXT; default: its current-context)")
	cf.conn.Register(fs)
	return cf
}

// client is a connection to pulsed.
type client struct {
	addr       string
	addrSource string       // where addr came from, as config view says it: "default", "flag --addr", ...
	cf         *clientFlags // the settings in force, for fail's hints; nil: unknown
	pc         *pulse.Client
	timeout    time.Duration // the bound of the last call's context (callCtx, listCtx, writeCtx), for noAnswer
	connect    time.Duration // bounds getting a connection, in each unary call (connectFirst)
	limit      time.Duration // the command's own bound (env.limit); 0: none
	pb.HealthCheckerClient
}

// dial returns a client for the settings in force (flags, environment,
// config file); the connection is made on the first call, and moves to
// another replica when --addr names several. It fails only for settings
// that cannot be used, a usage error.
func (cf *clientFlags) dial(e *env) (*client, int, bool) {
	c, ok := cf.newClient(context.Background(), e)
	if !ok {
		return nil, exitUsage, false
	}
	return c, exitOK, true
}

// newClient returns a client of pulsed for the settings in force, bounded
// as e says; ctx bounds pulse.New's wait. It fails, said on stderr, only
// for settings that cannot be used.
func (cf *clientFlags) newClient(ctx context.Context, e *env) (*client, bool) {
	if err := cf.resolve(); err != nil {
		e.errorf("%v", err)
		return nil, false
	}
	if err := cf.checkAddrs(); err != nil {
		e.errorf("%v", err)
		return nil, false
	}
	return cf.connect(ctx, e)
}

// at returns a client of the pulsed at addr, another replica of the one
// asked, with the settings in force (TLS, token) but the address, which
// where says the source of.
func (cf *clientFlags) at(ctx context.Context, e *env, addr, where string) (*client, bool) {
	other := *cf
	other.addr = addr
	other.sources = maps.Clone(cf.sources)
	other.sources["addr"] = where
	return other.connect(ctx, e)
}

// connect returns a client of the pulsed at cf.addr, with the settings
// resolved.
func (cf *clientFlags) connect(ctx context.Context, e *env) (*client, bool) {
	opts, err := cf.conn.ClientOptions()
	if err != nil {
		e.errorf("%v", err)
		return nil, false
	}
	c := &client{addr: cf.addr, addrSource: cf.sources["addr"], cf: cf, connect: cmp.Or(e.connectTimeout, connectTimeout), limit: e.limit}
	opts = append(opts, pulse.WithDialOptions(grpc.WithChainUnaryInterceptor(c.connectFirst)))
	pc, err := pulse.New(ctx, cf.addrs(), opts...)
	if err != nil {
		label := "--addr"
		if src := cf.sources["addr"]; strings.HasPrefix(src, "replica ") {
			label = src
		}
		e.errorf("%s %q: %v", label, cf.addr, err)
		return nil, false
	}
	c.pc, c.HealthCheckerClient = pc, pc.API()
	return c, true
}

// checkAddrs refuses an address in force that names no port, where gRPC
// would dial port 443 and find no pulsed: the error names where the
// address came from. An address with a scheme gRPC resolves is gRPC's to
// read (unix:PATH, unix:///PATH), but for the port of dns:///HOST:PORT and
// passthrough:///HOST:PORT.
func (cf *clientFlags) checkAddrs() error {
	addrs := cf.addrs()
	for _, a := range addrs {
		problem := addrProblem(a)
		if problem == "" {
			continue
		}
		var from string
		switch src := cf.sources["addr"]; {
		case strings.HasPrefix(src, "env "):
			from = strings.TrimPrefix(src, "env ")
		case strings.HasPrefix(src, "config "):
			from = src + ": addr"
		default:
			from = "--addr"
		}
		if len(addrs) > 1 {
			from += " " + cf.addr + ":"
		}
		return fmt.Errorf("%s %s %s", from, a, problem)
	}
	return nil
}

// addrProblem says what is wrong with a, one address of pulsed: "has no
// port: want ...", or "" when nothing is.
func addrProblem(a string) string {
	hostPort, want := a, "host:port, e.g. "+defaultAddr
	if u, err := url.Parse(a); err == nil && u.Scheme != "" && resolver.Get(u.Scheme) != nil {
		if u.Scheme != "dns" && u.Scheme != "passthrough" {
			return "" // unix:PATH and the like: no port
		}
		hostPort, want = u.Opaque, u.Scheme+":///host:port, e.g. "+u.Scheme+":///"+defaultAddr
		if hostPort == "" {
			hostPort = strings.TrimPrefix(u.Path, "/")
		}
	}
	if ip := net.ParseIP(strings.Trim(hostPort, "[]")); ip != nil && ip.To4() == nil {
		want = strings.Replace(want, "127.0.0.1", "[::1]", 1) // an IPv6 address goes in brackets
	}
	_, port, err := net.SplitHostPort(hostPort)
	switch {
	case err == nil && port != "":
		return ""
	case err == nil, strings.Contains(err.Error(), "missing port"), net.ParseIP(hostPort) != nil:
		return "has no port: want " + want
	}
	return "is not host:port: want " + want
}

func (c *client) Close() { c.pc.Close() }

// connectFirst is a unary interceptor that holds the call until there is
// a connection, for at most c.connect (or the call's bound, when that ends
// first), and then fails it with a noConnection that names that bound.
// Once connected, the call has what is left of its own bound to be
// answered. A connection attempt that failed (refused, a TLS handshake
// pulsed or pulsectl refused) lets the call go, to fail at once with
// gRPC's reason. The client bounds each connection attempt too (5s): one
// starts after this wait does, so with connectTimeout this wait ends
// first and names its bound.
func (c *client) connectFirst(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	within := c.connect
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= within {
		within = c.bound()
	}
	wctx, cancel := context.WithTimeout(ctx, c.connect)
	defer cancel()
	for s := cc.GetState(); s != connectivity.Ready && s != connectivity.TransientFailure && s != connectivity.Shutdown; s = cc.GetState() {
		if s == connectivity.Idle {
			cc.Connect()
		}
		if !cc.WaitForStateChange(wctx, s) {
			if errors.Is(ctx.Err(), context.Canceled) {
				return status.FromContextError(ctx.Err()).Err()
			}
			return &noConnection{within: within}
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// noConnection is the error of a call that had no connection to pulsed
// within its bound: nothing answered, or the TLS or HTTP/2 handshake did
// not finish.
type noConnection struct {
	within time.Duration // the bound that ran out
}

func (e *noConnection) Error() string { return fmt.Sprintf("no connection within %v", e.within) }

// GRPCStatus makes it DEADLINE_EXCEEDED to code that reads gRPC codes, as
// wait does to retry.
func (e *noConnection) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.Error())
}

// callCtx returns the context of one unary call that reads.
func (c *client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	c.timeout = callTimeout
	return context.WithTimeout(ctx, callTimeout)
}

// listCtx returns the context of a command's reads when they include
// ListTargets (see listTimeout).
func (c *client) listCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	c.timeout = listTimeout
	return context.WithTimeout(ctx, listTimeout)
}

// writeCtx returns the context of one unary call that changes the
// registry (and of the reads made with it).
func (c *client) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	c.timeout = writeTimeout
	return context.WithTimeout(ctx, writeTimeout)
}

// rpcCommands are the pulsectl commands that make each RPC, for the hints
// in pulsed's messages, which name RPCs.
var rpcCommands = map[string]string{
	"AddTarget":        "'pulsectl add'",
	"UpdateTarget":     "'pulsectl set'",
	"RemoveTarget":     "'pulsectl rm'",
	"ListTargets":      "'pulsectl ls'",
	"ProbeNow":         "'pulsectl probe'",
	"ReportOutcome":    "'pulsectl outcome'",
	"SetGroupPolicy":   "'pulsectl policy set'",
	"SetMode":          "'pulsectl drain', 'maint' or 'activate'",
	"WatchTransitions": "'pulsectl watch'",
}

var (
	rpcName = regexp.MustCompile(`\b(AddTarget|UpdateTarget|RemoveTarget|ListTargets|ProbeNow|ReportOutcome|SetGroupPolicy|SetMode|WatchTransitions)\b`)
	// passiveHint is pulsed's hint for a target that takes no passive
	// outcomes, said in the API's terms.
	passiveHint = regexp.MustCompile(`enable them with UpdateTarget setting target\.passive_outcomes: true \(and optionally target\.passive_rate, ([^)]*)\)`)
)

// cliHint rewrites the hints in a message of pulsed's, which name RPCs and
// fields, into the pulsectl commands and flags that do the same: "list
// targets with ListTargets" becomes "list targets with 'pulsectl ls'".
// name is the target the call was about, if any. A method's path
// ("/pulse.v1.HealthChecker/ListTargets", in the rate limit's message)
// names the call and stays as it is.
func cliHint(msg, name string) string {
	if name == "" {
		name = "NAME"
	}
	msg = passiveHint.ReplaceAllString(msg, "enable them with 'pulsectl set "+name+" --passive' (and optionally --passive-rate, ${1})")
	var b strings.Builder
	last := 0
	for _, m := range rpcName.FindAllStringIndex(msg, -1) {
		if m[0] > 0 && msg[m[0]-1] == '/' {
			continue
		}
		b.WriteString(msg[last:m[0]])
		b.WriteString(rpcCommands[msg[m[0]:m[1]]])
		last = m[1]
	}
	b.WriteString(msg[last:])
	return b.String()
}

// jsonOut is how -o json prints messages: protojson, proto3's canonical
// JSON mapping, the form grpcurl prints: lowerCamelCase names, enums as
// names, durations as "1.5s", times as RFC 3339, 64-bit integers
// (revisions, counters) as strings of digits, with every field present,
// zeros and empty lists included, so scripts need not guess at defaults.
var jsonOut = protojson.MarshalOptions{EmitUnpopulated: true}

// stableJSON is m as jsonOut encodes it, with the white space protojson
// varies on purpose (a space here or there, different from one build to
// the next) made the same every time: indented by two spaces, or on one
// line, so that output compared or searched as text stays the same.
func stableJSON(m proto.Message, indent bool) ([]byte, error) {
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if indent {
		err = json.Indent(&out, b, "", "  ")
	} else {
		err = json.Compact(&out, b)
	}
	return out.Bytes(), err
}

// printAs writes m as -o asks: JSON, or YAML with the same field names.
func (e *env) printAs(o *outputFlag, m proto.Message) int {
	if o.v != "yaml" {
		return e.printJSON(m)
	}
	b, err := protoyaml.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		e.errorf("encoding YAML: %v", err)
		return exitServer
	}
	fmt.Fprintf(e.stdout, "%s", b)
	return exitOK
}

// printJSON writes m as JSON on stdout.
func (e *env) printJSON(m proto.Message) int {
	b, err := stableJSON(m, true)
	if err != nil {
		e.errorf("encoding JSON: %v", err)
		return exitServer
	}
	fmt.Fprintf(e.stdout, "%s\n", b)
	return exitOK
}
