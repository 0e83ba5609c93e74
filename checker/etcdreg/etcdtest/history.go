package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
)

// GroupRev is a group's count at one revision of etcd's history.
type GroupRev struct {
	Rev       int64
	Unhealthy int // targets whose stored state is not routable
	Held      int // targets whose stored state is held by the panic threshold
}

// GroupHistory replays etcd's whole history of the states stored under
// prefix (a pulsed fleet's, e.g. "/pulse/", the only one in this etcd)
// for the named targets, and
// returns their counts after every revision that changed one of them, in
// revision order. A target without a stored state counts as routable.
func (s *Server) GroupHistory(t testing.TB, prefix string, names []string) []GroupRev {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	head, err := cli.Get(ctx, "/none")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[prefix+"states/"+n] = true
	}
	type rec struct {
		State checker.State `json:"state"`
		Held  bool          `json:"held"`
	}
	states := map[string]rec{}
	var out []GroupRev
	// The whole prefix, whose last event is at the head revision (a
	// test's etcd holds one fleet): the replay ends there.
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			t.Fatalf("read etcd's history: %v", err)
		}
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			if !want[key] {
				continue
			}
			var r rec
			if ev.Type == clientv3.EventTypePut {
				if err := json.Unmarshal(ev.Kv.Value, &r); err != nil {
					t.Fatalf("state %s at %d: %v", key, ev.Kv.ModRevision, err)
				}
				states[key] = r
			} else {
				delete(states, key)
			}
			g := GroupRev{Rev: ev.Kv.ModRevision}
			for _, st := range states {
				if st.State != checker.StateHealthy && st.State != checker.StateSuspect {
					g.Unhealthy++
				}
				if st.Held {
					g.Held++
				}
			}
			if n := len(out); n > 0 && out[n-1].Rev == g.Rev {
				out[n-1] = g // one transaction, several states: its end counts
			} else {
				out = append(out, g)
			}
		}
		if lastRev(resp) >= head.Header.Revision {
			break
		}
	}
	return out
}

func lastRev(resp clientv3.WatchResponse) int64 {
	if n := len(resp.Events); n > 0 {
		return resp.Events[n-1].Kv.ModRevision
	}
	return 0
}

// String shows a count as "rev:unhealthy/held".
func (g GroupRev) String() string { return fmt.Sprintf("%d:%d/%d", g.Rev, g.Unhealthy, g.Held) }
