package main

import "sync"

// rotor is a round robin over a fixed pool of n backends that skips
// the ones that are down without burning a turn on them.
//
// A pick starts at the rotor's position and tries at most n backends, in
// order, wrapping around. The first that is up is chosen and the position
// moves to the one after it, so the next pick continues from there; a down
// backend is stepped over within the pick, and its turn is not handed to
// anybody twice. With backends 0, 1, 2 and 1 down, picks go 0, 2, 0, 2. When
// none is up the pick fails and the position stays where it was.
//
// A rotor is safe for concurrent use; its zero value is a rotor at
// position 0.
type rotor struct {
	mu  sync.Mutex // protects pos
	pos int
}

// next picks one of n backends, asking up(i) whether backend i may take
// traffic; up is called at most n times. ok is false when none is up.
func (r *rotor) next(n int, up func(i int) bool) (i int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= 0 {
		return 0, false
	}
	start := r.pos % n
	for step := range n {
		i := (start + step) % n
		if up(i) {
			r.pos = (i + 1) % n
			return i, true
		}
	}
	return 0, false
}
