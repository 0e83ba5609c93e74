package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func discoveryCommand() *command {
	return &command{
		name:    "discovery",
		args:    "[flags]",
		summary: "list the discovery groups and their sources: last refresh, targets, errors",
		about: `
discovery lists the discovery groups pulsed runs (-discovery-config), one row
per source and one per group:

  GROUP       the group, whose targets' source is discovery:GROUP
  SOURCE      the group's SD config, as "http_sd 0" (its first http_sd
              config); "(group)" is the group's last applied answer
  TARGETS     in the source's last good answer; for (group), the targets
              the last applied answer holds
  REFRESHED   time since the source last answered (the group's answer was
              last applied), "-" before the first
  FAILING     time since the source started failing, "-" when it does not
              (a failing source keeps its last good set)
  LAST-ERROR  why it fails, or why the group's answer was refused or left
              targets out

-o wide adds WHAT (the files, URL or DNS names a source reads) and shows
errors whole. Secrets of the sources' configuration are never shown.`,
		example: `
pulsectl discovery
pulsectl discovery -o wide
pulsectl discovery -o json | jq -r '.groups[].sources[] | select(.lastError != null) | .name'`,
		run: runDiscovery,
	}
}

func runDiscovery(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	out := addOutputFlag(fs, "the ListDiscoveryResponse; wide adds what each source reads", "yaml", "wide")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(e, "unexpected argument %q", pos[0])
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.callCtx(ctx)
	defer cancel()
	resp, err := cl.ListDiscovery(cctx, &pb.ListDiscoveryRequest{})
	if err != nil {
		return cl.fail(e, err, "")
	}
	if out.structured() {
		return e.printAs(out, resp)
	}
	resp = escaped(resp)
	if len(resp.GetGroups()) == 0 {
		fmt.Fprintln(e.stderr, "no discovery groups: pulsed runs none (see pulsed -discovery-config)")
		return exitOK
	}
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	header := "GROUP\tSOURCE\tTARGETS\tREFRESHED\tFAILING\tLAST-ERROR"
	width := 60
	if out.wide() {
		header += "\tWHAT"
		width = 1 << 20
	}
	fmt.Fprintln(tw, header)
	for _, g := range resp.GetGroups() {
		fmt.Fprintf(tw, "%s\t(group)\t%d\t%s\t%s\t%s", g.GetName(), g.GetTargets(), age(g.GetLastApply(), now),
			age(g.GetErrorSince(), now), orDash(truncate(g.GetLastError(), width)))
		if out.wide() {
			fmt.Fprintf(tw, "\t%s", strconv.Itoa(len(g.GetSources()))+" "+plural(len(g.GetSources()), "source"))
		}
		fmt.Fprintln(tw)
		for _, s := range g.GetSources() {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s", g.GetName(), s.GetName(), s.GetTargets(), age(s.GetLastRefresh(), now),
				age(s.GetErrorSince(), now), orDash(truncate(s.GetLastError(), width)))
			if out.wide() {
				fmt.Fprintf(tw, "\t%s", orDash(s.GetDetail()))
			}
			fmt.Fprintln(tw)
		}
	}
	tw.Flush()
	// With replicas on etcd one replica runs each group: only it knows the
	// group's sources' state.
	for _, g := range resp.GetGroups() {
		if l := g.GetLeader(); l != "" {
			fmt.Fprintf(e.stdout, "%s: run by replica %s\n", g.GetName(), l)
		}
	}
	return exitOK
}
