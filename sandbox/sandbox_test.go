package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trisparc/gaas/internal/testwheel"
)

func newSandbox(t *testing.T) *Sandbox {
	t.Helper()
	s, err := New(context.Background())
	if err != nil {
		t.Fatalf("this machine must be able to sandbox (make test installs bubblewrap): %v", err)
	}
	return s
}

type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(stream, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, stream+": "+line)
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// job writes a job folder holding script and a small dataset.
func job(t *testing.T, script string) Spec {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "input"), 0o755)
	os.WriteFile(filepath.Join(dir, "input", "train.py"), []byte(script), 0o644)
	os.WriteFile(filepath.Join(dir, "input", "data.csv"), []byte("x,y\n1,2\n3,4\n"), 0o644)
	return Spec{Dir: dir, Script: "train.py", Dataset: "data.csv", Limits: Limits{Wall: 30 * time.Second}}
}

func TestRunTrainsAndWritesModel(t *testing.T) {
	s := newSandbox(t)
	spec := job(t, `
import csv, os, sys
def main():
    with open(os.environ["GAAS_DATASET"]) as f:
        rows = list(csv.DictReader(f))
    print("rows", len(rows))
    print("warning", file=sys.stderr)
    with open(os.path.join(os.environ["GAAS_OUTPUT"], "model.txt"), "w") as f:
        f.write(str(sum(int(r["y"]) for r in rows)))
`)
	var out lines
	spec.Output = out.add
	res, err := s.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Completed {
		t.Fatalf("outcome %s (%s), output:\n%s", res.Outcome, res.Reason(), out.text())
	}
	if got, _ := os.ReadFile(filepath.Join(spec.Dir, "output", "model.txt")); string(got) != "6" {
		t.Fatalf("model = %q", got)
	}
	if !strings.Contains(out.text(), "stdout: rows 2") || !strings.Contains(out.text(), "stderr: warning") {
		t.Fatalf("output:\n%s", out.text())
	}
}

func TestRunOutcomes(t *testing.T) {
	s := newSandbox(t)
	for _, tc := range []struct {
		name, script string
		want         Outcome
		code         int
		output       string
	}{
		{"raises", "def main():\n    raise ValueError('bad learning rate')\n", ScriptFailed, 1, "ValueError: bad learning rate"},
		{"no main", "x = 1\n", NoMain, noMainExit, "no main()"},
		{"sys.exit", "import sys\ndef main():\n    sys.exit(7)\n", ScriptFailed, 7, ""},
		{"async main", "import asyncio\nasync def main():\n    await asyncio.sleep(0)\n    print('async ok')\n", Completed, 0, "async ok"},
		{"system read-only", "def main():\n    open('/usr/evil', 'w')\n", ScriptFailed, 1, "Read-only file system"},
		{"input read-only", "import os\ndef main():\n    open(os.environ['GAAS_DATASET'], 'w')\n", ScriptFailed, 1, "Read-only file system"},
		{"no home", "import os\ndef main():\n    print(sorted(os.listdir('/')))\n    assert not os.path.exists('/root') and not os.path.exists('/home')\n", Completed, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := job(t, tc.script)
			var out lines
			spec.Output = out.add
			res, err := s.Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.want || res.ExitCode != tc.code || !strings.Contains(out.text(), tc.output) {
				t.Fatalf("got %s/%d, want %s/%d with %q; output:\n%s", res.Outcome, res.ExitCode, tc.want, tc.code, tc.output, out.text())
			}
		})
	}
}

// TestNoNetwork opens a listener on the host's loopback and checks that
// the script cannot reach it.
func TestNoNetwork(t *testing.T) {
	s := newSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reached := make(chan bool, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			reached <- true
		}
	}()
	spec := job(t, fmt.Sprintf("import socket\ndef main():\n    socket.create_connection(('127.0.0.1', %d), timeout=2)\n", ln.Addr().(*net.TCPAddr).Port))
	var out lines
	spec.Output = out.add
	res, err := s.Run(context.Background(), spec)
	if err != nil || res.Outcome != ScriptFailed {
		t.Fatalf("%+v %v\n%s", res, err, out.text())
	}
	select {
	case <-reached:
		t.Fatal("the script reached a listener on the host")
	default:
	}
	if strings.Contains(out.text(), "runner.py") {
		t.Fatalf("traceback shows the runner's frames:\n%s", out.text())
	}
}

func TestRunStopsAtWallLimitAndOnCancel(t *testing.T) {
	s := newSandbox(t)
	spec := job(t, "import time\ndef main():\n    time.sleep(60)\n")
	spec.Limits.Wall = 500 * time.Millisecond
	res, err := s.Run(context.Background(), spec)
	if err != nil || res.Outcome != TimedOut {
		t.Fatalf("wall limit: %v, %v", res.Outcome, err)
	}

	spec = job(t, "import time\ndef main():\n    print('started', flush=True)\n    time.sleep(60)\n")
	ctx, cancel := context.WithCancel(context.Background())
	spec.Output = func(_, line string) {
		if line == "started" {
			cancel()
		}
	}
	res, err = s.Run(ctx, spec)
	if err != nil || res.Outcome != Cancelled {
		t.Fatalf("cancel: %v, %v", res.Outcome, err)
	}
}

func TestOutputIsCut(t *testing.T) {
	s := newSandbox(t)
	spec := job(t, "def main():\n    for i in range(100000):\n        print('x' * 100)\n    print('done')\n")
	spec.Limits.OutputBytes = 1 << 20
	var out lines
	spec.Output = out.add
	res, err := s.Run(context.Background(), spec)
	if err != nil || res.Outcome != Completed || !res.OutputCut {
		t.Fatalf("%+v, %v", res, err)
	}
	if !strings.Contains(out.text(), "[gaas: output cut after 1 MiB") || strings.Contains(out.text(), "done") {
		t.Fatal("output was not cut with a marker")
	}
}

// TestInstallPackages installs a wheel the test builds from a local
// folder (no index is reachable here), imports it from a job, and reuses
// the cached environment for the same package set.
func TestInstallPackages(t *testing.T) {
	s := newSandbox(t)
	wheels := t.TempDir()
	if _, err := testwheel.Build(wheels, "gaas-tiny", "1.2.0", map[string]string{"gaas_tiny/__init__.py": "ANSWER = 42\n"}); err != nil {
		t.Fatal(err)
	}
	s.PipFindLinks, s.EnvDir = wheels, t.TempDir()
	var out lines
	env, res, err := s.Install(context.Background(), []string{"gaas-tiny==1.2.0"}, out.add)
	if err != nil || res.Outcome != Completed || env == "" {
		t.Fatalf("install: %+v %v\n%s", res, err, out.text())
	}
	spec := job(t, "import gaas_tiny\ndef main():\n    print('answer', gaas_tiny.ANSWER)\n")
	spec.Env, spec.Output = env, out.add
	res, err = s.Run(context.Background(), spec)
	if err != nil || res.Outcome != Completed || !strings.Contains(out.text(), "stdout: answer 42") {
		t.Fatalf("run: %+v %v\n%s", res, err, out.text())
	}
	again, res, err := s.Install(context.Background(), []string{"GAAS-TINY==1.2.0"}, nil)
	if err != nil || again != env || res.Duration != 0 {
		t.Fatalf("the same package set was installed again: %s vs %s, %+v %v", again, env, res, err)
	}
	out = lines{}
	_, res, err = s.Install(context.Background(), []string{"gaas-missing"}, out.add)
	if err != nil || res.Outcome != ScriptFailed || !strings.Contains(out.text(), "No matching distribution found for gaas-missing") {
		t.Fatalf("missing package: %+v %v\n%s", res, err, out.text())
	}
	if entries, _ := os.ReadDir(s.EnvDir); len(entries) != 1 {
		t.Fatalf("a failed install left %d entries in the cache", len(entries))
	}
}
