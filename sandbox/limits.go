package sandbox

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Limits bound one run. Zero fields take the defaults.
type Limits struct {
	Wall        time.Duration // the buyer's budget cap
	MemoryBytes int64         // RAM of all the job's processes together
	Processes   int64         // processes and threads at once
	OpenFiles   uint64        // per process
	DiskBytes   int64         // written into the job folder, model included
	Files       int64         // files and folders in the job folder (inodes)
	TmpBytes    int64         // the private /tmp (counted as memory)
	OutputBytes int64         // stdout and stderr passed on; the rest is cut
}

// DefaultLimits are what a job gets unless the provider says otherwise.
var DefaultLimits = Limits{
	Wall:        time.Hour,
	MemoryBytes: 4 << 30,
	Processes:   256,
	OpenFiles:   1024,
	DiskBytes:   10 << 30,
	Files:       200000,
	TmpBytes:    512 << 20,
	OutputBytes: 16 << 20,
}

func (l Limits) withDefaults() Limits { return l.over(DefaultLimits) }

// over is base with every limit l sets put in its place.
func (l Limits) over(base Limits) Limits {
	if l.Wall > 0 {
		base.Wall = l.Wall
	}
	for _, v := range []struct{ dst, src *int64 }{
		{&base.MemoryBytes, &l.MemoryBytes}, {&base.Processes, &l.Processes}, {&base.DiskBytes, &l.DiskBytes},
		{&base.Files, &l.Files}, {&base.TmpBytes, &l.TmpBytes}, {&base.OutputBytes, &l.OutputBytes},
	} {
		if *v.src > 0 {
			*v.dst = *v.src
		}
	}
	if l.OpenFiles > 0 {
		base.OpenFiles = l.OpenFiles
	}
	return base
}

// Enforcement says how each limit is enforced on this machine, or why it
// is not.
type Enforcement struct {
	Cgroup    string // "cgroup v1", "cgroup v2", or "" with CgroupErr
	CgroupErr string
	Memory    string
	Processes string
	OpenFiles string
	Disk      string
	Wall      string
	Output    string
	Network   string
}

// Lines lists the limits for people, one per line.
func (e Enforcement) Lines(l Limits) []string {
	l = l.withDefaults()
	return []string{
		fmt.Sprintf("wall time    %-10s %s", l.Wall, e.Wall),
		fmt.Sprintf("memory       %-10s %s", bytesString(l.MemoryBytes), e.Memory),
		fmt.Sprintf("processes    %-10d %s", l.Processes, e.Processes),
		fmt.Sprintf("open files   %-10d %s", l.OpenFiles, e.OpenFiles),
		fmt.Sprintf("disk         %-10s %s", bytesString(l.DiskBytes), e.Disk),
		fmt.Sprintf("files        %-10d %s", l.Files, e.Disk),
		fmt.Sprintf("/tmp         %-10s tmpfs of that size", bytesString(l.TmpBytes)),
		fmt.Sprintf("output       %-10s %s", bytesString(l.OutputBytes), e.Output),
		fmt.Sprintf("network      %-10s %s", "none", e.Network),
	}
}

// String is the enforcement in one line, for logs and the API.
func (e Enforcement) String() string {
	if e.Cgroup == "" {
		return "no cgroup (" + e.CgroupErr + "): memory " + e.Memory + ", processes " + e.Processes
	}
	return e.Cgroup + ": memory, processes; rlimits: open files, file size; disk polled"
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B", n)
}

func enforcement(h *hierarchy, cgErr error) Enforcement {
	e := Enforcement{
		OpenFiles: "enforced (RLIMIT_NOFILE)",
		Disk:      "enforced (job folder measured twice a second; RLIMIT_FSIZE per file)",
		Wall:      "enforced (the whole sandbox is killed)",
		Output:    "enforced (cut with a marker; the job goes on)",
		Network:   "enforced (own network namespace, no interfaces)",
	}
	if h != nil {
		e.Cgroup = fmt.Sprintf("cgroup v%d", h.version)
		e.Memory = fmt.Sprintf("enforced (cgroup v%d memory controller; out-of-memory is reported)", h.version)
		e.Processes = fmt.Sprintf("enforced (cgroup v%d pids controller)", h.version)
		return e
	}
	e.CgroupErr = strings.TrimSpace(cgErr.Error())
	e.Memory = "approximate (RLIMIT_AS on address space, no cgroup)"
	if os.Geteuid() == 0 {
		e.Processes = "NOT enforced (no pids cgroup, and RLIMIT_NPROC does not bind for root)"
	} else {
		e.Processes = "approximate (RLIMIT_NPROC counts every process of this user)"
	}
	return e
}
