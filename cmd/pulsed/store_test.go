package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// storedDir returns a data dir whose store holds the given specs and raw
// spec records (name to bytes), written as an older or damaged pulsed
// could have left them.
func storedDir(t *testing.T, specs []checker.Spec, raw map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	s, err := boltstore.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		if err := s.PutSpec(sp); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, boltstore.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		for name, v := range raw {
			if err := tx.Bucket([]byte("specs")).Put([]byte(name), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStoredTargetsThatTodaysRulesRefuseAreQuarantined: records that the
// running pulsed refuses (a denied egress address, a spec that no longer
// validates, a probe kind it does not know, bytes it cannot decode) never
// keep the real binary from becoming ready: they are listed with the
// reason, never routable, removable, and fixable by AddTarget.
func TestStoredTargetsThatTodaysRulesRefuseAreQuarantined(t *testing.T) {
	ok := okServer(t)
	dir := storedDir(t, []checker.Spec{
		{Name: "ok-1", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: ok.URL}}, Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 1, Fall: 1},
		{Name: "meta", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://169.254.169.254/latest"}}},
		{Name: "slow", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}, Interval: time.Second, Timeout: 5 * time.Second},
		// The interval an older pulsed accepted and whose schedule wedged
		// the checker.
		{Name: "huge", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}, Interval: math.MaxInt64},
	}, map[string]string{
		"udp-1":   `{"v":1,"spec":{"Name":"udp-1","Probe":{"UDP":{"Address":"127.0.0.1:53"}}}}`,
		"garbled": `{"v":1,"spec":{"Name":`,
		"future":  `{"v":3,"spec":{"Name":"future"}}`,
	})
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-data-dir", dir)
	m := regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(p.Logs())
	if m == nil {
		t.Fatalf("no http address in the log:\n%s", p.Logs())
	}
	eventually(t, "/readyz to answer 200", func() bool {
		resp, err := http.Get("http://" + m[1] + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	client := dial(t, p.Addr)
	ctx := t.Context()
	wantWhy := map[string]string{
		"meta":    "denied by egress policy",
		"slow":    "timeout: must be at most the interval",
		"huge":    "interval: must be at most 24h",
		"udp-1":   "exactly one",
		"garbled": "stored spec: unexpected end of JSON input",
		"future":  "record version 3",
	}
	list, err := client.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, st := range list.GetTargets() {
		name, why := st.GetSpec().GetName(), st.GetQuarantined()
		want, bad := wantWhy[name]
		switch {
		case !bad && why != "":
			t.Errorf("%s quarantined (%q), want it probed", name, why)
		case bad && !strings.Contains(why, want):
			t.Errorf("%s: quarantined = %q, want a reason containing %q", name, why, want)
		case bad && st.GetRoutable():
			t.Errorf("quarantined %s is routable", name)
		}
		seen[name] = true
	}
	for name := range wantWhy {
		if !seen[name] {
			t.Errorf("stored target %s is not listed", name)
		}
	}
	if !strings.Contains(p.Logs(), "stored target quarantined") {
		t.Errorf("the log does not say that targets were quarantined:\n%s", p.Logs())
	}
	eventually(t, "ok-1 to be healthy", func() bool {
		h, err := client.Healthy(ctx, &pb.HealthyRequest{})
		return err == nil && len(h.GetNames()) == 1 && h.GetNames()[0] == "ok-1"
	})

	if _, err := client.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: "garbled"}); err != nil {
		t.Errorf("RemoveTarget of a quarantined target: %v", err)
	}
	fixed := &pb.Target{Name: "slow", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}, Interval: durationpb.New(time.Second)}
	if resp, err := client.AddTarget(ctx, &pb.AddTargetRequest{Target: fixed}); err != nil || resp.GetCreated() || resp.GetStatus().GetQuarantined() != "" {
		t.Errorf("AddTarget fixing a quarantined target: %v, %v", resp, err)
	}
	if _, err := client.ReportOutcome(ctx, &pb.ReportOutcomeRequest{Target: "udp-1"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ReportOutcome on a quarantined target: %v, want FailedPrecondition", err)
	}
	p.stop(t)

	// The removal and the fix were stored: after a restart garbled is gone
	// and slow is probed.
	p = startPulsed(t, bin, "-data-dir", dir)
	client = dial(t, p.Addr)
	list, err = client.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range list.GetTargets() {
		switch st.GetSpec().GetName() {
		case "garbled":
			t.Error("the removed quarantined target came back")
		case "slow":
			if st.GetQuarantined() != "" {
				t.Errorf("the fixed target is quarantined again: %q", st.GetQuarantined())
			}
		}
	}
	p.stop(t)
}

// TestDamagedStoreExitsWithAClearError: a damaged pulse.db stops the real
// binary at start with exit status 2 and a message that names the file and
// says what to do, never a Go panic.
func TestDamagedStoreExitsWithAClearError(t *testing.T) {
	bin := buildPulsed(t)
	// A real store with targets in it, to damage.
	good := storedDir(t, nil, nil)
	p := startPulsed(t, bin, "-data-dir", good)
	client := dial(t, p.Addr)
	for i := range 200 {
		tg := tcpTarget("t-" + strings.Repeat("x", i%40) + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
			t.Fatal(err)
		}
	}
	p.stop(t)
	orig, err := os.ReadFile(filepath.Join(good, boltstore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	rng := rand.New(rand.NewPCG(5, 6))
	corrupt := func(b []byte, from, to int) []byte {
		b = append([]byte(nil), b...)
		for i := from; i < to && i < len(b); i++ {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	random := make([]byte, 8*page)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"truncated", orig[:page/2]},
		{"random", random},
		{"meta pages corrupted", corrupt(orig, 0, 2*page)},
		{"data pages corrupted", corrupt(orig, 2*page, len(orig))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, boltstore.FileName)
			if err := os.WriteFile(path, tc.bytes, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", dir).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("pulsed on a damaged store: %v, want exit status 2\n%s", err, out)
			}
			if !strings.Contains(string(out), path+" is damaged (") || !strings.Contains(string(out), `restore a backup (docs/operations/durability.md, "Backup") or move it away`) {
				t.Errorf("pulsed does not say what is damaged and what to do:\n%s", out)
			}
			if strings.Contains(string(out), "panic") || strings.Contains(string(out), "goroutine ") {
				t.Errorf("pulsed panicked:\n%s", out)
			}
		})
	}
}

// TestStoreDamageThatKilledThePulsedExitsWithAClearError: damage that bbolt
// trusts, and that used to kill pulsed (a freelist count of 2^40, an 8 TB
// allocation) or hang it until memory ran out (a branch page whose child
// is itself, a bucket root at the freelist page), stops the real binary at
// start with exit status 2 and a message naming the file, the page and
// the problem.
func TestStoreDamageThatKilledThePulsedExitsWithAClearError(t *testing.T) {
	bin := buildPulsed(t)
	// A real store with enough targets for the specs bucket to be a tree
	// of pages under a branch page, added one at a time so that the
	// freelist lists the pages the earlier versions of the tree used.
	good := t.TempDir()
	s, err := boltstore.Open(good, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		name := "t-" + strings.Repeat("x", i%40) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if err := s.PutSpec(checker.Spec{Name: name, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}, Interval: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(good, boltstore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	// Where the current meta page says the freelist and the root bucket
	// are, and the specs bucket's root-page field in the root bucket.
	ne := binary.NativeEndian
	pageSize := int(ne.Uint32(orig[16+8:]))
	meta := orig[16:]
	if m1 := orig[pageSize+16:]; ne.Uint64(m1[48:]) > ne.Uint64(meta[48:]) {
		meta = m1
	}
	freelist, root := int(ne.Uint64(meta[32:])), int(ne.Uint64(meta[16:]))
	specsRoot := -1 // the offset in the file of the specs bucket's root page id
	rp := orig[root*pageSize:]
	for i := range int(ne.Uint16(rp[10:])) {
		e := 16 + 16*i
		pos, ksize := int(ne.Uint32(rp[e+4:])), int(ne.Uint32(rp[e+8:]))
		if string(rp[e+pos:e+pos+ksize]) == "specs" {
			specsRoot = root*pageSize + e + pos + ksize
		}
	}
	if specsRoot < 0 {
		t.Fatal("no specs bucket in the store's root bucket")
	}
	branch := int(ne.Uint64(orig[specsRoot:]))
	if flags := ne.Uint16(orig[branch*pageSize+8:]); flags != 0x01 {
		t.Fatalf("the specs bucket's root page %d has flags %#x, want a branch page", branch, flags)
	}
	damaged := func(at int, put func(b []byte)) []byte {
		b := bytes.Clone(orig)
		put(b[at:])
		return b
	}
	for _, tc := range []struct {
		name  string
		bytes []byte
		want  string
	}{
		{"freelist count of 2^40", damaged(freelist*pageSize, func(b []byte) {
			ne.PutUint16(b[10:], 0xFFFF) // the count is in the first element
			ne.PutUint64(b[16:], 1<<40)
		}), fmt.Sprintf("freelist page %d: says it lists 1099511627776 free pages", freelist)},
		{"branch page whose child is itself", damaged(branch*pageSize+16+8, func(b []byte) { ne.PutUint64(b, uint64(branch)) }),
			fmt.Sprintf("branch page %d (element 0) points at page %d, which is already in the tree (a loop", branch, branch)},
		{"bucket root at the freelist page", damaged(specsRoot, func(b []byte) { ne.PutUint64(b, uint64(freelist)) }),
			fmt.Sprintf(`page %d: bucket "specs" points at the freelist page %d`, root, freelist)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, boltstore.FileName)
			if err := os.WriteFile(path, tc.bytes, 0o600); err != nil {
				t.Fatal(err)
			}
			// A pulsed that hangs is stopped (and fails the test) at the
			// deadline.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0", "-http-listen", "", "-data-dir", dir).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("pulsed on a damaged store: %v, want exit status 2\n%.2000s", err, out)
			}
			if want := path + " is damaged (" + tc.want; !strings.Contains(string(out), want) {
				t.Errorf("pulsed does not say %q:\n%s", want, out)
			}
			if !strings.Contains(string(out), `restore a backup (docs/operations/durability.md, "Backup") or move it away`) {
				t.Errorf("pulsed does not say what to do:\n%s", out)
			}
		})
	}
}
