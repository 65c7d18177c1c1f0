// Package sandbox is the only way GaaS runs a job's code: a buyer's Python
// script, on a provider's machine, inside bubblewrap (new user, PID,
// network, IPC, UTS and cgroup namespaces, nested user namespaces
// disabled, no capabilities, a cleared environment, a read-only system, no
// network, only the job folder writable), in a cgroup that limits its
// memory and processes, under rlimits, a disk quota and a wall-time limit,
// with every process it started killed when it ends.
package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

//go:embed runner.py
var runnerPy []byte

// noMainExit is runner.py's exit code for a script without main().
const noMainExit = 119

// Paths inside the sandbox.
const (
	JobDir      = "/job"
	InputDir    = "/job/input"
	OutputDir   = "/job/output"
	PackagesDir = "/opt/gaas/packages"
	runnerAt    = "/opt/gaas/runner.py"
)

const maxLine = 4 << 10

// ErrUnavailable means this machine cannot sandbox jobs; its message says
// why and how to fix it.
var ErrUnavailable = errors.New("sandbox unavailable")

// Sandbox runs scripts with one bubblewrap and one Python.
type Sandbox struct {
	bwrap   string
	python  string
	version string   // Python's version, part of a package environment's key
	binds   []string // extra read-only binds the Python installation needs
	hier    *hierarchy
	enf     Enforcement

	// Limits are the provider's limits for every job; a job's budget cap
	// replaces Wall.
	Limits Limits
	// EnvDir caches package environments by package set; empty means
	// every install starts from nothing.
	EnvDir string
	// PipIndexURL, when set, is the package index pip installs from.
	PipIndexURL string
	// PipFindLinks, when set, is a local folder of wheels that pip
	// installs from instead of any index (bound read-only).
	PipFindLinks string
	// GPU, when set, is bound into every job.
	GPU *GPU
}

// New finds bubblewrap, Python and a cgroup hierarchy, and checks that a
// sandbox can actually start here (user namespaces can be disabled even
// where bwrap exists).
func New(ctx context.Context) (*Sandbox, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("%w: bubblewrap (bwrap) is not installed; install it with: sudo apt-get install bubblewrap", ErrUnavailable)
	}
	python, err := FindPython()
	if err != nil {
		return nil, fmt.Errorf("%w: python3 is not installed; install it with: sudo apt-get install python3", ErrUnavailable)
	}
	s := &Sandbox{bwrap: bwrap, python: python}
	out, err := exec.CommandContext(ctx, python, "-I", "-c", "import sys; print(sys.base_prefix); print(sys.version.split()[0])").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not run: %v", ErrUnavailable, python, err)
	}
	if f := strings.Fields(string(out)); len(f) == 2 {
		if prefix := f[0]; prefix != "/usr" && !strings.HasPrefix(prefix, "/usr/") {
			s.binds = append(s.binds, prefix)
		}
		s.version = f[1]
	}
	probe := exec.CommandContext(ctx, bwrap, append(s.baseArgs(DefaultLimits), "--unshare-net", "--", python, "-c", "pass")...)
	if out, err := probe.CombinedOutput(); err != nil {
		msg := strings.TrimSpace(string(out))
		hint := ""
		if strings.Contains(msg, "ermission") || strings.Contains(msg, "namespace") {
			hint = " Unprivileged user namespaces look disabled: on Ubuntu 24.04 and later allow them for bwrap with an AppArmor profile, or set kernel.apparmor_restrict_unprivileged_userns=0."
		}
		return nil, fmt.Errorf("%w: bubblewrap could not start a sandbox on this machine (%s).%s", ErrUnavailable, msg, hint)
	}
	h, cgErr := detectHierarchy()
	s.hier, s.enf = h, enforcement(h, cgErr)
	return s, nil
}

// FindPython is the Python jobs run with: the system's, which lives under
// the read-only /usr every sandbox sees, or else the first on PATH.
func FindPython() (string, error) {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3", nil
	}
	return exec.LookPath("python3")
}

// Python is the interpreter jobs run with.
func (s *Sandbox) Python() string { return s.python }

// Enforcement says how each limit is enforced on this machine.
func (s *Sandbox) Enforcement() Enforcement { return s.enf }

// baseArgs isolate everything but the network; Run adds --unshare-net,
// the job's folder and the command.
func (s *Sandbox) baseArgs(l Limits) []string {
	args := []string{
		"--unshare-user", "--disable-userns",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
		// The job's own process is pid 1: no bubblewrap monitor shares its
		// namespace for it to ptrace, and when it ends, the kernel kills
		// everything else in the namespace.
		"--as-pid-1",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
		"--hostname", "gaas-job",
		"--ro-bind", "/usr", "/usr",
		"--proc", "/proc", "--dev", "/dev",
		"--size", fmt.Sprint(l.TmpBytes), "--tmpfs", "/tmp",
		"--size", fmt.Sprint(l.TmpBytes), "--tmpfs", "/dev/shm",
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
		"--setenv", "TMPDIR", "/tmp",
	)
}

// Spec is one run.
type Spec struct {
	// Dir is the job folder on the host. Its input/ holds the dataset and
	// script (read-only inside); output/ is created and is where the
	// script's model goes. Dir is /job inside the sandbox.
	Dir     string
	Script  string // file name inside input/
	Dataset string // file name inside input/
	Env     string // a package environment from Install, or ""
	// Limits override the sandbox's own where set; Wall is the budget cap.
	Limits Limits
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
	OutOfMemory  Outcome = "out_of_memory" // the memory limit was reached
	DiskFull     Outcome = "disk_full"     // the job folder passed its quota
	Cancelled    Outcome = "cancelled"     // the caller's context ended
)

// Result says how a run ended.
type Result struct {
	Outcome   Outcome
	ExitCode  int
	Duration  time.Duration
	OutputCut bool
	Limits    Limits // the limits the run had
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
	case OutOfMemory:
		return fmt.Sprintf("it used more than its %s of memory", bytesString(r.Limits.MemoryBytes))
	case DiskFull:
		return fmt.Sprintf("it wrote more than its %s of disk", bytesString(r.Limits.DiskBytes))
	case Cancelled:
		return "stopped: the job was cancelled"
	}
	return fmt.Sprintf("the script exited with status %d", r.ExitCode)
}

// Run runs spec.Script's main() in the sandbox and waits for it to end.
// A cancelled ctx kills the whole sandbox at once.
func (s *Sandbox) Run(ctx context.Context, spec Spec) (Result, error) {
	for _, name := range []string{spec.Script, spec.Dataset} {
		if name != filepath.Base(name) || name == "." || name == ".." || name == "" {
			return Result{}, fmt.Errorf("input name %q must be a plain file name", name)
		}
	}
	if err := os.MkdirAll(filepath.Join(spec.Dir, "output"), 0o755); err != nil {
		return Result{}, err
	}
	lim := s.limits(spec.Limits)
	args := []string{"--unshare-net",
		"--bind", spec.Dir, JobDir,
		"--ro-bind", filepath.Join(spec.Dir, "input"), InputDir,
		// The runner reaches the sandbox through a pipe, so no copy of it
		// sits where the job could change it.
		"--ro-bind-data", "3", runnerAt,
		"--chdir", JobDir,
		"--setenv", "HOME", JobDir,
		"--setenv", "GAAS_DATASET", InputDir + "/" + spec.Dataset,
		"--setenv", "GAAS_OUTPUT", OutputDir,
	}
	if spec.Env != "" {
		args = append(args, "--ro-bind", spec.Env, PackagesDir, "--setenv", "GAAS_PACKAGES", PackagesDir)
	}
	if s.GPU != nil {
		args = append(args, s.GPU.args()...)
	}
	args = append(args, "--", s.python, "-I", "-u", runnerAt, InputDir+"/"+spec.Script)
	return s.exec(ctx, run{args: args, lim: lim, output: spec.Output, fd3: runnerPy, diskDir: spec.Dir})
}

// limits are a job's limits over the provider's, over the defaults.
func (s *Sandbox) limits(job Limits) Limits { return job.over(s.Limits.withDefaults()) }

// run is one bubblewrap invocation.
type run struct {
	args    []string // after the base arguments
	lim     Limits
	output  func(stream, line string)
	fd3     []byte // readable inside as file descriptor 3 (for --ro-bind-data)
	diskDir string // measured against lim.DiskBytes; "" for none
}

// gate holds the sandbox back until it is in its cgroup and under its
// rlimits: a shell waits on fd 4, then execs bubblewrap, whose processes
// all start inside.
const gate = `read -r _ <&4; exec 4<&-; exec "$@"`

// sandboxEnv is all the environment the gate and bubblewrap get. The
// sandbox's init (bubblewrap's pid 1) keeps the environment it was started
// with, and a job can read it in /proc/1/environ: the node's own variables
// must never reach it.
var sandboxEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// exec runs bwrap with the base isolation plus r.args, streaming output
// and enforcing every limit.
func (s *Sandbox) exec(ctx context.Context, r run) (Result, error) {
	closeInheritedFiles()
	args := append(s.baseArgs(r.lim), r.args...)
	runCtx, cancel := context.WithTimeout(ctx, r.lim.Wall)
	defer cancel()
	// The options go through fd 5 (--args), so the host paths in them do
	// not show in the sandbox's /proc/1/cmdline; the command stays in argv.
	var options bytes.Buffer
	command := args
	for i, a := range args {
		if a == "--" {
			command = args[i:]
			break
		}
		options.WriteString(a)
		options.WriteByte(0)
	}
	// Last of the options, once every mount point exists: bwrap's own
	// root is an unlimited tmpfs, and nothing may be written there.
	options.WriteString("--remount-ro\x00/\x00")
	fd5, err := dataPipe(options.Bytes())
	if err != nil {
		return Result{}, err
	}
	defer fd5.Close()
	bwrapArgs := []string{"-c", gate, "gaas-sandbox", s.bwrap, "--args", "5"}
	var fd6 *os.File
	if filter := seccompFilter(); filter != nil {
		if fd6, err = dataPipe(filter); err != nil {
			return Result{}, err
		}
		defer fd6.Close()
		bwrapArgs = append(bwrapArgs, "--seccomp", "6")
	}
	cmd := exec.Command("/bin/sh", append(bwrapArgs, command...)...)
	cmd.Env, cmd.Dir = sandboxEnv, "/" // the shell would put its folder in PWD
	// Its own process group, and SIGKILL if this process dies: nothing the
	// job started may outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fd3, err := dataPipe(r.fd3)
	if err != nil {
		return Result{}, err
	}
	defer fd3.Close()
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return Result{}, err
	}
	defer gateR.Close()
	defer gateW.Close()
	cmd.ExtraFiles = []*os.File{fd3, gateR, fd5}
	if fd6 != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, fd6)
	}
	// Our own pipes, not cmd.StdoutPipe: Wait closes those as soon as the
	// process exits, losing output still buffered in them. These are read
	// to the end, which comes once every process of the job is gone.
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return Result{}, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return Result{}, err
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	out := &outputLimiter{limit: r.lim.OutputBytes, emit: r.output}
	var scanners sync.WaitGroup
	scanners.Add(2)
	go func() { defer scanners.Done(); defer stdoutR.Close(); out.scan("stdout", stdoutR) }()
	go func() { defer scanners.Done(); defer stderrR.Close(); out.scan("stderr", stderrR) }()

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
	err = <-started
	stdoutW.Close() // the child has its copies; the scanners see EOF when it is done
	stderrW.Close()
	if err != nil {
		scanners.Wait()
		return Result{}, fmt.Errorf("starting the sandbox: %w", err)
	}
	pid := cmd.Process.Pid
	// Once the gate is reaped its process group id may be reused: after
	// that, kill must not fire.
	var mu sync.Mutex
	exited := false
	kill := func() {
		mu.Lock()
		defer mu.Unlock()
		if !exited {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	markExited := func() {
		mu.Lock()
		exited = true
		mu.Unlock()
	}
	var cg *jobCgroup
	if s.hier != nil {
		if cg, err = s.hier.create(jobCgroupName(), r.lim); err == nil {
			err = cg.add(pid)
		}
		if err != nil {
			kill()
			<-waitErr
			if cg != nil {
				cg.remove()
			}
			return Result{}, fmt.Errorf("placing the job in its cgroup: %w", err)
		}
		defer cg.remove()
	}
	if err := setRlimits(pid, r.lim, cg != nil); err != nil {
		kill()
		<-waitErr
		return Result{}, err
	}
	gateW.Write([]byte("go\n"))
	gateW.Close()

	var diskFull atomic.Bool
	if r.diskDir != "" {
		go watchDisk(runCtx, r.diskDir, r.lim, cg, func() { diskFull.Store(true); kill() })
	}
	var werr error
	select {
	case werr = <-waitErr:
	case <-runCtx.Done():
		// Killing bwrap kills the namespace's init, and with it every
		// process in the job's PID namespace.
		kill()
		werr = <-waitErr
	}
	markExited()
	if cg != nil {
		cg.killAll() // anything that slipped out of the PID namespace's reach
	}
	scanners.Wait()
	res := Result{Duration: time.Since(start), OutputCut: out.cut, Limits: r.lim}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		res.Outcome = Cancelled
	case runCtx.Err() != nil:
		res.Outcome = TimedOut
	case diskFull.Load():
		res.Outcome = DiskFull
	case cg != nil && cg.oomKilled():
		res.Outcome = OutOfMemory
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

// closeInheritedFiles marks every file descriptor this process holds
// close-on-exec. Go opens its own that way, but descriptors inherited from
// whatever started the node are not, and would reach the job.
func closeInheritedFiles() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	entries, _ := os.ReadDir("/proc/self/fd") // kernels before 5.11
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// dataPipe is a pipe already holding data, closed for writing. Data
// larger than a pipe's buffer is written as it is read.
func dataPipe(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		w.Write(data)
		w.Close()
	}()
	return r, nil
}

func randomName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// setRlimits puts the gate shell (and so everything it execs and forks)
// under per-process limits: open files, and the size of any one file (the
// disk quota). Without a cgroup, memory and processes get rlimits too, the
// best a plain process can do.
func setRlimits(pid int, l Limits, cgroup bool) error {
	set := func(res int, v uint64) error {
		if err := unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil); err != nil {
			return fmt.Errorf("setting resource limit %d: %w", res, err)
		}
		return nil
	}
	if err := set(unix.RLIMIT_NOFILE, l.OpenFiles); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_FSIZE, uint64(l.DiskBytes)); err != nil {
		return err
	}
	set(unix.RLIMIT_CORE, 0) // no core dumps of a stranger's process; best effort
	if cgroup {
		return nil
	}
	if err := set(unix.RLIMIT_AS, uint64(l.MemoryBytes)); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return set(unix.RLIMIT_NPROC, uint64(l.Processes))
	}
	return nil
}

// watchDisk measures what the job wrote into its folder (its read-only
// input aside), and the files its processes deleted but hold open, twice a
// second, and calls over once it passes the limits.
func watchDisk(ctx context.Context, dir string, lim Limits, cg *jobCgroup, over func()) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		used := diskUsage(dir, lim.Files)
		if cg != nil && used <= lim.DiskBytes {
			used += openDeleted(cg.procs())
		}
		if used > lim.DiskBytes {
			over()
			return
		}
	}
}

// openDeleted adds up the blocks of files the processes deleted but keep
// open (or made with O_TMPFILE): invisible in the folder, still on disk.
func openDeleted(pids []int) int64 {
	var total int64
	seen := map[uint64]bool{}
	for _, pid := range pids {
		fdDir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasSuffix(target, " (deleted)") {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join(fdDir, fd.Name()), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || seen[st.Ino] {
				continue
			}
			seen[st.Ino] = true
			total += st.Blocks * 512
		}
	}
	return total
}

// diskUsage adds up the blocks allocated under dir, input/ excepted; a
// job with more than maxFiles files and folders (each an inode of the
// provider's disk, even empty) counts as over any limit. Folders the job made
// unreadable are opened up again first: their owner is this process.
func diskUsage(dir string, maxFiles int64) int64 {
	var total, files int64
	var walk func(root string)
	walk = func(root string) {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if d != nil && d.IsDir() && path != root && os.Chmod(path, 0o700) == nil {
					walk(path)
				}
				return nil
			}
			if d.IsDir() && path == filepath.Join(dir, "input") {
				return filepath.SkipDir
			}
			files++
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					total += st.Blocks * 512
				}
			}
			return nil
		})
	}
	walk(dir)
	if files > maxFiles {
		return math.MaxInt64
	}
	return total
}

// RemoveJobDir deletes a job folder, first giving back permissions the
// job may have taken away from its own folders.
func RemoveJobDir(dir string) error {
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
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
			o.emit("stderr", fmt.Sprintf("[gaas: output cut after %s; the job keeps running]", bytesString(o.limit)))
		}
		return
	}
	if o.emit != nil {
		o.emit(stream, string(line))
	}
}
