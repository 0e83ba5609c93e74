package main

import (
	"net"
	"regexp"
	"strings"
	"testing"
)

// The addresses in pulsectl's help are loopback or RFC 5737 documentation
// addresses, so that nothing pasted from an example probes a real network.
func TestHelpAddressesAreExamples(t *testing.T) {
	ipv4 := regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
	var docs []*net.IPNet
	for _, c := range []string{"127.0.0.0/8", "0.0.0.0/32", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"} {
		_, n, _ := net.ParseCIDR(c)
		docs = append(docs, n)
	}
	helps := []string{mustRun(t, "--help")}
	for _, c := range commands() {
		helps = append(helps, mustRun(t, c.name, "--help"))
	}
	for _, h := range helps {
		for _, a := range ipv4.FindAllString(h, -1) {
			ip, ok := net.ParseIP(a), false
			for _, n := range docs {
				ok = ok || ip != nil && n.Contains(ip)
			}
			if !ok {
				t.Errorf("help names %s, not a loopback or documentation address:\n%s", a, h)
			}
		}
	}
}

// Each command's help names its flags as they are typed: --name, and -o
// for the one-letter flag.
func TestHelpFlagDashes(t *testing.T) {
	line := regexp.MustCompile(`(?m)^  (-+)(\S+)`)
	for _, c := range commands() {
		out := mustRun(t, c.name, "--help")
		_, flags, _ := strings.Cut(out, "\nFlags:\n")
		for _, m := range line.FindAllStringSubmatch(flags, -1) {
			if want := flagName(m[2]); m[1]+m[2] != want {
				t.Errorf("%s --help names %s%s, want %s", c.name, m[1], m[2], want)
			}
		}
	}
}
