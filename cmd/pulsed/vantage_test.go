package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The vantage flags: a label is checked as etcd's registry checks it, the
// suspect policy's bounds are named, and all three need -registry etcd.
func TestVantageFlags(t *testing.T) {
	etcd := []string{"-registry", "etcd", "-etcd-endpoints", "http://127.0.0.1:2379"}
	for _, tt := range []struct {
		args []string
		want string // "" means accepted
	}{
		{append(etcd, "-vantage", "zone-a", "-vantage-suspect-share", "1", "-vantage-suspect-min", "1", "-vantage-suspect-after", "3s"), ""},
		{append(etcd, "-vantage", "eu-west-1a:rack.7"), ""},
		{append(etcd, "-vantage", "zone a"), `-vantage: vantage label "zone a": only letters, digits and ._:- are allowed`},
		{append(etcd, "-vantage", ""), `-vantage: vantage label "": must be 1 to 64 characters`},
		{append(etcd, "-vantage", strings.Repeat("z", 65)), "-vantage: vantage label"},
		{append(etcd, "-vantage-suspect-share", "0"), "-vantage-suspect-share must be in (0, 1], got 0"},
		{append(etcd, "-vantage-suspect-share", "1.5"), "-vantage-suspect-share must be in (0, 1], got 1.5"},
		{append(etcd, "-vantage-suspect-share", "NaN"), "-vantage-suspect-share must be in (0, 1], got NaN"},
		{append(etcd, "-vantage-suspect-min", "0"), "-vantage-suspect-min must be at least 1, got 0"},
		{append(etcd, "-vantage-suspect-after", "0s"), "-vantage-suspect-after must be above 0 and at most 1h0m0s, got 0s"},
		{append(etcd, "-vantage-suspect-after", "2h"), "-vantage-suspect-after must be above 0 and at most 1h0m0s, got 2h0m0s"},
		{[]string{"-vantage-suspect-after", "5s"}, "-vantage-suspect-after needs -registry etcd"},
		{[]string{"-vantage", "zone-a"}, "-vantage needs -registry etcd"},
		{[]string{"-vantage-suspect-share", "0.3"}, "-vantage-suspect-share needs -registry etcd"},
		{[]string{"-vantage-suspect-min", "5"}, "-vantage-suspect-min needs -registry etcd"},
	} {
		var stderr bytes.Buffer
		cfg, err := parseFlags(tt.args, &stderr)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v, want accepted", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: %v, want an error containing %q", tt.args, err, tt.want)
		case tt.want == "" && slices.Contains(tt.args, "-vantage-suspect-min") && (cfg.registry.suspect != checker.VantagePolicy{SuspectShare: 1, SuspectMin: 1, SuspectAfter: 3 * time.Second}):
			t.Errorf("%q: policy %+v", tt.args, cfg.registry.suspect)
		}
	}
	var stderr bytes.Buffer
	cfg, err := parseFlags(etcd, &stderr)
	if err != nil || cfg.registry.vantage != "" || (cfg.registry.suspect != checker.VantagePolicy{SuspectShare: checker.DefaultSuspectShare, SuspectMin: checker.DefaultSuspectMin, SuspectAfter: checker.DefaultSuspectAfter}) {
		t.Errorf("defaults: %q, %+v, %v; want no label (the replica ID) and the checker's defaults", cfg.registry.vantage, cfg.registry.suspect, err)
	}
}

// A targets file takes vantages and quorum, checks their bounds with the
// line, and a single pulsed refuses more than one vantage as AddTarget
// does.
func TestTargetsFileVantages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "targets.yaml")
	writeFile(t, path, "targets:\n  - name: web-1\n    tcp: {address: \"127.0.0.1:1\"}\n    vantages: 3\n    quorum: 2\n")
	specs, err := loadTargets(path, checker.StandardDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if specs[0].Vantages != 3 || specs[0].Quorum != 2 {
		t.Errorf("vantages %d, quorum %d; want 3, 2", specs[0].Vantages, specs[0].Quorum)
	}
	for _, tt := range []struct{ body, want string }{
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    vantages: 300\n", `:2: target "a": vantages: must be between 0 (one: the owner's) and 9, got 300`},
		{"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    vantages: 3\n    quorum: 4\n", `:2: target "a": quorum: must be between 0 (a majority of vantages) and vantages (3), got 4`},
	} {
		writeFile(t, path, tt.body)
		if _, err := loadTargets(path, checker.StandardDefaults()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.body, err, tt.want)
		}
	}

	c, err := checker.New(checker.Config{NewProber: func(probe.Spec) (checker.Prober, error) { return nopProber{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = applyTargets(c, specs, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `target "web-1": vantages: must be at most 1 here (a single pulsed is one vantage: probing from several needs replicas`) {
		t.Errorf("applied on a single pulsed: %v", err)
	}
}

// Three replicas in three zones probe a target asking for three
// vantages: every replica lists the three verdicts, one per zone, and
// the target goes down with a transition that carries them.
func TestThreeVantagesOnEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, time.Second)
	bin := buildPulsed(t)
	var clients [3]pb.HealthCheckerClient
	var reps [3]*pulsed
	for i := range clients {
		p := startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint, "-etcd-prefix", e2ePrefix,
			"-etcd-lease-ttl", "3s", "-replica-id", fmt.Sprintf("r%d", i+1), "-vantage", fmt.Sprintf("zone-%c", 'a'+i),
			"-interval", "200ms", "-timeout", "150ms", "-rise", "1", "-fall", "1")
		clients[i], reps[i] = dial(t, p.Addr), p
	}
	eventually(t, "three replicas", func() bool {
		return len(listTargets(t, clients[2]).GetChecker().GetReplicas()) == 3
	})
	backend := newSwitchServer(t)
	if _, err := clients[0].AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
		Name: "web-1", Vantages: 3, Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: backend.URL}},
	}}); err != nil {
		t.Fatal(err)
	}
	verdicts := func(st *pb.TargetStatus) string {
		var out []string
		for _, v := range st.GetVantages() {
			out = append(out, v.GetLabel()+"="+v.GetState().String())
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	for i, c := range clients {
		eventually(t, fmt.Sprintf("r%d lists three healthy vantages", i+1), func() bool {
			ts := listTargets(t, c).GetTargets()
			return len(ts) == 1 && verdicts(ts[0]) == "zone-a=STATE_HEALTHY zone-b=STATE_HEALTHY zone-c=STATE_HEALTHY" &&
				ts[0].GetState() == pb.State_STATE_HEALTHY
		})
	}

	// r2's metrics and status page: each vantage judged on web-1, none
	// suspect; the row lists the three verdicts.
	base := "http://" + regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(reps[1].Logs())[1]
	eventually(t, "r2's vantage metrics", func() bool {
		_, body := httpGet(t, base+"/metrics")
		for _, z := range []string{`replica="r1",vantage="zone-a"`, `replica="r2",vantage="zone-b"`, `replica="r3",vantage="zone-c"`} {
			if !strings.Contains(body, "pulse_vantage_judged_targets{"+z+"} 1") || !strings.Contains(body, "pulse_vantage_suspect{"+z+"} 0") {
				return false
			}
		}
		return true
	})
	if _, body := httpGet(t, base+"/api/targets"); !strings.Contains(body, `"label":"zone-a","state":"healthy"`) || !strings.Contains(body, `"label":"zone-c","state":"healthy"`) {
		t.Errorf("r2's /api/targets lacks the vantages:\n%s", body)
	}

	s := openStream(t, clients[1], listTargets(t, clients[1]).GetRevision())
	backend.down.Store(true)
	var tr *pb.Transition
	eventually(t, "web-1 down by its vantages on r2's stream", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ev := range s.evs {
			if x := ev.GetTransition(); x != nil && x.GetTo() == pb.State_STATE_UNHEALTHY {
				tr = x
				return true
			}
		}
		return false
	})
	t.Logf("%s (%s)", tr.GetText(), tr.GetReason())
	if !strings.HasPrefix(tr.GetReason(), "vantages: ") || len(tr.GetVantages()) != 3 {
		t.Fatalf("transition %v: want its reason and verdicts from three vantages", tr)
	}
	unhealthy := 0
	for _, v := range tr.GetVantages() {
		if v.GetState() == pb.State_STATE_UNHEALTHY && strings.Contains(v.GetError(), "503") {
			unhealthy++
		}
	}
	if unhealthy < 2 { // the quorum, a majority of three
		t.Errorf("transition %v: want at least 2 vantages unhealthy with the probe's error", tr)
	}
}
