package web_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// A request that announces a body (no route reads one) and never sends it
// is answered at once and its connection closed, rather than held open
// while net/http waits for the body.
func TestAnnouncedBodyIsNotWaitedFor(t *testing.T) {
	e := newEnv(t, checker.Config{}, web.Config{})
	for _, header := range []string{"Content-Length: 1000", "Transfer-Encoding: chunked"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: pulsed\r\n"+header+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s and no body: %v, want an answer", header, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
			t.Errorf("%s and no body: %d %q %v, want 200 ok", header, resp.StatusCode, body, err)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: after the answer: %v, want the connection closed", header, err)
		}
	}

	// A body sent whole is read past, and the connection kept.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for i, req := range []string{"GET /healthz HTTP/1.1\r\nHost: pulsed\r\nContent-Length: 3\r\n\r\nabc", "GET /healthz HTTP/1.1\r\nHost: pulsed\r\n\r\n"} {
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on a connection whose first request had a body: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok\n" || resp.Close {
			t.Errorf("request %d: %d %q %v (close %v), want 200 ok, kept alive", i, resp.StatusCode, body, err, resp.Close)
		}
	}
}
