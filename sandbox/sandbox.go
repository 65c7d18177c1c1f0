// Package sandbox is the only way GaaS runs a job's code: a buyer's Python
// script, on a provider's machine, inside bubblewrap (new user, PID,
// network, IPC, UTS and cgroup namespaces, no capabilities, a read-only
// system, no network, only the job folder writable), under a wall-time
// limit, with every process killed when the job ends.
package sandbox

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

//go:embed runner.py
var runnerPy []byte

// noMainExit is runner.py's exit code for a script without main().
const noMainExit = 119

// Paths inside the sandbox.
const (
	JobDir    = "/job"
	InputDir  = "/job/input"
	OutputDir = "/job/output"
	runnerAt  = "/opt/gaas/runner.py"
)

// Defaults for limits a Spec leaves zero.
const (
	DefaultWall        = time.Hour
	DefaultOutputBytes = 16 << 20
	maxLine            = 4 << 10
)

// ErrUnavailable means this machine cannot sandbox jobs; its message says
// why and how to fix it.
var ErrUnavailable = errors.New("sandbox unavailable")

// Sandbox runs scripts with one bubblewrap and one Python.
type Sandbox struct {
	bwrap  string
	python string
	binds  []string // extra read-only binds the Python installation needs

	// PipIndexURL, when set, is the package index pip installs from.
	PipIndexURL string
	// PipFindLinks, when set, is a local folder of wheels that pip
	// installs from instead of any index (bound read-only).
	PipFindLinks string
}

// New finds bubblewrap and Python and checks that a sandbox can actually
// start here (user namespaces can be disabled even where bwrap exists).
func New(ctx context.Context) (*Sandbox, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("%w: bubblewrap (bwrap) is not installed; install it with: sudo apt-get install bubblewrap", ErrUnavailable)
	}
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			return nil, fmt.Errorf("%w: python3 is not installed; install it with: sudo apt-get install python3", ErrUnavailable)
		}
	}
	s := &Sandbox{bwrap: bwrap, python: python}
	if prefix, err := pythonPrefix(ctx, python); err == nil && !strings.HasPrefix(prefix, "/usr/") && prefix != "/usr" {
		s.binds = append(s.binds, prefix)
	}
	probe := exec.CommandContext(ctx, bwrap, append(s.baseArgs(), "--", python, "-c", "pass")...)
	if out, err := probe.CombinedOutput(); err != nil {
		msg := strings.TrimSpace(string(out))
		hint := ""
		if strings.Contains(msg, "ermission") || strings.Contains(msg, "namespace") {
			hint = " Unprivileged user namespaces look disabled: on Ubuntu 24.04 and later allow them for bwrap with an AppArmor profile, or set kernel.apparmor_restrict_unprivileged_userns=0."
		}
		return nil, fmt.Errorf("%w: bubblewrap could not start a sandbox on this machine (%s).%s", ErrUnavailable, msg, hint)
	}
	return s, nil
}

// Python is the interpreter jobs run with.
func (s *Sandbox) Python() string { return s.python }

func pythonPrefix(ctx context.Context, python string) (string, error) {
	out, err := exec.CommandContext(ctx, python, "-I", "-c", "import sys; print(sys.base_prefix)").Output()
	return strings.TrimSpace(string(out)), err
}

// baseArgs isolate everything but the network; Run adds --unshare-net,
// the job's folder and the command.
func (s *Sandbox) baseArgs() []string {
	args := []string{
		"--unshare-user", "--disable-userns",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
		"--hostname", "gaas-job",
		"--ro-bind", "/usr", "/usr",
		"--proc", "/proc", "--dev", "/dev",
		"--tmpfs", "/tmp",
	}
	// Debian and friends link /bin, /lib... into /usr; older layouts have
	// real folders.
	for _, dir := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if target, err := os.Readlink(dir); err == nil {
			args = append(args, "--symlink", target, dir)
		} else if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			args = append(args, "--ro-bind", dir, dir)
		}
	}
	for _, f := range []string{"/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"} {
		args = append(args, "--ro-bind-try", f, f)
	}
	for _, b := range s.binds {
		args = append(args, "--ro-bind", b, b)
	}
	return append(args,
		"--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
		"--setenv", "LANG", "C.UTF-8",
		"--setenv", "PYTHONUNBUFFERED", "1",
		"--setenv", "PYTHONDONTWRITEBYTECODE", "1",
	)
}

// Spec is one run.
type Spec struct {
	// Dir is the job folder on the host. Its input/ holds the dataset and
	// script (read-only inside); output/ is created and is where the
	// script's model goes. Dir is /job inside the sandbox.
	Dir         string
	Script      string // file name inside input/
	Dataset     string // file name inside input/
	Wall        time.Duration
	OutputBytes int64
	// Output receives each line the script prints, as it prints it.
	Output func(stream, line string)
}

// Outcome is how a run ended.
type Outcome string

// Outcomes.
const (
	Completed    Outcome = "completed"     // main() returned
	ScriptFailed Outcome = "script_failed" // main() raised or exited non-zero
	NoMain       Outcome = "no_main"       // nothing to call
	TimedOut     Outcome = "timed_out"     // the wall limit (budget cap) was reached
	Cancelled    Outcome = "cancelled"     // the caller's context ended
)

// Result says how a run ended.
type Result struct {
	Outcome   Outcome
	ExitCode  int
	Duration  time.Duration
	OutputCut bool
}

// Reason is one line about how the run ended, for logs and the buyer.
func (r Result) Reason() string {
	switch r.Outcome {
	case Completed:
		return "main() returned"
	case NoMain:
		return "the script defines no main() function"
	case TimedOut:
		return fmt.Sprintf("stopped at the budget cap after %s", r.Duration.Round(time.Second))
	case Cancelled:
		return "stopped: the job was cancelled"
	}
	return fmt.Sprintf("the script exited with status %d", r.ExitCode)
}

// Install installs packages into the job folder's .packages, which Run
// puts on the script's path. It runs sandboxed too (a package's build can
// run code): the network is allowed, the host's files are not visible,
// and only .packages is writable.
func (s *Sandbox) Install(ctx context.Context, spec Spec, packages []string) (Result, error) {
	if len(packages) == 0 {
		return Result{Outcome: Completed}, nil
	}
	target := filepath.Join(spec.Dir, ".packages")
	if err := os.MkdirAll(target, 0o755); err != nil {
		return Result{}, err
	}
	var args []string
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl", "/etc/ca-certificates", "/usr/share/ca-certificates"} {
		args = append(args, "--ro-bind-try", f, f)
	}
	pip := []string{s.python, "-I", "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-cache-dir",
		"--progress-bar", "off", "--target", JobDir + "/.packages"}
	if s.PipFindLinks != "" {
		args = append(args, "--ro-bind", s.PipFindLinks, "/opt/gaas/wheels")
		pip = append(pip, "--no-index", "--find-links", "/opt/gaas/wheels")
	} else if s.PipIndexURL != "" {
		pip = append(pip, "--index-url", s.PipIndexURL)
	}
	// "--" ends pip's options: a package name can never be read as one.
	pip = append(append(pip, "--"), packages...)
	args = append(args,
		"--bind", target, JobDir+"/.packages",
		"--chdir", JobDir,
		"--setenv", "HOME", "/tmp",
		"--setenv", "PIP_NO_WARN_SCRIPT_LOCATION", "1",
		"--setenv", "PIP_ROOT_USER_ACTION", "ignore",
		"--")
	return s.exec(ctx, append(args, pip...), spec, nil)
}

// Run runs spec.Script's main() in the sandbox and waits for it to end.
// A cancelled ctx kills the whole sandbox at once.
func (s *Sandbox) Run(ctx context.Context, spec Spec) (Result, error) {
	for _, name := range []string{spec.Script, spec.Dataset} {
		if name != filepath.Base(name) || name == "." || name == ".." {
			return Result{}, fmt.Errorf("input name %q must be a plain file name", name)
		}
	}
	if err := os.MkdirAll(filepath.Join(spec.Dir, "output"), 0o755); err != nil {
		return Result{}, err
	}
	args := []string{"--unshare-net",
		"--bind", spec.Dir, JobDir,
		"--ro-bind", filepath.Join(spec.Dir, "input"), InputDir,
		"--ro-bind-data", "3", runnerAt,
		"--chdir", JobDir,
		"--setenv", "HOME", JobDir,
		"--setenv", "TMPDIR", "/tmp",
		"--setenv", "GAAS_DATASET", InputDir + "/" + spec.Dataset,
		"--setenv", "GAAS_OUTPUT", OutputDir,
		"--setenv", "GAAS_PACKAGES", JobDir + "/.packages",
		"--", s.python, "-I", "-u", runnerAt, InputDir + "/" + spec.Script,
	}
	// The runner reaches the sandbox through a pipe (--ro-bind-data), so
	// no copy of it sits where the job could change it.
	return s.exec(ctx, args, spec, runnerPy)
}

// exec runs bwrap with the base isolation plus args, streaming output and
// enforcing the wall limit. fd3, when not nil, is readable inside bwrap as
// file descriptor 3 (for --ro-bind-data).
func (s *Sandbox) exec(ctx context.Context, args []string, spec Spec, fd3 []byte) (Result, error) {
	wall := spec.Wall
	if wall <= 0 {
		wall = DefaultWall
	}
	limit := spec.OutputBytes
	if limit <= 0 {
		limit = DefaultOutputBytes
	}
	args = append(s.baseArgs(), args...)
	runCtx, cancel := context.WithTimeout(ctx, wall)
	defer cancel()
	cmd := exec.Command(s.bwrap, args...)
	// Its own process group, and SIGKILL if this process dies: nothing the
	// job started may outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if fd3 != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return Result{}, err
		}
		defer r.Close()
		_, err = w.Write(fd3) // small: far below a pipe's buffer
		w.Close()
		if err != nil {
			return Result{}, err
		}
		cmd.ExtraFiles = []*os.File{r}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return Result{}, err
	}
	out := &outputLimiter{limit: limit, emit: spec.Output}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); out.scan("stdout", stdout) }()
	go func() { defer wg.Done(); out.scan("stderr", stderr) }()

	start := time.Now()
	waitErr := make(chan error, 1)
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that forked the child:
		// keep this goroutine on its thread until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waitErr <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return Result{}, fmt.Errorf("starting bubblewrap: %w", err)
	}
	var werr error
	select {
	case werr = <-waitErr:
	case <-runCtx.Done():
		// Killing bwrap kills the namespace's init, and with it every
		// process in the job's PID namespace.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-waitErr
	}
	wg.Wait()
	res := Result{Duration: time.Since(start), OutputCut: out.cut}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		res.Outcome = Cancelled
	case runCtx.Err() != nil:
		res.Outcome = TimedOut
	case werr == nil:
		res.Outcome = Completed
	case errors.As(werr, &exitErr):
		res.ExitCode = exitErr.ExitCode()
		res.Outcome = ScriptFailed
		if res.ExitCode == noMainExit {
			res.Outcome = NoMain
		}
	default:
		return res, fmt.Errorf("waiting for the sandbox: %w", werr)
	}
	return res, nil
}

// outputLimiter turns the script's output into lines and stops passing
// them on after limit bytes, with one visible marker; the job goes on.
type outputLimiter struct {
	mu    sync.Mutex
	limit int64
	n     int64
	cut   bool
	emit  func(stream, line string)
}

func (o *outputLimiter) scan(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, isPrefix, err := br.ReadLine()
		if len(line) > 0 || (err == nil && !isPrefix) {
			o.line(stream, bytes.ToValidUTF8(line, []byte("\uFFFD")))
		}
		if err != nil {
			return
		}
	}
}

func (o *outputLimiter) line(stream string, line []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cut {
		return
	}
	o.n += int64(len(line)) + 1
	if o.n > o.limit {
		o.cut = true
		if o.emit != nil {
			o.emit("stderr", fmt.Sprintf("[gaas: output cut after %d MB; the job keeps running]", o.limit>>20))
		}
		return
	}
	if o.emit != nil {
		o.emit(stream, string(line))
	}
}
