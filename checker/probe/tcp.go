package probe

import "context"

// tcpProber passes when a TCP connection to address can be opened. It holds
// no connection between probes and is safe for concurrent use.
type tcpProber struct {
	address string
	dialer  *guardedDialer
}

// Probe connects to the address under ctx and closes the connection at
// once; it sends and reads nothing.
func (p *tcpProber) Probe(ctx context.Context) error {
	conn, err := p.dialer.DialContext(ctx, "tcp", p.address)
	if err != nil {
		return withContext(ctx, err)
	}
	_ = conn.Close() // the connect was the answer; a close error says nothing about the target
	return nil
}
