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

// ProbeAsync never starts a probe here: Probe does.
func (p *leanProber) ProbeAsync(time.Time, func(error)) bool { return false }

// CancelAsync has nothing to cancel.
func (p *leanProber) CancelAsync() {}

// watchIdle does nothing here: without epoll a kept connection is not
// watched between probes.
func (p *leanProber) watchIdle(*leanConn) {}
