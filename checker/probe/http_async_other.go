//go:build !linux

package probe

import "time"

// Asynchronous probes need Linux's epoll: elsewhere every probe blocks.

type (
	asyncState struct{}
	asyncConn  struct{}
	asyncProbe struct{}
)

func (*asyncConn) forget()     {}
func (f *Factory) closeAsync() {}

// attach has nothing to do here: a kept connection stays a net.Conn.
func (*leanConn) attach() error { return nil }

// closeKept is never called here: conn is never nil.
func (*leanConn) closeKept(bool) {}

// ProbeAsync never starts a probe here: Probe does.
func (p *leanProber) ProbeAsync(time.Time, func(error)) bool { return false }

// CancelAsync has nothing to cancel.
func (p *leanProber) CancelAsync() {}

// watchIdle does nothing here: without epoll a kept connection is not
// watched between probes.
func (p *leanProber) watchIdle(*leanConn) {}
