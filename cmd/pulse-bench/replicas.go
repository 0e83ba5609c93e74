package main

// The -replicas mode: several pulsed replicas sharing one fleet
// through etcd, against one pulsed on its embedded registry, at the same
// scale point and against the same farm.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// parseReplicas parses "1,2,3": the replica counts to measure, each at
// least 1, none twice, in the order given.
func parseReplicas(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, err := strconv.Atoi(part)
		if err != nil || k < 1 || k > 64 {
			return nil, fmt.Errorf("replica count %q: must be an integer from 1 to 64", part)
		}
		if slices.Contains(out, k) {
			return nil, fmt.Errorf("replica count %d given twice", k)
		}
		out = append(out, k)
	}
	return out, nil
}

// replicaID is the -replica-id of replica i (from 0): r1, r2, ...
func replicaID(i int) string { return "r" + strconv.Itoa(i+1) }

// replicaPrefix is the -etcd-prefix of the run of k replicas at p: a
// fresh one per run, so no run sees another's targets.
func replicaPrefix(p ScalePoint, k int) string {
	return fmt.Sprintf("/bench-%d-%s-%d/", p.Targets, p.Interval, k)
}

// replicaSystem names a run: the embedded registry (k = 0) or k replicas.
func replicaSystem(k int) string { return "Pulse (" + registryName(k) + ")" }

// countWriters counts, for each of ids, the state records (the JSON values
// of etcd's states/<name> keys, {"writer": "r1", ...}) it wrote: its share
// of the fleet. others counts the records none of ids wrote, or that do
// not parse.
func countWriters(records [][]byte, ids []string) (owned []int, others int) {
	owned = make([]int, len(ids))
	for _, rec := range records {
		var v struct {
			Writer string `json:"writer"`
		}
		if err := json.Unmarshal(rec, &v); err != nil {
			others++
			continue
		}
		if i := slices.Index(ids, v.Writer); i >= 0 {
			owned[i]++
		} else {
			others++
		}
	}
	return owned, others
}

// parseEtcdVersion reads "etcd Version: 3.7.3" from `etcd --version`.
func parseEtcdVersion(out string) (string, bool) {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "etcd Version:"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

func etcdVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", err
	}
	v, ok := parseEtcdVersion(string(out))
	if !ok {
		return "", fmt.Errorf("no version in %q", firstLine(string(out)))
	}
	return v, nil
}

// buildEtcd builds the etcd pinned in go.mod into dir: a binary of its
// own, so that its CPU is measured apart from the replicas'.
func buildEtcd(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "etcd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "go.etcd.io/etcd/server/v3")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build go.etcd.io/etcd/server/v3: %w", err)
	}
	return bin, nil
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// etcdProc is a running single-member etcd and a client of it.
type etcdProc struct {
	*child
	url string
	cli *clientv3.Client
}

// startEtcd starts one etcd member on loopback with its data under dir
// and waits until it answers.
func startEtcd(ctx context.Context, bin, dir string) (*etcdProc, error) {
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	curl := fmt.Sprintf("http://127.0.0.1:%d", cport)
	purl := fmt.Sprintf("http://127.0.0.1:%d", pport)
	c, err := startChild("etcd", exec.Command(bin,
		"--name", "bench", "--data-dir", filepath.Join(dir, "etcd-data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "bench="+purl, "--log-level", "warn",
	), nil)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{curl}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.Stop(5 * time.Second)
		return nil, err
	}
	e := &etcdProc{child: c, url: curl, cli: cli}
	ok, err := waitUntil(ctx, time.Now().Add(30*time.Second), func() bool {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Get(gctx, "/bench-health")
		return err == nil || c.Exited()
	})
	switch {
	case err != nil:
		e.Close()
		return nil, err
	case c.Exited():
		e.Close()
		return nil, fmt.Errorf("etcd exited before it answered (%v):\n%s", c.err, c.Tail())
	case !ok:
		e.Close()
		return nil, fmt.Errorf("etcd: no answer within 30s:\n%s", c.Tail())
	}
	return e, nil
}

// Close closes the client and stops etcd.
func (e *etcdProc) Close() {
	_ = e.cli.Close()
	e.Stop(10 * time.Second)
}

// owners counts, for each of ids, the targets under prefix whose state it
// wrote.
func (e *etcdProc) owners(ctx context.Context, prefix string, ids []string) ([]int, int, error) {
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := e.cli.Get(gctx, prefix+"states/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	records := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		records[i] = kv.Value
	}
	owned, others := countWriters(records, ids)
	return owned, others, nil
}

// forget deletes everything under prefix: the next runs start on a
// registry no bigger than their own.
func (e *etcdProc) forget(ctx context.Context, prefix string) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := e.cli.Delete(dctx, prefix, clientv3.WithPrefix())
	return err
}

// runReplicaPoint measures, against one farm of p.Targets targets, one
// pulsed on the embedded registry, then each of o.Replicas counts of
// replicas on etcd, one run after the other.
func runReplicaPoint(ctx context.Context, o Options, e *etcdProc, p ScalePoint) (ReplicaPoint, error) {
	out := ReplicaPoint{Targets: p.Targets, Interval: p.Interval}
	farm, err := startFarm(o, p)
	if err != nil {
		return out, err
	}
	defer farm.Close()
	for n, k := range append([]int{0}, o.Replicas...) {
		if n > 0 {
			farm.Forget()
			if err := sleepCtx(ctx, time.Second); err != nil {
				return out, err
			}
		}
		r, err := runReplicas(ctx, o, farm, p, k, e)
		if err != nil {
			return out, fmt.Errorf("%s: %w", replicaSystem(k), err)
		}
		out.Runs = append(out.Runs, r)
	}
	return out, nil
}

// runReplicas starts k pulsed on etcd (k = 0: one on the embedded registry
// with a fresh -data-dir, which persists like etcd does), registers the
// farm's targets through the first, waits until all are healthy and
// measures the steady window over every replica, and etcd apart.
func runReplicas(ctx context.Context, o Options, farm *Farm, p ScalePoint, k int, e *etcdProc) (*ReplicaResult, error) {
	r := &ReplicaResult{Replicas: k, SystemResult: SystemResult{System: replicaSystem(k), Targets: p.Targets, Interval: p.Interval}}
	var procs []*pulsedProc
	prefix := ""
	defer func() {
		var wg sync.WaitGroup // at once: no replica takes over another's targets as it leaves
		for _, pr := range procs {
			wg.Go(pr.Close)
		}
		wg.Wait()
		if prefix != "" {
			if err := e.forget(context.WithoutCancel(ctx), prefix); err != nil {
				o.logf("  %s: deleting %s from etcd: %v", r.System, prefix, err)
			}
		}
	}()
	var ids []string
	if k == 0 {
		dir, err := os.MkdirTemp(o.WorkDir, "pulsed-data-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		pr, err := startPulsed(ctx, o.PulsedBin, pulsedArgs(o, p.Interval, "-data-dir", dir))
		if err != nil {
			return nil, err
		}
		procs = append(procs, pr)
	} else {
		prefix = replicaPrefix(p, k)
		for i := range k {
			ids = append(ids, replicaID(i))
			pr, err := startPulsed(ctx, o.PulsedBin, pulsedArgs(o, p.Interval,
				"-registry", "etcd", "-etcd-endpoints", e.url, "-etcd-prefix", prefix, "-replica-id", replicaID(i)))
			if err != nil {
				return nil, err
			}
			procs = append(procs, pr)
		}
		// Every replica must see all k before the first target arrives,
		// or targets would move between them during the warm-up.
		for _, pr := range procs {
			var seen []string
			ok, err := waitUntil(ctx, time.Now().Add(30*time.Second), func() bool {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				resp, err := pr.api.ListTargets(lctx, &pb.ListTargetsRequest{})
				seen = resp.GetChecker().GetReplicas()
				return err == nil && len(seen) == k
			})
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("a replica saw %v, not all %d replicas, within 30s", seen, k)
			}
		}
	}
	var pids []int
	for _, pr := range procs {
		pids = append(pids, pr.Pid())
		rss, _, err := procMem(pr.Pid())
		if err != nil {
			return nil, err
		}
		r.BaseRSS += rss
	}
	etcdPid := 0
	if k > 0 {
		etcdPid = e.Pid()
	}

	tr, unwatch, err := watchAll(ctx, procs[0].api, p.Targets)
	if err != nil {
		return nil, err
	}
	defer unwatch()

	start := time.Now()
	cpu0, err := sumCPU(pids)
	if err != nil {
		return nil, err
	}
	etcd0, err := sumCPU(nonzero(etcdPid))
	if err != nil {
		return nil, err
	}
	if err := procs[0].register(ctx, farm, o.BodyContains); err != nil {
		return nil, err
	}
	o.logf("  %s: registered %d targets in %s", r.System, p.Targets, time.Since(start).Round(time.Millisecond))
	all, err := waitUntil(ctx, time.Now().Add(time.Duration(o.Rise+2)*p.Interval+30*time.Second), func() bool {
		return tr.nHealthy.Load() == int64(p.Targets)
	})
	if err != nil {
		return nil, err
	}
	r.Setup = time.Since(start)
	cpu1, err := sumCPU(pids)
	if err != nil {
		return nil, err
	}
	etcd1, err := sumCPU(nonzero(etcdPid))
	if err != nil {
		return nil, err
	}
	r.SetupCPU, r.SetupEtcdCPU = cpu1-cpu0, etcd1-etcd0
	r.Healthy = int(tr.nHealthy.Load())
	if !all {
		r.Notes = append(r.Notes, fmt.Sprintf("only %d of %d targets became healthy before the window", r.Healthy, p.Targets))
	}
	o.logf("  %s: %d of %d healthy after %s", r.System, r.Healthy, p.Targets, r.Setup.Round(time.Millisecond))
	if err := sleepCtx(ctx, p.Interval); err != nil { // the warm-up's transitions are written and delivered
		return nil, err
	}
	if err := steady(ctx, o, farm, pids, etcdPid, &r.SystemResult); err != nil {
		return nil, err
	}
	if k > 0 {
		if r.Owned, r.OwnedOther, err = e.owners(ctx, prefix, ids); err != nil {
			return nil, fmt.Errorf("reading the states' writers from etcd: %w", err)
		}
		o.logf("  %s: states written per replica %v (by none of them: %d)", r.System, r.Owned, r.OwnedOther)
	}
	if errp := tr.err.Load(); errp != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("the tracking stream ended: %v", *errp))
	}
	for i, pr := range procs {
		if pr.Exited() {
			return nil, fmt.Errorf("pulsed %d of %d exited during the run:\n%s", i+1, len(procs), pr.Tail())
		}
	}
	if k > 0 && e.Exited() {
		return nil, fmt.Errorf("etcd exited during the run:\n%s", e.Tail())
	}
	return r, nil
}
