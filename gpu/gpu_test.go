package gpu

import (
	"errors"
	"testing"
	"time"
)

func TestDetectWithoutDriver(t *testing.T) {
	r, err := Detect()
	if err == nil {
		r.Close()
		t.Skip("this machine has an NVIDIA driver; the no-driver path is not reachable here")
	}
	if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Detect without a driver: %v", err)
	}
}

func TestSimulatorWarmsUnderLoad(t *testing.T) {
	s := NewSimulator(RTX4070)
	idle, _ := s.GPUs()
	if !idle[0].Simulated || idle[0].Label() != "NVIDIA GeForce RTX 4070 (simulated)" || idle[0].UtilPercent != 0 {
		t.Fatalf("idle reading %+v", idle[0])
	}
	s.SetBusy(true)
	s.last = s.last.Add(-60 * time.Second) // a minute of load
	busy, _ := s.GPUs()
	if busy[0].TempC <= idle[0].TempC+20 || busy[0].FanPercent <= idle[0].FanPercent || busy[0].UtilPercent < 90 || busy[0].VRAMUsedMiB <= idle[0].VRAMUsedMiB {
		t.Fatalf("under load %+v, idle %+v", busy[0], idle[0])
	}
}
