// Command pulse-target is a toy HTTP backend for trying Pulse by hand: it
// answers GET /healthz with 200 until told otherwise.
//
//	pulse-target -listen 127.0.0.1:8080
//
// POST /fail makes /healthz answer 503, POST /recover makes it answer 200
// again; stopping the process makes probes fail with "connection refused".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pulsehealth/pulse/internal/version"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "`address` to serve HTTP on")
	showVersion := version.Flag(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Line("pulse-target"))
		return
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	var failing atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			http.Error(w, "failing on purpose (POST /recover to heal)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, _ *http.Request) {
		failing.Store(true)
		logger.Info("now failing /healthz with 503")
		fmt.Fprintln(w, "failing")
	})
	mux.HandleFunc("POST /recover", func(w http.ResponseWriter, _ *http.Request) {
		failing.Store(false)
		logger.Info("now answering /healthz with 200")
		fmt.Fprintln(w, "ok")
	})

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulse-target:", err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	logger.Info("pulse-target serving /healthz", "addr", lis.Addr().String())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "pulse-target:", err)
		os.Exit(1)
	}
}
