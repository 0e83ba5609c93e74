package main

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TestConnectionLimitsOnTheRealBinary: past -max-connections-per-source a
// new connection to the gRPC listener is closed at once and counted in
// pulse_connections_rejected_total, and clients within the limit are
// served. A connection that never sends a byte (held[1], open until the
// end) does not hold up shutdown: the handshake has a deadline.
func TestConnectionLimitsOnTheRealBinary(t *testing.T) {
	t.Cleanup(metricsClient.CloseIdleConnections)
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-max-connections-per-source", "3")
	m := regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(p.Logs())
	if m == nil {
		t.Fatalf("no http address in the log:\n%s", p.Logs())
	}
	client := dial(t, p.Addr) // one connection
	if _, err := client.Healthy(t.Context(), &pb.HealthyRequest{}); err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	eventually(t, "the connections to be counted", func() bool {
		return strings.Contains(metrics(t, m[1]), `pulse_connections_open{listener="grpc"} 3`)
	})
	for i := range 2 {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("connection %d past the limit: read %v, want it closed at once", i, err)
		}
	}
	if got := metrics(t, m[1]); !strings.Contains(got, `pulse_connections_rejected_total{limit="per_source",listener="grpc"} 2`) {
		t.Errorf("/metrics does not count the 2 rejected connections:\n%s", grep(got, "pulse_connections"))
	}
	if _, err := client.Healthy(t.Context(), &pb.HealthyRequest{}); err != nil {
		t.Errorf("the client within the limit: %v", err)
	}
	held[0].Close()
	eventually(t, "a closed connection to free its slot", func() bool {
		return strings.Contains(metrics(t, m[1]), `pulse_connections_open{listener="grpc"} 2`)
	})

	// The HTTP listener has the same limits. metrics() keeps one
	// connection; two more fill the source's three slots.
	for range 2 {
		c, err := net.Dial("tcp", m[1])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	eventually(t, "the HTTP connections to be counted", func() bool {
		return strings.Contains(metrics(t, m[1]), `pulse_connections_open{listener="http"} 3`)
	})
	c, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("HTTP connection past the limit: read %v, want it closed at once", err)
	}
	if got := metrics(t, m[1]); !strings.Contains(got, `pulse_connections_rejected_total{limit="per_source",listener="http"} 1`) {
		t.Errorf("/metrics does not count the rejected HTTP connection:\n%s", grep(got, "pulse_connections"))
	}
	p.stop(t)
}

// metricsClient keeps one connection to the HTTP listener, so that the
// test knows how many it holds.
var metricsClient = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func metrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := metricsClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
