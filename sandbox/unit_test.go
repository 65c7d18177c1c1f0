package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestFindHierarchy parses saved /proc files: cgroup v1 as on this
// project's CI machines (memory and pids in their own hierarchies, an
// empty v2 mount beside them), and v2 as on a systemd desktop.
func TestFindHierarchy(t *testing.T) {
	h, err := findHierarchy(open(t, "mountinfo-v1.txt"), open(t, "cgroup-v1.txt"), func(string) string { return "" })
	if err != nil || h.version != 1 {
		t.Fatalf("v1: %+v %v", h, err)
	}
	if !strings.HasPrefix(h.dirs["memory"], "/sys/fs/cgroup/memory") || h.dirs["pids"] != "/sys/fs/cgroup/pids" {
		t.Fatalf("v1 folders %v", h.dirs)
	}
	h, err = findHierarchy(open(t, "mountinfo-v2.txt"), open(t, "cgroup-v2.txt"), func(dir string) string {
		if dir != "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/gaas.service" {
			t.Errorf("controllers read from %s", dir)
		}
		return "cpuset cpu io memory pids\n"
	})
	if err != nil || h.version != 2 {
		t.Fatalf("v2: %+v %v", h, err)
	}
	_, err = findHierarchy(open(t, "mountinfo-v2.txt"), open(t, "cgroup-v2.txt"), func(string) string { return "cpu io" })
	if err == nil || !strings.Contains(err.Error(), "not memory and pids") {
		t.Fatalf("v2 without the controllers delegated: %v", err)
	}
}

func TestDriverLibsAndGPUArgs(t *testing.T) {
	libs := DriverLibs(open(t, "ldconfig.txt"))
	want := []string{
		"/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so", "/usr/local/nvidia/lib64/libcuda.so.1", "/opt/nvidia/driver/libcuda.so.1",
	}
	if !reflect.DeepEqual(libs, want) {
		t.Fatalf("driver libraries\n got %q\nwant %q", libs, want)
	}
	devices := map[string]bool{"/dev/nvidiactl": true, "/dev/nvidia-uvm": true, "/dev/nvidia-uvm-tools": true, "/dev/nvidia0": true, "/dev/nvidia1": true}
	g := &GPU{Index: 1, UUID: "GPU-abc", Libs: libs, exists: func(p string) bool { return devices[p] }}
	args := strings.Join(g.args(), " ")
	for _, w := range []string{
		"--dev-bind /dev/nvidiactl /dev/nvidiactl", "--dev-bind /dev/nvidia-uvm /dev/nvidia-uvm", "--dev-bind /dev/nvidia-uvm-tools /dev/nvidia-uvm-tools",
		"--dev-bind /dev/nvidia1 /dev/nvidia1", "--ro-bind /opt/nvidia/driver/libcuda.so.1 /opt/nvidia/driver/libcuda.so.1",
		"--ro-bind /sys /sys", "--setenv CUDA_VISIBLE_DEVICES GPU-abc", "--setenv LD_LIBRARY_PATH /opt/nvidia/driver",
	} {
		if !strings.Contains(args, w) {
			t.Errorf("GPU arguments lack %q:\n%s", w, args)
		}
	}
	for _, bad := range []string{"/dev/nvidia0", "--dev-bind /dev/nvidia-modeset", "--ro-bind /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"} {
		if strings.Contains(args, bad) {
			t.Errorf("GPU arguments bind %q, which they must not:\n%s", bad, args)
		}
	}
}

func TestEnvKey(t *testing.T) {
	s := &Sandbox{version: "3.11.2"}
	a, b := s.EnvKey([]string{"numpy", "Torch==2.2.0"}), s.EnvKey([]string{"torch==2.2.0", "numpy"})
	if a != b {
		t.Fatal("the same package set in another order got another environment")
	}
	s.PipFindLinks = "/wheels"
	if s.EnvKey([]string{"numpy", "torch==2.2.0"}) == a {
		t.Fatal("another package source shared an environment")
	}
}

// TestNoBubblewrapSaysHowToFix: a machine without bwrap cannot sandbox,
// and is told the one command that fixes it.
func TestNoBubblewrapSaysHowToFix(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := New(context.Background())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "sudo apt-get install bubblewrap") {
		t.Fatalf("New without bwrap: %v", err)
	}
}
