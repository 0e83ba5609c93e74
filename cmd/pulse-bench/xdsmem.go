package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// xdsMemOptions says how to measure pulsed's memory around many xDS
// streams.
type xdsMemOptions struct {
	Streams  int             // EDS streams opened at once
	PerConn  int             // streams per client connection
	After    []time.Duration // when to read the RSS after the streams close
	Bins     []string        // the pulsed binaries, measured one after the other
	Extra    []string        // more pulsed flags
	Log      io.Writer
	Groups   int // groups (clusters) the streams watch
	PerGroup int // targets in each group
}

// xdsMemResult is one binary's RSS, in bytes, before, with and after the
// streams.
type xdsMemResult struct {
	Bin               string
	Baseline, Open    uint64
	After             []uint64
	OpenTime, Elapsed time.Duration
}

// runXDSMem measures each binary in turn: RSS with no stream open, with
// o.Streams EDS streams open (each answered once), and at each o.After
// after every stream closed while the client connections stay up.
func runXDSMem(ctx context.Context, o xdsMemOptions) ([]xdsMemResult, error) {
	var res []xdsMemResult
	for i, bin := range o.Bins {
		r, err := xdsMemOne(ctx, o, bin, i)
		if err != nil {
			return res, fmt.Errorf("%s: %w", bin, err)
		}
		res = append(res, r)
	}
	return res, nil
}

func xdsMemOne(ctx context.Context, o xdsMemOptions, bin string, run int) (xdsMemResult, error) {
	r := xdsMemResult{Bin: bin}
	// The targets are TCP checks of a listener that accepts and closes.
	ln, err := acceptAndClose()
	if err != nil {
		return r, err
	}
	defer ln.Close()
	args := []string{"-listen", "127.0.0.1:0", "-data-dir", "", "-http-listen", "", "-rate-limit", "0",
		"-xds", "-xds-max-streams", "0", "-xds-max-streams-per-source", "0", "-interval", "1s"}
	p, err := startPulsed(ctx, bin, append(args, o.Extra...))
	if err != nil {
		return r, err
	}
	defer p.Close()
	for g := range o.Groups {
		for k := range o.PerGroup {
			_, err := p.api.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{
				Name: fmt.Sprintf("g%d-t%d", g, k), Group: fmt.Sprintf("g%d", g),
				Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: ln.Addr().String()}},
			}})
			if err != nil {
				return r, fmt.Errorf("AddTarget: %w", err)
			}
		}
	}
	nconn := (o.Streams + o.PerConn - 1) / o.PerConn
	conns := make([]*grpc.ClientConn, nconn)
	for i := range conns {
		if conns[i], err = grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return r, err
		}
		defer conns[i].Close()
	}
	open := func(ctx context.Context, conn *grpc.ClientConn, i int) error {
		st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		group := fmt.Sprintf("g%d", i%o.Groups)
		if err := st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: fmt.Sprintf("bench-%d", i)}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{group}}); err != nil {
			return err
		}
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		return st.Send(&discoverypb.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{group}, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
	}
	// Warm every connection up, so the baseline has its transports.
	for i, c := range conns {
		wctx, cancel := context.WithCancel(ctx)
		err := open(wctx, c, i)
		cancel()
		if err != nil {
			return r, fmt.Errorf("warm-up stream: %w", err)
		}
	}
	settle := func() { time.Sleep(2 * time.Second) }
	settle()
	if r.Baseline, _, err = procMem(p.Pid()); err != nil {
		return r, err
	}
	fmt.Fprintf(o.Log, "run %d: baseline RSS %.1f MiB; opening %d streams over %d connections\n", run+1, mib(r.Baseline), o.Streams, nconn)

	sctx, closeAll := context.WithCancel(ctx)
	defer closeAll()
	start := time.Now()
	errc := make(chan error, o.Streams)
	sem := make(chan struct{}, 256)
	for i := range o.Streams {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errc <- open(sctx, conns[i%nconn], i)
		}()
	}
	for range o.Streams {
		if err := <-errc; err != nil {
			return r, fmt.Errorf("opening a stream: %w", err)
		}
	}
	r.OpenTime = time.Since(start)
	settle()
	if r.Open, _, err = procMem(p.Pid()); err != nil {
		return r, err
	}
	fmt.Fprintf(o.Log, "run %d: %d streams open in %v, RSS %.1f MiB; closing them\n", run+1, o.Streams, r.OpenTime.Round(time.Millisecond), mib(r.Open))
	closeAll()
	closed := time.Now()
	for _, at := range o.After {
		select {
		case <-time.After(time.Until(closed.Add(at))):
		case <-ctx.Done():
			return r, ctx.Err()
		}
		rss, _, err := procMem(p.Pid())
		if err != nil {
			return r, err
		}
		r.After = append(r.After, rss)
		fmt.Fprintf(o.Log, "run %d: %v after closing, RSS %.1f MiB\n", run+1, at, mib(rss))
	}
	return r, nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// writeXDSMem writes the results as a Markdown table.
func writeXDSMem(w io.Writer, command string, o xdsMemOptions, res []xdsMemResult) {
	fmt.Fprintf(w, "`%s`\n\n", command)
	fmt.Fprintf(w, "%d EDS streams over %d connections, %d groups of %d targets; RSS in MiB\n\n", o.Streams, (o.Streams+o.PerConn-1)/o.PerConn, o.Groups, o.PerGroup)
	head := []string{"pulsed", "no stream", "streams open"}
	for _, at := range o.After {
		head = append(head, at.String()+" after close")
	}
	head = append(head, "last / no stream")
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat(" --- |", len(head)))
	for _, r := range res {
		row := []string{"`" + r.Bin + "`", fmt.Sprintf("%.1f", mib(r.Baseline)), fmt.Sprintf("%.1f", mib(r.Open))}
		for _, a := range r.After {
			row = append(row, fmt.Sprintf("%.1f", mib(a)))
		}
		ratio := "-"
		if len(r.After) > 0 && r.Baseline > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.After[len(r.After)-1])/float64(r.Baseline))
		}
		row = append(row, ratio)
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}
