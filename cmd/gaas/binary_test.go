package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trisparc/gaas/testnet"
)

// buildBinary builds the real gaas binary once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gaas")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building gaas: %v\n%s", err, out)
	}
	return bin
}

// TestTestnetBinaryStopsCleanlyOnSIGTERM runs `gaas testnet` as a real
// process, waits for testnet.json, checks the buyer answers, then sends
// SIGTERM and expects every peer to stop and the process to exit 0.
func TestTestnetBinaryStopsCleanlyOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "testnet", "--dir", dir, "--providers", "2")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(60 * time.Second)
	var printed []string
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("gaas testnet exited early:\n%s", strings.Join(printed, "\n"))
			}
			printed = append(printed, l)
			if strings.HasPrefix(l, "Running until interrupted") {
				break wait
			}
		case <-deadline:
			t.Fatalf("testnet not ready after 60 s:\n%s", strings.Join(printed, "\n"))
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, testnet.InfoFile))
	if err != nil {
		t.Fatal(err)
	}
	var info testnet.Info
	if err := json.Unmarshal(data, &info); err != nil || len(info.Providers) != 2 || !strings.HasPrefix(info.Buyer.API, "http://127.0.0.1:") {
		t.Fatalf("testnet.json: %v\n%s", err, data)
	}
	env := map[string]string{"GAAS_NODE": info.Buyer.API, "GAAS_TOKEN": info.Buyer.Token}
	if r := gaas(t, env, "ledger", "balance"); r.code != 0 || !strings.Contains(r.stdout, "₹1,000") {
		t.Fatalf("the running testnet's buyer: %+v", r)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gaas testnet after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gaas testnet did not stop within 20 s of SIGTERM")
	}
	if r := gaas(t, env, "ledger", "balance"); r.code == 0 {
		t.Fatal("the buyer still answers after the testnet stopped")
	}
}
