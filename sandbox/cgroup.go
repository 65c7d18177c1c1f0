package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A job's cgroup holds its memory and process limits, and is how every
// process it started is found and killed. Both cgroup v1 (separate memory
// and pids hierarchies, as on this project's CI machines) and v2 (one
// unified hierarchy, as on modern desktops) are supported.

// hierarchy is where this process may create job cgroups.
type hierarchy struct {
	version int
	// v1: controller ("memory", "pids") → our own cgroup's folder in it.
	// v2: "" → our own cgroup's folder.
	dirs map[string]string
}

// mounts parses /proc/self/mountinfo: controller → mount point for v1
// hierarchies, and the v2 mount point.
func parseMounts(r io.Reader) (v1 map[string]string, v2 string) {
	v1 = map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// 35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 || lf[3] != "/" {
			continue
		}
		switch rf[0] {
		case "cgroup2":
			v2 = lf[4]
		case "cgroup":
			for _, opt := range strings.Split(rf[2], ",") {
				if opt == "memory" || opt == "pids" {
					v1[opt] = lf[4]
				}
			}
		}
	}
	return v1, v2
}

// parseProcCgroup parses /proc/self/cgroup: controller → our path for v1,
// and our v2 path.
func parseProcCgroup(r io.Reader) (v1 map[string]string, v2 string) {
	v1 = map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// 4:memory:/process_api/5be9…   or   0::/user.slice/…
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	return v1, v2
}

// findHierarchy works out where job cgroups can go, preferring v1 when its
// memory and pids controllers are mounted (then v2 holds none of them).
func findHierarchy(mountinfo, proccgroup io.Reader, controllers func(dir string) string) (*hierarchy, error) {
	mnt1, mnt2 := parseMounts(mountinfo)
	own1, own2 := parseProcCgroup(proccgroup)
	if mnt1["memory"] != "" && mnt1["pids"] != "" {
		return &hierarchy{version: 1, dirs: map[string]string{
			"memory": filepath.Join(mnt1["memory"], own1["memory"]),
			"pids":   filepath.Join(mnt1["pids"], own1["pids"]),
		}}, nil
	}
	if mnt2 != "" {
		dir := filepath.Join(mnt2, own2)
		have := strings.Fields(controllers(dir))
		if slices.Contains(have, "memory") && slices.Contains(have, "pids") {
			return &hierarchy{version: 2, dirs: map[string]string{"": dir}}, nil
		}
		return nil, fmt.Errorf("cgroup v2 at %s offers the controllers %q, not memory and pids", dir, have)
	}
	return nil, errors.New("no cgroup hierarchy with the memory and pids controllers is mounted")
}

// detectHierarchy finds the hierarchy of this machine and checks that a
// job cgroup can really be made in it.
func detectHierarchy() (*hierarchy, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer mi.Close()
	pc, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	h, err := findHierarchy(mi, pc, func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return string(b)
	})
	if err != nil {
		return nil, err
	}
	probe, err := h.create(fmt.Sprintf("probe-%d", os.Getpid()), Limits{MemoryBytes: 64 << 20, Processes: 8})
	if err != nil {
		return nil, err
	}
	probe.remove()
	h.sweepDead()
	return h, nil
}

// jobCgroupName names a job's cgroup after this process, so that a node
// can tell the leftovers of a crashed one (sweepDead) from another live
// node's jobs.
func jobCgroupName() string {
	return fmt.Sprintf("job-%d-%s", os.Getpid(), randomName())
}

// sweepDead removes the job cgroups of nodes that are no longer running
// (killing whatever is left in them).
func (h *hierarchy) sweepDead() {
	var parents []string
	if h.version == 1 {
		parents = []string{filepath.Join(h.dirs["memory"], "gaas"), filepath.Join(h.dirs["pids"], "gaas")}
	} else {
		parents = []string{filepath.Join(h.dirs[""], "gaas")}
	}
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			var pid int
			if _, err := fmt.Sscanf(e.Name(), "job-%d-", &pid); err != nil || pid <= 0 {
				continue
			}
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				cg := &jobCgroup{version: h.version, dirs: []string{filepath.Join(parent, e.Name())}}
				cg.remove()
			}
		}
	}
}

// jobCgroup is one job's cgroup (one folder per v1 controller, or one v2
// folder).
type jobCgroup struct {
	version int
	dirs    []string
}

func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting %s: %w", filepath.Join(dir, file), err)
	}
	return nil
}

// create makes a job cgroup with the limits set.
func (h *hierarchy) create(name string, l Limits) (*jobCgroup, error) {
	cg := &jobCgroup{version: h.version}
	fail := func(err error) (*jobCgroup, error) {
		cg.remove()
		return nil, err
	}
	if h.version == 1 {
		for _, ctrl := range []string{"memory", "pids"} {
			dir := filepath.Join(h.dirs[ctrl], "gaas", name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fail(err)
			}
			cg.dirs = append(cg.dirs, dir)
			if ctrl == "memory" {
				if err := write(dir, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
					return fail(err)
				}
				// With swap accounting, swap may not stretch the limit.
				if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
					if err := write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
						return fail(err)
					}
				}
			} else if err := write(dir, "pids.max", strconv.FormatInt(l.Processes, 10)); err != nil {
				return fail(err)
			}
		}
		return cg, nil
	}
	base := h.dirs[""]
	parent := filepath.Join(base, "gaas")
	if err := enableV2(base, parent); err != nil {
		return fail(err)
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fail(err)
	}
	cg.dirs = []string{dir}
	if err := write(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
		write(dir, "memory.swap.max", "0")
	}
	if err := write(dir, "pids.max", strconv.FormatInt(l.Processes, 10)); err != nil {
		return fail(err)
	}
	return cg, nil
}

// enableV2 turns the memory and pids controllers on for base's children
// and for parent's. A v2 cgroup with processes in it cannot hand
// controllers down, so if base holds this node, the node first moves into
// a leaf of its own, base/node.
func enableV2(base, parent string) error {
	if err := write(base, "cgroup.subtree_control", "+memory +pids"); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		leaf := filepath.Join(base, "node")
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return err
		}
		if err := write(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
			return err
		}
		if err := write(base, "cgroup.subtree_control", "+memory +pids"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	return write(parent, "cgroup.subtree_control", "+memory +pids")
}

// add moves a process (and the children it will have) into the cgroup.
func (cg *jobCgroup) add(pid int) error {
	for _, dir := range cg.dirs {
		if err := write(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// oomKilled reports whether the kernel killed a process of the job for
// going over its memory limit.
func (cg *jobCgroup) oomKilled() bool {
	for _, dir := range cg.dirs {
		for _, file := range []string{"memory.oom_control", "memory.events"} {
			data, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
					return true
				}
			}
		}
	}
	return false
}

// procs lists the processes still in the cgroup.
func (cg *jobCgroup) procs() []int {
	var out []int
	for _, dir := range cg.dirs {
		data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// killAll kills every process in the cgroup, daemonized or not, and waits
// (briefly) until none is left.
func (cg *jobCgroup) killAll() {
	for _, dir := range cg.dirs {
		write(dir, "cgroup.kill", "1") // v2 ≥ 5.14; elsewhere the loop below does it
	}
	for i := 0; i < 100; i++ {
		pids := cg.procs()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// remove kills what is left and removes the cgroup's folders.
func (cg *jobCgroup) remove() {
	cg.killAll()
	for _, dir := range cg.dirs {
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
