package main

import (
	"strings"
	"testing"
	"time"
)

func TestWriteHAProxyConfig(t *testing.T) {
	var b strings.Builder
	err := writeHAProxyConfig(&b, haproxyConfig{
		Socket:   "/tmp/x/haproxy.sock",
		Names:    []string{"t000000", "t000001"},
		Addrs:    []string{"127.1.0.1:41000", "127.1.0.2:41000"},
		Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"    no strict-limits\n",
		"stats socket /tmp/x/haproxy.sock mode 600 level admin\n",
		"log stdout format raw local0\n",
		"timeout check 1000ms\n",
		"backend farm\n    option httpchk GET /healthz\n    default-server check inter 1000ms rise 2 fall 3\n",
		"    server t000000 127.1.0.1:41000\n    server t000001 127.1.0.2:41000\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	if err := writeHAProxyConfig(&b, haproxyConfig{Names: []string{"a"}}); err == nil {
		t.Error("names without addresses accepted")
	}
	var fast strings.Builder
	if err := writeHAProxyConfig(&fast, haproxyConfig{Interval: time.Second, FastInter: 100 * time.Millisecond, Rise: 2, Fall: 3}); err != nil {
		t.Fatal(err)
	}
	if want := "default-server check inter 1000ms rise 2 fall 3 fastinter 100ms\n"; !strings.Contains(fast.String(), want) {
		t.Errorf("config with fastinter lacks %q:\n%s", want, fast.String())
	}
}

func TestParseHAProxyState(t *testing.T) {
	for _, tc := range []struct {
		line     string
		name     string
		up, isOK bool
	}{
		{line: `Server farm/t000010 is DOWN, reason: Layer7 wrong status, code: 503, info: "Service Unavailable", check duration: 0ms. 9 active and 0 backup servers left.`, name: "t000010", isOK: true},
		{line: `[WARNING]  (16526) : Server farm/t000001 is DOWN, reason: Layer4 connection problem`, name: "t000001", isOK: true},
		{line: `Server farm/t000003 is UP, reason: Layer7 check passed, code: 200, check duration: 0ms.`, name: "t000003", up: true, isOK: true},
		{line: `backend farm has no server available!`},
		{line: `Server other/t000003 is DOWN`},
	} {
		name, up, ok := parseHAProxyState(tc.line)
		if ok != tc.isOK || name != tc.name || up != tc.up {
			t.Errorf("parseHAProxyState(%q) = %q, %v, %v; want %q, %v, %v", tc.line, name, up, ok, tc.name, tc.up, tc.isOK)
		}
	}
}

func TestParseShowStat(t *testing.T) {
	out := "# pxname,svname,qcur,status,check_status\n" +
		"farm,t000000,0,UP,L7OK\n" +
		"farm,t000001,0,DOWN,L7STS\n" +
		"farm,t000002,0,UP 1/3,L7STS\n" +
		"farm,t000003,0,UP,L7OK\n" +
		"farm,BACKEND,0,UP,\n" +
		"stats,FRONTEND,0,OPEN,\n\n"
	got, err := parseShowStat(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["UP"] != 2 || got["DOWN"] != 1 || got["UP 1/3"] != 1 {
		t.Errorf("parseShowStat = %v", got)
	}
	if _, err := parseShowStat("# pxname,svname\nfarm,a\n"); err == nil {
		t.Error("show stat without a status column accepted")
	}
}

func TestHAPDuration(t *testing.T) {
	if got := hapDuration(10 * time.Second); got != "10000ms" {
		t.Errorf("hapDuration(10s) = %q", got)
	}
}
