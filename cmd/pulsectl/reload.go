package main

import (
	"context"
	"fmt"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func reloadCommand() *command {
	return &command{
		name:    "reload",
		args:    "[flags]",
		summary: "make pulsed re-read its targets file and discovery config, as SIGHUP does",
		about: `
reload asks pulsed to re-read the files it runs with: the targets file
(pulsed -targets) and the discovery config (-discovery-config), as a SIGHUP
would, from wherever pulsectl runs. A file with an error changes nothing, and
the running configuration stays; reload prints why and exits 1. The other
file is applied all the same.`,
		example: `
pulsectl reload
pulsectl reload -o json`,
		run: runReload,
	}
}

func runReload(ctx context.Context, e *env, c *command, args []string) int {
	fs := c.flags(e)
	cf := addClientFlags(fs)
	out := addOutputFlag(fs, "the ReloadResponse", "yaml")
	pos, code, ok := c.parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(e, "reload takes no arguments, got %q", pos[0])
	}
	cl, code, ok := cf.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	cctx, cancel := cl.callCtx(ctx)
	defer cancel()
	resp, err := cl.Reload(cctx, &pb.ReloadRequest{})
	if err != nil {
		return cl.fail(e, err, "")
	}
	if out.structured() {
		if rc := e.printAs(out, resp); rc != exitOK {
			return rc
		}
	}
	failed := false
	for _, f := range resp.GetFiles() {
		if f.GetError() != "" {
			failed = true
		}
		if out.structured() {
			continue
		}
		if f.GetError() != "" {
			fmt.Fprintf(e.stdout, "%s %s: %s\n", f.GetKind(), escape(f.GetPath()), escapeLines(f.GetError()))
		} else {
			fmt.Fprintf(e.stdout, "%s %s: reloaded\n", f.GetKind(), escape(f.GetPath()))
		}
	}
	if failed {
		return exitUsage
	}
	return exitOK
}
