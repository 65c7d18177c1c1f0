package sandbox

import (
	"encoding/binary"
	"runtime"
)

// A seccomp filter refuses, with EPERM, the system calls a training
// script never needs and an attacker would: the kernel keyring (shared
// with the node's session), ptrace, kernel modules, mounts and
// namespaces, BPF, perf, userfaultfd, io_uring (whose operations bypass
// seccomp), and reading other processes' memory.

// blockedSyscalls by architecture.
var blockedSyscalls = map[string]struct {
	audit uint32
	nrs   []uint32
}{
	"amd64": {0xc000003e, []uint32{
		250, 248, 249, // keyctl, add_key, request_key
		101,           // ptrace
		298, 321, 323, // perf_event_open, bpf, userfaultfd
		246, 320, 175, 313, 176, // kexec_load, kexec_file_load, init_module, finit_module, delete_module
		165, 166, 155, 272, 308, // mount, umount2, pivot_root, unshare, setns
		167, 168, 169, 163, 179, 103, // swapon, swapoff, reboot, acct, quotactl, syslog
		304, 303, 310, 311, 312, 279, 212, // open_by_handle_at, name_to_handle_at, process_vm_readv/writev, kcmp, move_pages, lookup_dcookie
		172, 173, // iopl, ioperm
		425, 426, 427, // io_uring_setup, io_uring_enter, io_uring_register
		428, 429, 430, 431, 432, // open_tree, move_mount, fsopen, fsconfig, fsmount
	}},
	"arm64": {0xc00000b7, []uint32{
		219, 217, 218,
		117,
		241, 280, 282,
		104, 294, 105, 273, 106,
		40, 39, 41, 97, 268,
		224, 225, 142, 89, 60, 116,
		265, 264, 270, 271, 272, 239, 18,
		425, 426, 427,
		428, 429, 430, 431, 432,
	}},
}

// BPF instructions for a seccomp filter (linux/filter.h).
const (
	bpfLdWAbs = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfRetK   = 0x06 // BPF_RET | BPF_K

	seccompRetAllow = 0x7fff0000
	seccompRetKill  = 0x80000000 // kill the process
	seccompRetErrno = 0x00050000
	eperm           = 1

	offsetNr   = 0 // struct seccomp_data
	offsetArch = 4
)

// seccompFilter returns the compiled filter for bwrap --seccomp, or nil
// where this architecture has no table.
func seccompFilter() []byte {
	table, ok := blockedSyscalls[runtime.GOARCH]
	if !ok {
		return nil
	}
	type insn struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}
	n := len(table.nrs)
	prog := []insn{
		{bpfLdWAbs, 0, 0, offsetArch},
		{bpfJeqK, 1, 0, table.audit}, // our architecture: go on
		{bpfRetK, 0, 0, seccompRetKill},
		{bpfLdWAbs, 0, 0, offsetNr},
	}
	for i, nr := range table.nrs {
		// On a match, jump to the EPERM return after the list.
		prog = append(prog, insn{bpfJeqK, uint8(n - i), 0, nr})
	}
	prog = append(prog, insn{bpfRetK, 0, 0, seccompRetAllow}, insn{bpfRetK, 0, 0, seccompRetErrno | eperm})
	out := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		out = binary.NativeEndian.AppendUint16(out, in.code)
		out = append(out, in.jt, in.jf)
		out = binary.NativeEndian.AppendUint32(out, in.k)
	}
	return out
}
