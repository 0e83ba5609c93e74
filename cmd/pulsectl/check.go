package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/pulsehealth/pulse/checker/oneshot"
	"github.com/pulsehealth/pulse/checker/probe"
)

func checkCommand() *command {
	return &command{
		name:    "check",
		args:    "[flags] FILE",
		summary: "check the targets of a file once, with retries, and report (no server needed)",
		about: `
check reads targets from FILE and checks each once, --workers at a time,
within a global --deadline: a one-shot health check for cron jobs and CI.
No attempt starts after the deadline, and each attempt's timeout is clipped
to what is left of it.

A transient failure (an HTTP 5xx, a timeout, a transport error such as
"connection refused"; for gRPC, NOT_SERVING or an unreachable server) is
retried up to --retries times, after a full-jitter backoff of
rand * min(5s, 0.2s * 2^retry); a backoff that would cross the deadline ends
the check instead. Anything else, such as an HTTP 4xx, is not retried.

HTTP redirects are followed, up to 10, and the final answer is judged (a 302
to a healthy page is healthy); an 11th fails the attempt. --no-follow-redirects
judges the first answer, as pulsed's probes do unless told to follow.

Each target ends healthy (first attempt passed), degraded (passed after
retries) or down (with the reason). The report keeps the file's order and
ends with the counts, the p50 and p95 latency (nearest rank, last attempt of
each target that answered), the total retries and the critical targets that
are down. On a terminal, a progress line is shown on stderr meanwhile.

Exit code: 2 when a critical target is down, else 0; 1 for a usage error or
an invalid file (or an unwritable --metrics file).

FILE is JSON (a name ending in .json, or content starting with [ or {) or
YAML: a list of targets, or an object whose "targets" is that list. Fields:

  name             required, unique
  url              http:// or https:// URL: an http target
  kind             http (the default when url is set), tcp, grpc, or dns
                   (the default when dns is set)
  address          host:port, for kind tcp or grpc
  expected_status  the HTTP status that passes, or a list ([200, 204]);
                   default 200 (unless expected_status_ranges is set)
  timeout_s        per-attempt timeout in seconds, e.g. 1.5
  timeout          the same as a duration, e.g. 1500ms; default 2s
  critical         whether a failure makes the exit code 2; default true
  headers          HTTP request headers, e.g. {Host: web.internal}
  service, tls     for grpc: the health service name, and TLS (bool);
                   tls: true also speaks TLS on a tcp target

Probe options, under the names of pulsed's targets (README "Probes" has
their defaults and bounds):

  http   method (GET, HEAD, POST), body (with POST),
         expected_status_ranges (["200-399"]), body_contains,
         body_not_contains, body_regex, body_limit,
         header_matches ([{name: X-Status, regex: ^ok$}]),
         follow_redirects (overrides --no-follow-redirects)
  tcp    steps: a list of {send, send_hex, expect, expect_hex,
         expect_contains, expect_regex, read_limit}, one action each
  grpc   authority, metadata, expected_statuses
  dns    dns: {name, server, type, rcode, answer_contains, answer_regex}
  tls_options (https:// urls, tcp, grpc): {ca_file, ca_pem, cert_file,
         key_file, cert_pem, key_pem, server_name, insecure_skip_verify,
         min_version, cert_expiry_warn, cert_expiry_fail}; files are read
         from the directory pulsectl runs in

An answer that fails an expectation (a body check, a TCP step, a DNS
answer) is the target's answer and is not retried.

For example:

  - name: api
    url: http://127.0.0.1:8080/healthz
  - name: db
    kind: tcp
    address: 127.0.0.1:5432
    timeout: 500ms
  - name: legacy
    url: http://127.0.0.1:8081/status
    expected_status: 204
    critical: false
  - name: orders
    url: https://192.0.2.6/ready
    body_contains: ready
    tls_options: {ca_file: ca.pem, cert_file: client.pem, key_file: client-key.pem}
  - name: cache
    kind: tcp
    address: 127.0.0.1:6379
    steps: [{send: "PING\r\n"}, {expect: "+PONG\r\n"}]`,
		example: `
pulsectl check cmd/pulsectl/testdata/example.yaml
pulsectl check cmd/pulsectl/testdata/probes.yaml
pulsectl check --deadline 10s --retries 2 --metrics /var/lib/node_exporter/textfile/healthcheck.prom targets.json
pulsectl check -o json targets.yaml | jq '.summary'`,
		run: runCheck,
	}
}

func runCheck(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	workers := fs.Int("workers", oneshot.DefaultWorkers, "targets checked at once")
	deadline := secondsFlag(oneshot.DefaultDeadline)
	fs.Var(&deadline, "deadline", "bound on the whole run: a `duration` (20s) or seconds (20)")
	retries := fs.Int("retries", oneshot.DefaultMaxRetries, "retries of a transient failure per target")
	noFollow := fs.Bool("no-follow-redirects", false, "judge an HTTP target's first answer, a redirect included, instead of following up to 10 redirects")
	metrics := fs.String("metrics", "", "also write Prometheus text to `FILE`, atomically (for node_exporter's textfile collector: name it *.prom)")
	out := addOutputFlag(fs, "the results and the summary")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) != 1:
		return c.usageError(e, "name one targets file, got %d arguments", len(pos))
	case *workers < 1:
		return c.usageError(e, "--workers must be at least 1, got %d", *workers)
	case *retries < 0:
		return c.usageError(e, "--retries must be 0 or more, got %d", *retries)
	}
	targets, rows, err := loadCheckFile(pos[0])
	if err != nil {
		e.errorf("%v", err)
		return exitUsage
	}

	for i := range targets {
		// A target's own follow_redirects wins over the flag.
		if h := targets[i].Probe.HTTP; h != nil && rows[i].FollowRedirects == nil {
			h.FollowRedirects = !*noFollow
		}
	}
	factory := probe.NewFactory()
	defer factory.Close()
	opts := oneshot.Options{
		Workers:    *workers,
		Deadline:   time.Duration(deadline),
		MaxRetries: *retries,
		Factory:    fileFieldFactory{factory},
	}
	var progress *progressLine
	if isTerminal(e.stderr) {
		progress = &progressLine{w: e.stderr}
		progress.update(0, len(targets), 0)
		opts.Progress = progress.update
	}
	results := oneshot.Run(ctx, targets, opts)
	progress.clear() // before the report, which shares the terminal
	summary := oneshot.Summarize(results)

	if out.json() {
		if err := writeCheckJSON(e.stdout, results, summary); err != nil {
			e.errorf("writing: %v", err)
			return exitUsage
		}
	} else {
		writeCheckText(e.stdout, results, summary)
	}
	if *metrics != "" {
		if err := oneshot.WriteMetricsFile(*metrics, results); err != nil {
			e.errorf("--metrics: %v", err)
			return exitUsage
		}
	}
	if len(summary.CriticalDown) > 0 {
		return exitCriticalDown
	}
	return exitOK
}

func writeCheckText(w io.Writer, results []oneshot.Result, s oneshot.Summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tTARGET\tLATENCY\tATTEMPTS\tREASON")
	for _, r := range results {
		lat := "-"
		if last, ok := r.Last(); ok {
			lat = latency(last.Latency)
		}
		name := escape(r.Target.Name)
		if !r.Target.Critical {
			name += " (non-critical)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.Outcome, name, lat, len(r.Attempts), escape(r.Reason)) // a reason can quote the target's answer
	}
	tw.Flush()
	fmt.Fprintf(w, "healthy=%d degraded=%d down=%d p50=%.1fms p95=%.1fms retries=%d\n",
		s.Healthy, s.Degraded, s.Down, oneshot.Milliseconds(s.P50), oneshot.Milliseconds(s.P95), s.TotalRetries)
	if len(s.CriticalDown) > 0 {
		fmt.Fprintf(w, "critical down: %s\n", strings.Join(escapeAll(s.CriticalDown), ", "))
	}
}

// The JSON report: the summary's keys, and one object per target, in the
// lowerCamelCase of every other JSON pulsectl prints.
type (
	checkJSON struct {
		Results []resultJSON `json:"results"`
		Summary summaryJSON  `json:"summary"`
	}
	resultJSON struct {
		Name      string        `json:"name"`
		Kind      string        `json:"kind"`
		Critical  bool          `json:"critical"`
		Outcome   string        `json:"outcome"`
		Reason    string        `json:"reason"`
		Retries   int           `json:"retries"`
		LatencyMS *float64      `json:"latencyMs"` // of the last attempt; null when none was made
		Attempts  []attemptJSON `json:"attempts"`
	}
	attemptJSON struct {
		Status    *int    `json:"status"` // the HTTP status; null when none (no answer, and tcp and grpc)
		LatencyMS float64 `json:"latencyMs"`
		Error     string  `json:"error"`
	}
	summaryJSON struct {
		Healthy      int      `json:"healthy"`
		Degraded     int      `json:"degraded"`
		Down         int      `json:"down"`
		Total        int      `json:"total"`
		CriticalDown []string `json:"criticalDown"`
		P50MS        float64  `json:"p50Ms"`
		P95MS        float64  `json:"p95Ms"`
		TotalRetries int      `json:"totalRetries"`
	}
)

func writeCheckJSON(w io.Writer, results []oneshot.Result, s oneshot.Summary) error {
	doc := checkJSON{
		Results: make([]resultJSON, len(results)),
		Summary: summaryJSON{
			Healthy: s.Healthy, Degraded: s.Degraded, Down: s.Down, Total: s.Total,
			CriticalDown: s.CriticalDown, P50MS: roundMS(s.P50), P95MS: roundMS(s.P95), TotalRetries: s.TotalRetries,
		},
	}
	for i, r := range results {
		rj := resultJSON{
			Name: r.Target.Name, Kind: r.Target.Probe.Kind(), Critical: r.Target.Critical,
			Outcome: string(r.Outcome), Reason: r.Reason, Retries: r.Retries(), Attempts: []attemptJSON{},
		}
		for _, a := range r.Attempts {
			aj := attemptJSON{LatencyMS: roundMS(a.Latency), Error: a.Err}
			if a.Answered && a.Status != 0 {
				aj.Status = &a.Status
			}
			rj.Attempts = append(rj.Attempts, aj)
		}
		if last, ok := r.Last(); ok {
			ms := roundMS(last.Latency)
			rj.LatencyMS = &ms
		}
		doc.Results[i] = rj
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// roundMS is d in milliseconds to 0.1, as the report rounds it.
func roundMS(d time.Duration) float64 { return math.Round(oneshot.Milliseconds(d)*10) / 10 }

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressLine keeps one line of progress on a terminal, rewritten in
// place: "3/8 done, 1 failing".
type progressLine struct {
	w       io.Writer
	printed bool
}

// update rewrites the line; oneshot.Run never calls it concurrently.
func (p *progressLine) update(done, total, failing int) {
	fmt.Fprintf(p.w, "\r\033[K%d/%d done, %d failing", done, total, failing)
	p.printed = true
}

// clear erases the line. It does nothing on a nil *progressLine.
func (p *progressLine) clear() {
	if p != nil && p.printed {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
