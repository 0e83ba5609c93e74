package etcdreg

import (
	"fmt"
	"slices"
	"testing"

	"github.com/pulsehealth/pulse/checker"
)

func memberIDs(vs []checker.Vantage) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Member
	}
	return out
}

// Vantages are assigned by rendezvous hashing: the first is the target's
// owner; a member leaving moves only the vantages it held (each to one
// replacement), and one joining takes only the places it ranks into.
func TestVantagesMoveOnlyWhatMembershipRequires(t *testing.T) {
	members := []string{"r1", "r2", "r3", "r4", "r5"}
	const k = 3
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("target-%d", i)
	}
	before := map[string][]string{}
	held := map[string]int{}
	for _, n := range names {
		vs := memberIDs(vantagesOf(members, nil, n, k))
		if len(vs) != k {
			t.Fatalf("%s: %d vantages, want %d", n, len(vs), k)
		}
		if vs[0] != owner(members, n) {
			t.Fatalf("%s: first vantage %s, owner %s", n, vs[0], owner(members, n))
		}
		before[n] = vs
		for _, m := range vs {
			held[m]++
		}
	}
	for m, n := range held {
		if n < 450 || n > 750 { // 600 each on average
			t.Errorf("%s holds %d of 3,000 vantages: unbalanced", m, n)
		}
	}

	// r3 leaves: a target it did not probe keeps its vantages; one it
	// did keeps the other two.
	left := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == "r3" })
	for _, n := range names {
		after := memberIDs(vantagesOf(left, nil, n, k))
		was := before[n]
		if !slices.Contains(was, "r3") {
			if !slices.Equal(slices.Sorted(slices.Values(after)), slices.Sorted(slices.Values(was))) {
				t.Errorf("%s: r3 left, which did not probe it, and its vantages moved from %v to %v", n, was, after)
			}
			continue
		}
		for _, m := range was {
			if m != "r3" && !slices.Contains(after, m) {
				t.Errorf("%s: r3 left, and %s lost its vantage too (%v -> %v)", n, m, was, after)
			}
		}
	}

	// r6 joins: every target's vantages are its old ones, or the old ones
	// with one of them replaced by r6.
	joined := append(slices.Clone(members), "r6")
	for _, n := range names {
		after := memberIDs(vantagesOf(joined, nil, n, k))
		changed := 0
		for _, m := range after {
			if !slices.Contains(before[n], m) {
				changed++
				if m != "r6" {
					t.Errorf("%s: r6 joined and %s took a vantage (%v -> %v)", n, m, before[n], after)
				}
			}
		}
		if changed > 1 {
			t.Errorf("%s: r6 joined and %d vantages moved", n, changed)
		}
	}
}

// Vantages go to distinct labels while there are enough; then the rest.
func TestVantagesPreferDistinctLabels(t *testing.T) {
	members := []string{"a1", "a2", "a3", "b1", "c1"}
	labels := map[string]string{"a1": "zone-a", "a2": "zone-a", "a3": "zone-a", "b1": "zone-b", "c1": "zone-c"}
	for i := range 200 {
		n := fmt.Sprintf("t%d", i)
		vs := vantagesOf(members, labels, n, 3)
		seen := map[string]bool{}
		for _, v := range vs {
			seen[v.Label] = true
		}
		if len(seen) != 3 {
			t.Fatalf("%s: vantages %v are not in three zones", n, vs)
		}
		if vs := vantagesOf(members, labels, n, 5); len(vs) != 5 {
			t.Fatalf("%s: asked for 5 of 5 members, got %v", n, vs)
		}
		if vs := vantagesOf(members, labels, n, 9); len(vs) != 5 {
			t.Fatalf("%s: asked for 9 of 5 members, got %d", n, len(vs))
		}
	}
}
