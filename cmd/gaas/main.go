// Command gaas is the one GaaS binary: a node (buyer, and provider when
// provider mode is on), the coordinator, a local testnet, and the client
// commands that talk to a node's API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, interactive: stdinIsTerminal(), progressTTY: isTerminal(os.Stderr)}
	os.Exit(c.exitCode(c.run(ctx, os.Args[1:])))
}

// cli is one invocation's world, so tests can run commands in-process.
type cli struct {
	stdin       io.Reader
	stdout      io.Writer
	stderr      io.Writer
	getenv      func(string) string
	interactive bool // stdin is a terminal a person can answer on
	progressTTY bool // stderr is a terminal: draw progress bars on it
}

// usageError is a mistake in how the command was called: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitError carries a chosen exit status whose message is already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func (c *cli) exitCode(err error) int {
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "gaas: %s\nRun 'gaas help' for usage.\n", ue.msg)
		return 2
	case errors.Is(err, context.Canceled):
		return 130
	}
	fmt.Fprintf(c.stderr, "gaas: %s\n", sentence(err))
	return 1
}

func (c *cli) run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		c.help(nil)
		return usagef("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "node":
		return c.node(ctx, rest)
	case "coordinator":
		return c.coordinator(ctx, rest)
	case "testnet":
		return c.testnet(ctx, rest)
	case "demo":
		return c.demo(ctx, rest)
	case "job":
		return c.job(ctx, rest)
	case "ledger":
		return c.ledger(ctx, rest)
	case "gpu":
		return c.gpu(ctx, rest)
	case "sandbox":
		return c.sandboxCmd(ctx, rest)
	case "doctor":
		return c.doctor(ctx, rest)
	case "help", "-h", "--help":
		c.help(rest)
		return nil
	}
	return usagef("unknown command %q", cmd)
}

func stdinIsTerminal() bool { return isTerminal(os.Stdin) }

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
