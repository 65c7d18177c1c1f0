package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The adversarial suite: each case is a real Python script, run through
// the real sandbox, that tries to get out or to outrun its limits. Each
// asserts that it was stopped or contained.

type attack struct {
	name   string
	script string
	limits Limits
	setup  func(t *testing.T) map[string]string // values filled into the script
	check  func(t *testing.T, res Result, out string, spec Spec)
}

// contained: the script ran to its end, and every probe it made printed
// BLOCKED rather than LEAKED.
func contained(t *testing.T, res Result, out string, _ Spec) {
	t.Helper()
	if res.Outcome != Completed || strings.Contains(out, "LEAKED") || !strings.Contains(out, "BLOCKED") {
		t.Fatalf("outcome %s; output:\n%s", res.Outcome, out)
	}
}

func outcome(want ...Outcome) func(*testing.T, Result, string, Spec) {
	return func(t *testing.T, res Result, out string, _ Spec) {
		t.Helper()
		for _, w := range want {
			if res.Outcome == w {
				return
			}
		}
		t.Fatalf("outcome %s, want one of %v; output:\n%s", res.Outcome, want, out)
	}
}

// probe wraps a Python expression: it prints BLOCKED if the attempt
// raises, LEAKED with the value if it succeeds.
func probe(label, expr string) string {
	return fmt.Sprintf(`
    try:
        v = %s
        print("LEAKED %s", repr(v)[:200])
    except Exception as e:
        print("BLOCKED %s", type(e).__name__)
`, expr, label, label)
}

func TestAdversarial(t *testing.T) {
	s := newSandbox(t)
	if s.hier == nil {
		t.Logf("no cgroup here (%s): memory and process cases test the rlimit fallback", s.enf.CgroupErr)
	}
	for _, a := range []attack{
		{
			name: "network egress to a listener on the host",
			setup: func(t *testing.T) map[string]string {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						c.Write([]byte("LEAKED: reached the host\n"))
						c.Close()
					}
				}()
				return map[string]string{"PORT": fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)}
			},
			script: "import socket\ndef main():" + probe("tcp", "socket.create_connection(('127.0.0.1', PORT), timeout=3).recv(100)"),
			check:  contained,
		},
		{
			name:   "DNS lookup",
			script: "import socket\ndef main():" + probe("dns", "socket.getaddrinfo('example.com', 443)"),
			check:  contained,
		},
		{
			name: "reading the provider's home, ~/.ssh and a file outside the job",
			setup: func(t *testing.T) map[string]string {
				secret := filepath.Join(t.TempDir(), "secret.txt")
				os.WriteFile(secret, []byte("provider's secret"), 0o644)
				home, _ := os.UserHomeDir()
				return map[string]string{"SECRET": secret, "HOME_DIR": home}
			},
			script: "import os\ndef main():" + probe("secret", "open('SECRET').read()") + probe("ssh", "os.listdir(os.path.join('HOME_DIR', '.ssh'))") +
				probe("home", "os.listdir('HOME_DIR')") + probe("root", "os.listdir('/root')"),
			check: contained,
		},
		{
			name:   "reading /etc/shadow and /etc/passwd",
			script: "def main():" + probe("shadow", "open('/etc/shadow').read()") + probe("passwd", "open('/etc/passwd').read()"),
			check:  contained,
		},
		{
			name: "reading the environment of pid 1 and of the node",
			setup: func(t *testing.T) map[string]string {
				t.Setenv("GAAS_CANARY", "node-secret")
				return map[string]string{"NODE_PID": fmt.Sprint(os.Getpid())}
			},
			script: `import os
def main():
    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
        env = open('/proc/%s/environ' % pid, 'rb').read()
        cmd = open('/proc/%s/cmdline' % pid, 'rb').read()
        leaked = b"node-secret" in env or b"/tmp/" in cmd or b"/root" in cmd
        print(("LEAKED pid %s: %r %r" % (pid, env[:200], cmd[:200])) if leaked else ("BLOCKED pid " + pid))
` + probe("node-env", "open('/proc/NODE_PID/environ','rb').read()"),
			check: contained,
		},
		{
			name: "seeing host processes",
			script: `import os
def main():
    pids = [p for p in os.listdir('/proc') if p.isdigit()]
    print("BLOCKED pids" if len(pids) <= 3 else "LEAKED pids %s" % pids)
`,
			check: contained,
		},
		{
			name: "writing outside the job folder",
			setup: func(t *testing.T) map[string]string {
				dir := t.TempDir()
				t.Cleanup(func() {
					if _, err := os.Stat(filepath.Join(dir, "planted")); err == nil {
						t.Error("the job planted a file in a host folder")
					}
				})
				return map[string]string{"HOST_DIR": dir}
			},
			script: "def main():" + probe("usr", "open('/usr/planted', 'w')") + probe("input", "open('/job/input/planted', 'w')") +
				probe("host", "open('HOST_DIR/planted', 'w')") + probe("etc", "open('/etc/ld.so.cache', 'a')"),
			check: contained,
		},
		{
			name:   "fork bomb",
			limits: Limits{Processes: 64, Wall: 10 * time.Second},
			script: `import os, time
def main():
    n = 0
    try:
        while True:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
    except OSError as e:
        print("BLOCKED fork after", n, type(e).__name__)
`,
			check: contained,
		},
		{
			name:   "memory bomb",
			limits: Limits{MemoryBytes: 256 << 20, Wall: 30 * time.Second},
			script: `def main():
    hog = []
    while True:
        hog.append(bytearray(64 << 20))
`,
			check: outcome(OutOfMemory, ScriptFailed), // ScriptFailed: MemoryError under the rlimit fallback
		},
		{
			name:   "disk fill",
			limits: Limits{DiskBytes: 64 << 20, Wall: 30 * time.Second},
			script: `import os, time
def main():
    for i in range(1000):
        with open('/job/fill-%d' % i, 'wb') as f:
            f.write(os.urandom(8 << 20))
        time.sleep(0.05)
`,
			check: outcome(DiskFull),
		},
		{
			name:   "one huge file",
			limits: Limits{DiskBytes: 32 << 20, Wall: 30 * time.Second},
			script: `def main():
    with open('/job/output/huge.bin', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20))
`,
			check: outcome(ScriptFailed, DiskFull), // SIGXFSZ at the per-file limit, or the quota
		},
		{
			name:   "deleted files kept open",
			limits: Limits{DiskBytes: 64 << 20, Wall: 30 * time.Second},
			script: `import os, time
def main():
    kept = []
    for i in range(100):  # each file below the per-file limit, together far above
        f = open('/job/hidden', 'wb')
        os.unlink('/job/hidden')
        f.write(os.urandom(12 << 20))
        f.flush()
        kept.append(f)
        time.sleep(0.05)
`,
			check: outcome(DiskFull),
		},
		{
			name:   "an inode bomb",
			limits: Limits{Files: 5000, Wall: 60 * time.Second},
			script: `import os
def main():
    os.makedirs('/job/many', exist_ok=True)
    for i in range(10000000):
        open('/job/many/%d' % i, 'w').close()
`,
			check: outcome(DiskFull),
		},
		{
			name:   "filling /tmp",
			limits: Limits{TmpBytes: 16 << 20},
			script: "def main():" + probe("tmp", "open('/tmp/fill', 'wb').write(b'x' * (64 << 20))"),
			check:  contained,
		},
		{
			name:   "endless stdout",
			limits: Limits{OutputBytes: 1 << 20, Wall: 3 * time.Second},
			script: "def main():\n    while True:\n        print('x' * 100)\n",
			check: func(t *testing.T, res Result, out string, _ Spec) {
				if res.Outcome != TimedOut || !res.OutputCut || len(out) > 2<<20 {
					t.Fatalf("outcome %s, cut %v, %d bytes passed on", res.Outcome, res.OutputCut, len(out))
				}
			},
		},
		{
			name:   "sleeping past the cap",
			limits: Limits{Wall: time.Second},
			script: "import time\ndef main():\n    time.sleep(120)\n",
			check: func(t *testing.T, res Result, out string, _ Spec) {
				if res.Outcome != TimedOut || res.Duration > 10*time.Second {
					t.Fatalf("outcome %s after %s", res.Outcome, res.Duration)
				}
			},
		},
		{
			name: "a double-forked daemon outliving the job",
			script: `import os, time
def main():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                with open('/job/alive', 'w') as f:
                    f.write(str(time.time()))
                time.sleep(0.05)
        os._exit(0)
    time.sleep(0.5)
    print("parent returns, daemon left behind")
`,
			check: func(t *testing.T, res Result, out string, spec Spec) {
				if res.Outcome != Completed {
					t.Fatalf("outcome %s\n%s", res.Outcome, out)
				}
				alive := filepath.Join(spec.Dir, "alive")
				before, err := os.ReadFile(alive)
				if err != nil {
					t.Fatalf("the daemon never ran: %v", err)
				}
				time.Sleep(500 * time.Millisecond)
				if after, _ := os.ReadFile(alive); string(after) != string(before) {
					t.Fatal("the daemon is still running after the job ended")
				}
			},
		},
		{
			name: "ptrace of a host process",
			setup: func(t *testing.T) map[string]string {
				return map[string]string{"NODE_PID": fmt.Sprint(os.Getpid())}
			},
			script: `import ctypes, os
def main():
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in (NODE_PID, 1):
        r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
        print(("LEAKED attached to %d" % pid) if r == 0 else ("BLOCKED ptrace %d errno %d" % (pid, ctypes.get_errno())))
`,
			check: contained,
		},
		{
			name: "TIOCSTI: typing into the provider's terminal",
			script: `import fcntl, os, termios
def main():
    for fd in (0, 1, 2):
        try:
            fcntl.ioctl(fd, termios.TIOCSTI, b'x')
            print("LEAKED tiocsti on", fd)
        except OSError as e:
            print("BLOCKED tiocsti", fd, e.errno)
` + "    " + strings.TrimSpace(probe("tty", "os.open('/dev/tty', os.O_RDWR)")) + "\n",
			check: contained,
		},
		{
			name: "a link in the output to the provider's files",
			script: `import os
def main():
    os.symlink('/etc/passwd', '/job/output/model.bin')
`,
			check: func(t *testing.T, res Result, out string, spec Spec) {
				if _, err := CheckOutput(spec.Dir, 1<<30); err == nil || !strings.Contains(err.Error(), "link") {
					t.Fatalf("a symlinked model was accepted: %v", err)
				}
			},
		},
		{
			name: "the output folder swapped for a link",
			script: `import os, shutil
def main():
    shutil.rmtree('/job/output')
    os.symlink('/etc', '/job/output')
`,
			check: func(t *testing.T, res Result, out string, spec Spec) {
				if _, err := CheckOutput(spec.Dir, 1<<30); err == nil || !strings.Contains(err.Error(), "not a folder") {
					t.Fatalf("a symlinked output folder was accepted: %v", err)
				}
			},
		},
		{
			name: "a sparse model",
			script: `def main():
    with open('/job/output/model.bin', 'wb') as f:
        f.seek(50 << 30)
        f.write(b'x')
`,
			limits: Limits{DiskBytes: 60 << 30},
			check: func(t *testing.T, res Result, out string, spec Spec) {
				if _, err := CheckOutput(spec.Dir, 100<<30); err == nil || !strings.Contains(err.Error(), "sparse") {
					t.Fatalf("a sparse model was accepted: %v (%s)", err, res.Outcome)
				}
			},
		},
		{
			name: "the node's session keyring",
			script: `import ctypes, platform
def main():
    libc = ctypes.CDLL(None, use_errno=True)
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING)
    r = libc.syscall(250 if platform.machine() == 'x86_64' else 219, 0, -3, 0)
    print(("LEAKED keyring %d" % r) if r >= 0 else ("BLOCKED keyctl errno %d" % ctypes.get_errno()))
`,
			check: contained,
		},
		{
			name: "io_uring, whose operations bypass seccomp",
			script: `import ctypes
def main():
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    r = libc.syscall(425, 8, params)
    print(("LEAKED io_uring fd %d" % r) if r >= 0 else ("BLOCKED io_uring errno %d" % ctypes.get_errno()))
`,
			check: contained,
		},
		{
			name:   "memory in the root tmpfs and /dev/shm",
			limits: Limits{TmpBytes: 16 << 20},
			script: "def main():" + probe("root", "open('/planted', 'wb').write(b'x' * (64 << 20))") +
				probe("shm", "open('/dev/shm/fill', 'wb').write(b'x' * (64 << 20))"),
			check: contained,
		},
		{
			name: "file descriptors inherited from the node",
			setup: func(t *testing.T) map[string]string {
				// A descriptor without close-on-exec, as one inherited from
				// whatever started the node would be.
				fd, err := syscall.Open(os.Args[0], syscall.O_RDONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { syscall.Close(fd) })
				return nil
			},
			script: `import os
def main():
    fds = [int(f) for f in os.listdir('/proc/self/fd')]
    extra = [f for f in fds if f > 3]  # 3 is the listing's own
    print(("LEAKED fds %s" % extra) if extra else "BLOCKED fds")
`,
			check: contained,
		},
		{
			name: "nested user namespaces and mounts",
			script: `import ctypes, os
def main():
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.unshare(0x10000000)  # CLONE_NEWUSER
    print(("LEAKED unshare") if r == 0 else ("BLOCKED unshare errno %d" % ctypes.get_errno()))
    r = libc.mount(b"none", b"/job", b"tmpfs", 0, None)
    print(("LEAKED mount") if r == 0 else ("BLOCKED mount errno %d" % ctypes.get_errno()))
`,
			check: contained,
		},
	} {
		t.Run(a.name, func(t *testing.T) {
			script := a.script
			if a.setup != nil {
				for k, v := range a.setup(t) {
					script = strings.ReplaceAll(script, k, v)
				}
			}
			spec := job(t, script)
			if a.limits != (Limits{}) {
				spec.Limits = a.limits
			}
			if spec.Limits.Wall == 0 {
				spec.Limits.Wall = 30 * time.Second
			}
			var out lines
			spec.Output = out.add
			res, err := s.Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			a.check(t, res, out.text(), spec)
		})
	}
}

// TestKillingTheNodeKillsTheJob runs a sandboxed job from a child process
// (this test binary, as a stand-in for the node), kills that process with
// SIGKILL mid-job, and checks that the job's processes died with it.
func TestKillingTheNodeKillsTheJob(t *testing.T) {
	if os.Getenv("GAAS_SANDBOX_HELPER") != "" {
		return // the helper's work is done in TestMain
	}
	newSandbox(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "input"), 0o755)
	os.WriteFile(filepath.Join(dir, "input", "train.py"), []byte(`import os, time
def main():
    if os.fork() == 0:
        os.setsid()
    while True:
        with open('/job/alive-%d' % os.getpid(), 'w') as f:
            f.write(str(time.time()))
        time.sleep(0.05)
`), 0o644)
	os.WriteFile(filepath.Join(dir, "input", "data.csv"), []byte("a\n1\n"), 0o644)
	helper := exec.Command(os.Args[0], "-test.run", "^TestKillingTheNodeKillsTheJob$")
	helper.Env = append(os.Environ(), "GAAS_SANDBOX_HELPER="+dir)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	var alive []string
	for deadline := time.Now().Add(20 * time.Second); len(alive) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the job never started in the helper")
		}
		time.Sleep(50 * time.Millisecond)
		alive, _ = filepath.Glob(filepath.Join(dir, "alive-*"))
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	time.Sleep(300 * time.Millisecond) // the kernel delivers the parent-death signals
	snapshot := func() string {
		var b strings.Builder
		for _, f := range alive {
			data, _ := os.ReadFile(f)
			b.Write(data)
		}
		return b.String()
	}
	before := snapshot()
	time.Sleep(500 * time.Millisecond)
	if snapshot() != before {
		t.Fatal("the job's processes survived the node being killed")
	}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv("GAAS_SANDBOX_HELPER"); dir != "" {
		s, err := New(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		s.Run(context.Background(), Spec{Dir: dir, Script: "train.py", Dataset: "data.csv"})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRlimitFallback runs the memory bomb as on a machine without
// cgroups: the address-space rlimit stops it.
func TestRlimitFallback(t *testing.T) {
	s := newSandbox(t)
	s.hier, s.enf = nil, enforcement(nil, fmt.Errorf("pretending there is none"))
	if !strings.Contains(s.Enforcement().Memory, "approximate") {
		t.Fatalf("enforcement without cgroups: %+v", s.Enforcement())
	}
	spec := job(t, "def main():\n    hog = []\n    while True:\n        hog.append(bytearray(64 << 20))\n")
	spec.Limits = Limits{MemoryBytes: 512 << 20, Wall: 30 * time.Second}
	var out lines
	spec.Output = out.add
	res, err := s.Run(context.Background(), spec)
	if err != nil || res.Outcome != ScriptFailed || !strings.Contains(out.text(), "MemoryError") {
		t.Fatalf("%+v %v\n%s", res, err, out.text())
	}
}
