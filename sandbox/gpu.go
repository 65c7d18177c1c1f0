package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// GPU is one NVIDIA GPU given to every job of this sandbox.
type GPU struct {
	Index int    // NVML index: /dev/nvidia<Index>
	UUID  string // for CUDA_VISIBLE_DEVICES
	// Libs are the driver libraries CUDA needs (see DriverLibs).
	Libs []string
	// exists reports whether a device node is present; nil means os.Stat.
	exists func(string) bool
}

// driverLibs are the user-space driver libraries the NVIDIA container
// toolkit mounts for the compute and utility capabilities.
var driverLibs = []string{
	"libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
	"libnvidia-nvvm.so", "libnvidia-opencl.so", "libnvidia-cfg.so", "libnvidia-gpucomp.so",
}

// DriverLibs picks the NVIDIA driver libraries out of `ldconfig -p` output.
func DriverLibs(ldconfig io.Reader) []string {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(ldconfig)
	for sc.Scan() {
		// 	libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
		name, path, ok := strings.Cut(strings.TrimSpace(sc.Text()), " => ")
		if !ok || !strings.Contains(name, "x86-64") && !strings.Contains(name, "AArch64") {
			continue
		}
		base := strings.Fields(name)[0]
		for _, lib := range driverLibs {
			if strings.HasPrefix(base, lib) && !seen[path] {
				seen[path] = true
				out = append(out, path)
			}
		}
	}
	return out
}

// FindDriverLibs lists the NVIDIA driver libraries this machine has,
// from the dynamic linker's cache.
func FindDriverLibs() []string {
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		return nil
	}
	return DriverLibs(bytes.NewReader(out))
}

// args binds exactly the device nodes of this GPU and the driver
// libraries (those under /usr are already there, read-only), makes /sys
// readable for CUDA, and points CUDA at this card.
func (g *GPU) args() []string {
	exists := g.exists
	if exists == nil {
		exists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	}
	var args []string
	for _, dev := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", fmt.Sprintf("/dev/nvidia%d", g.Index)} {
		if exists(dev) {
			args = append(args, "--dev-bind", dev, dev)
		}
	}
	for _, lib := range g.Libs {
		if !strings.HasPrefix(lib, "/usr/") {
			args = append(args, "--ro-bind", lib, lib)
		}
	}
	dirs := map[string]bool{}
	for _, lib := range g.Libs {
		dirs[filepath.Dir(lib)] = true
	}
	args = append(args, "--ro-bind", "/sys", "/sys")
	visible := g.UUID
	if visible == "" {
		visible = fmt.Sprint(g.Index)
	}
	args = append(args, "--setenv", "CUDA_VISIBLE_DEVICES", visible, "--setenv", "NVIDIA_VISIBLE_DEVICES", visible)
	if len(dirs) > 0 {
		var ld []string
		for d := range dirs {
			if !strings.HasPrefix(d, "/usr/") {
				ld = append(ld, d)
			}
		}
		if len(ld) > 0 {
			sort.Strings(ld)
			args = append(args, "--setenv", "LD_LIBRARY_PATH", strings.Join(ld, ":"))
		}
	}
	return args
}
