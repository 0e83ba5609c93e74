// Command pulsectl is the command-line client of pulsed, and a one-shot
// health checker that needs no server.
//
// Usage:
//
//	pulsectl <command> [flags] [args]
//
// Client commands (add, set, rm, state, ls, healthy, watch, wait, ...) talk
// to pulsed at --addr, 127.0.0.1:50051 by default, or at the address of the
// environment or of the config file's context. check reads a file of targets, checks
// each once with retries under a global deadline, prints a report and exits
// 2 when a critical target is down. Run pulsectl --help for the
// commands and pulsectl <command> --help for each one's flags and examples.
//
// Exit codes: 0 success; 1 usage error (bad flags or arguments, an invalid
// check file, a request pulsed rejected as invalid); 2 check found a
// critical target down; 3 unknown target or group; 4 pulsed unreachable or
// failed; 5 healthy found no routable target; 6 wait timed out; 7 pulsed
// refused the token, or the TLS handshake failed for a certificate or for
// TLS on one side only.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
