package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/onceplan/onceplan/internal/mcpserver"
)

// runMCP serves the Model Context Protocol over stdin/stdout for an AI
// agent, against a running server with an (agent) token.
func runMCP(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	if err := parse(fs, env, args); err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	in, out := env.Stdin, env.Stdout
	if in == nil {
		in = os.Stdin
	}
	t := &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}
	if err := mcpserver.New(c, "1").Run(ctx, t); err != nil && ctx.Err() == nil {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
