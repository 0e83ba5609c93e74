package main

import (
	"slices"
	"sync"
	"testing"
)

// picks runs n picks over a pool whose up backends are up and returns the
// chosen indexes (-1 for a failed pick) and the most up() calls one pick
// made.
func picks(r *rotor, up []bool, n int) (got []int, maxSteps int) {
	for range n {
		steps := 0
		i, ok := r.next(len(up), func(i int) bool {
			steps++
			return up[i]
		})
		if !ok {
			i = -1
		}
		got = append(got, i)
		maxSteps = max(maxSteps, steps)
	}
	return got, maxSteps
}

func TestRotor(t *testing.T) {
	for _, tc := range []struct {
		name string
		up   []bool
		n    int
		want []int
	}{
		{"all up: plain round robin", []bool{true, true, true}, 7, []int{0, 1, 2, 0, 1, 2, 0}},
		{"one down is skipped without burning a turn", []bool{true, false, true}, 6, []int{0, 2, 0, 2, 0, 2}},
		{"first down", []bool{false, true, true}, 4, []int{1, 2, 1, 2}},
		{"last down", []bool{true, true, false}, 4, []int{0, 1, 0, 1}},
		{"only one up", []bool{false, false, true, false}, 3, []int{2, 2, 2}},
		{"all down: none", []bool{false, false, false}, 3, []int{-1, -1, -1}},
		{"single backend", []bool{true}, 2, []int{0, 0}},
		{"empty pool", nil, 2, []int{-1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r rotor
			got, steps := picks(&r, tc.up, tc.n)
			if !slices.Equal(got, tc.want) {
				t.Errorf("picks = %v, want %v", got, tc.want)
			}
			if steps > len(tc.up) {
				t.Errorf("a pick took %d steps over a pool of %d", steps, len(tc.up))
			}
		})
	}
}

// A backend that goes down is stepped over from the next pick on, and one
// that comes back gets its turn again; a failed pick leaves the position.
func TestRotorStateChanges(t *testing.T) {
	var r rotor
	up := []bool{true, true, true}
	got, _ := picks(&r, up, 2) // 0, 1
	up[2] = false
	more, _ := picks(&r, up, 2) // 2 is down: 0, 1
	got = append(got, more...)
	up[0], up[1] = false, false
	more, _ = picks(&r, up, 1) // none
	got = append(got, more...)
	up[2] = true
	more, _ = picks(&r, up, 2) // 2, 2
	got = append(got, more...)
	up[0] = true
	more, _ = picks(&r, up, 3) // 0, 2, 0
	got = append(got, more...)
	if want := []int{0, 1, 0, 1, -1, 2, 2, 0, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("picks = %v, want %v", got, want)
	}
}

// Over a long sequence every up backend gets the same share, give or take
// one, whatever the pattern of down ones, and a pick never takes more than
// pool-size steps.
func TestRotorFairness(t *testing.T) {
	const n = 7
	for mask := 1; mask < 1<<n; mask++ {
		up := make([]bool, n)
		var live int
		for i := range up {
			up[i] = mask&(1<<i) != 0
			if up[i] {
				live++
			}
		}
		var r rotor
		got, steps := picks(&r, up, 10*live+3)
		if steps > n {
			t.Fatalf("mask %b: a pick took %d steps", mask, steps)
		}
		counts := make([]int, n)
		for _, i := range got {
			if i < 0 || !up[i] {
				t.Fatalf("mask %b: picked %d", mask, i)
			}
			counts[i]++
		}
		lo, hi := len(got), 0
		for i, c := range counts {
			if up[i] {
				lo, hi = min(lo, c), max(hi, c)
			}
		}
		if hi-lo > 1 {
			t.Errorf("mask %b: shares %v differ by more than one", mask, counts)
		}
	}
}

// Concurrent picks are safe and still fair: each of 8 goroutines picks 300
// times over 3 up backends, and each backend gets exactly a third.
func TestRotorConcurrent(t *testing.T) {
	var r rotor
	up := []bool{true, false, true, true}
	var mu sync.Mutex
	counts := make([]int, len(up))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 300 {
				i, ok := r.next(len(up), func(i int) bool { return up[i] })
				if !ok {
					t.Error("no pick with three backends up")
					return
				}
				mu.Lock()
				counts[i]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if want := []int{800, 0, 800, 800}; !slices.Equal(counts, want) {
		t.Errorf("counts = %v, want %v", counts, want)
	}
}
