package checker

// Filter selects the transitions a Subscription receives. Empty fields match
// everything; when both are set a transition must match both.
type Filter struct {
	Group string
	Names []string
}

// Subscription receives transitions as the checker applies them, in
// revision order. Its methods are safe for concurrent use.
//
// Delivery never blocks the checker: each transition is offered to a
// bounded buffer, and a subscription whose buffer is full is ended with
// ErrSubscriberTooSlow instead of silently missing a transition.
type Subscription struct {
	c     *Checker
	group string
	names map[string]bool // nil means any name
	ch    chan Transition
	err   error // why the subscription ended; guarded by c.mu
	ended bool  // guarded by c.mu
}

// Subscribe returns a subscription to transitions matching f. If the
// checker is closed, the subscription is already ended with ErrClosed.
func (c *Checker) Subscribe(f Filter) *Subscription {
	s := &Subscription{c: c, group: f.Group, ch: make(chan Transition, c.subBuf)}
	if len(f.Names) > 0 {
		s.names = make(map[string]bool, len(f.Names))
		for _, n := range f.Names {
			s.names[n] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		s.ended, s.err = true, ErrClosed
		close(s.ch)
		return s
	}
	c.subs[s] = struct{}{}
	return s
}

// C delivers the transitions. It is closed when the subscription ends; Err
// then says why.
func (s *Subscription) C() <-chan Transition { return s.ch }

// Err returns nil while the subscription is live or after Close, and
// ErrSubscriberTooSlow or ErrClosed when the checker ended it.
func (s *Subscription) Err() error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.err
}

// Close ends the subscription. It is idempotent.
func (s *Subscription) Close() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.endLocked(s, nil)
}

func (s *Subscription) matches(tr Transition) bool {
	return (s.group == "" || s.group == tr.Group) && (s.names == nil || s.names[tr.Target])
}

func (c *Checker) endLocked(s *Subscription, err error) {
	if s.ended {
		return
	}
	s.ended, s.err = true, err
	delete(c.subs, s)
	close(s.ch)
}

// publishLocked offers tr to every matching subscriber without blocking.
func (c *Checker) publishLocked(tr Transition) {
	for s := range c.subs {
		if !s.matches(tr) {
			continue
		}
		select {
		case s.ch <- tr:
		default:
			c.endLocked(s, ErrSubscriberTooSlow)
		}
	}
}
