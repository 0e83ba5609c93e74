package main

import (
	"net"
	"testing"
)

// -advertise-host takes a host name or an IP address without a port, and
// needs -registry etcd.
func TestAdvertiseHostFlag(t *testing.T) {
	etcd := []string{"-registry", "etcd", "-etcd-endpoints", "http://127.0.0.1:2379"}
	checkFlags(t, []flagCase{
		{append(etcd, "-advertise-host", "10.0.0.7"), ""},
		{append(etcd, "-advertise-host", "2001:db8::7"), ""},
		{append(etcd, "-advertise-host", "pulse-1.pulse.default.svc"), ""},
		{append(etcd, "-advertise-host", "10.0.0.7:50051"), `-advertise-host: want a host name or an IP address, without a port, got "10.0.0.7:50051"`},
		{append(etcd, "-advertise-host", ""), `-advertise-host: want a host name or an IP address, without a port, got ""`},
		{append(etcd, "-advertise-host", "http://pulse-1"), `-advertise-host: want a host name or an IP address, without a port, got "http://pulse-1"`},
		{[]string{"-advertise-host", "10.0.0.7"}, "-advertise-host needs -registry etcd"},
	})
}

// addrListener is a net.Listener that only has an address.
type addrListener struct {
	net.Listener
	addr net.Addr
}

func (l addrListener) Addr() net.Addr { return l.addr }

// A replica gives its listeners' addresses with -advertise-host, or with
// their own IP address when it is not a wildcard; none where there is no
// host to give, and no page without an HTTP listener.
func TestAdvertisedAddresses(t *testing.T) {
	at := func(ip string, port int) net.Listener {
		return addrListener{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}}
	}
	for _, tt := range []struct {
		host       string
		grpc, http net.Listener
		tls        bool
		api, page  string
	}{
		{"", at("127.0.0.1", 50051), at("127.0.0.1", 9090), false, "127.0.0.1:50051", "http://127.0.0.1:9090/"},
		{"", at("10.0.0.7", 50051), at("10.0.0.7", 9090), true, "10.0.0.7:50051", "https://10.0.0.7:9090/"},
		{"", at("0.0.0.0", 50051), at("::", 9090), false, "", ""},
		{"pulse-1.internal", at("0.0.0.0", 50051), at("127.0.0.1", 9090), false, "pulse-1.internal:50051", "http://pulse-1.internal:9090/"},
		{"2001:db8::7", at("::", 50051), nil, false, "[2001:db8::7]:50051", ""},
		{"", at("::1", 50051), nil, false, "[::1]:50051", ""},
		{"", addrListener{addr: &net.TCPAddr{IP: net.ParseIP("fe80::7"), Port: 50051, Zone: "eth0"}}, nil, false, "", ""},
	} {
		r := registryFlags{advertiseHost: tt.host}
		api, page := r.advertised(&listeners{grpc: tt.grpc, http: tt.http}, tt.tls)
		if api != tt.api || page != tt.page {
			t.Errorf("host %q, %v and %v: %q %q, want %q %q", tt.host, tt.grpc.Addr(), tt.http, api, page, tt.api, tt.page)
		}
	}
}
