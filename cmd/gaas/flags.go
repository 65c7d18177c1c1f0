package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/trisparc/gaas/api"
)

// flags is a command's flag set in which every flag can also come from
// an environment variable, named in its usage.
type flags struct {
	*flag.FlagSet
	c *cli
}

func (c *cli) flags(name string) *flags {
	fs := flag.NewFlagSet("gaas "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by exitCode
	return &flags{FlagSet: fs, c: c}
}

func (f *flags) env(name, def string) string {
	if v := f.c.getenv(name); v != "" {
		return v
	}
	return def
}

func (f *flags) string(name, env, def, usage string) *string {
	return f.String(name, f.env(env, def), usage+" (env "+env+")")
}

func (f *flags) bool(name, env string, usage string) *bool {
	v := f.env(env, "")
	return f.Bool(name, v == "1" || v == "true" || v == "yes", usage+" (env "+env+")")
}

func (f *flags) int(name, env string, def int, usage string) *int {
	p := f.Int(name, def, usage+" (env "+env+")")
	if v := f.env(env, ""); v != "" {
		fmt.Sscan(v, p)
	}
	return p
}

// list is a repeatable flag, also settable as a comma-separated variable.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }
func (l *list) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func (f *flags) list(name, env, usage string) *list {
	l := &list{}
	if v := f.env(env, ""); v != "" {
		l.Set(v)
	}
	f.Var(l, name, usage+" (repeatable; env "+env+", comma-separated)")
	return l
}

// parse parses flags and positional arguments in any order, so that
// `gaas job show ID --json` works as well as `gaas job show --json ID`.
func (f *flags) parse(args []string) ([]string, error) {
	var positional []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.usage()
				return nil, err
			}
			return nil, usagef("%s: %v", f.Name(), err)
		}
		args = f.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func (f *flags) usage() {
	fmt.Fprintf(f.c.stdout, "Usage of %s:\n", f.Name())
	f.SetOutput(f.c.stdout)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
}

// defaultDataDir is where a node keeps its state unless told otherwise.
func defaultDataDir(name string) string {
	home, err := os.UserHomeDir()
	if err != nil {
		return "." + name
	}
	return filepath.Join(home, "."+name)
}

// logger is quiet by default; GAAS_LOG=debug|info|warn|error changes that.
func (c *cli) logger(def slog.Level) *slog.Logger {
	level := def
	switch strings.ToLower(c.getenv("GAAS_LOG")) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
}

// clientFlags are the flags of every command that talks to a node.
type clientFlags struct {
	node, token *string
	data        string
}

func (f *flags) client() *clientFlags {
	return &clientFlags{
		node:  f.string("node", "GAAS_NODE", "http://127.0.0.1:7070", "the node's API address"),
		token: f.string("token", "GAAS_TOKEN", "", "the node's API token (default: read from the node's data folder)"),
		data:  f.env("GAAS_DATA", defaultDataDir("gaas")),
	}
}

func (cf *clientFlags) client() *api.Client {
	token := *cf.token
	if token == "" {
		if b, err := os.ReadFile(filepath.Join(cf.data, "api.token")); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	return api.NewClient(*cf.node, token)
}

// sentence is an error as a person should read it.
func sentence(err error) string { return api.Sentence(err) }

const (
	logInfo = slog.LevelInfo
	logWarn = slog.LevelWarn
)
