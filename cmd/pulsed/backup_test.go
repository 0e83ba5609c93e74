package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// payloadTarget is a target whose spec carries a 32 KiB request body: a
// few hundred of them grow the store by megabytes. Its probes go to a
// closed port on 127.0.0.1, every hour.
func payloadTarget(name string) *pb.Target {
	return &pb.Target{
		Name: name, Group: "payload",
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{
			Url: "http://127.0.0.1:9/" + name, Method: "POST",
			Body: strings.Repeat(name[len(name)-1:], 32<<10),
		}},
		Interval: durationpb.New(time.Hour),
	}
}

// addTargets adds names with payloads from 8 goroutines, each call within
// bound, and returns the first error; after one, it starts no more calls.
func addTargets(t *testing.T, client pb.HealthCheckerClient, names []string, bound time.Duration) error {
	t.Helper()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	failed := make(chan struct{})
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for name := range next {
				ctx, cancel := context.WithTimeout(t.Context(), bound)
				_, err := client.AddTarget(ctx, &pb.AddTargetRequest{Target: payloadTarget(name)})
				cancel()
				if err != nil {
					once.Do(func() {
						first = fmt.Errorf("AddTarget %s: %w", name, err)
						close(failed)
					})
				}
			}
		})
	}
feed:
	for _, name := range names {
		select {
		case next <- name:
		case <-failed:
			break feed
		}
	}
	close(next)
	wg.Wait()
	return first
}

// stalledBackup opens GET /backup on a raw connection with a small
// receive buffer, reads the start of the answer (so the handler has
// begun) and then reads nothing more, until the test ends.
func stalledBackup(t *testing.T, web string) string {
	t.Helper()
	addr := strings.TrimPrefix(web, "http://")
	// The buffer is set before connecting, so that the window offered
	// to pulsed is small from the start.
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "GET /backup HTTP/1.1\r\nHost: pulsed\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(testscale.D(30 * time.Second)))
	status, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the start of /backup's answer: %v", err)
	}
	return status
}

// A client that opens /backup and stops reading holds nothing against
// writers: with the store grown to megabytes, so that the copy cannot fit
// in the sockets' buffers, and the store growing further (which needs
// bbolt to map the file anew), every AddTarget still succeeds within its
// deadline, and pulsed stays live.
func TestStalledBackupReaderDoesNotBlockWrites(t *testing.T) {
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-liveness-timeout", "5s")
	web := httpAddr(t, p)
	client := dial(t, p.Addr)

	var before, during []string
	for i := range 100 {
		before = append(before, fmt.Sprintf("before-%03d", i))
	}
	for i := range 300 {
		during = append(during, fmt.Sprintf("during-%03d", i))
	}
	if err := addTargets(t, client, before, testscale.D(30*time.Second)); err != nil {
		t.Fatalf("before the backup: %v", err)
	}

	if status := stalledBackup(t, web); !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("/backup answered %q", status)
	}
	start := time.Now()
	if err := addTargets(t, client, during, testscale.D(10*time.Second)); err != nil {
		t.Fatalf("while a /backup reader stalled: %v", err)
	}
	t.Logf("%d targets added in %v while a /backup reader stalled", len(during), time.Since(start))
	if code, body := get(t, web+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while a /backup reader stalls: %d %q", code, body)
	}
}
