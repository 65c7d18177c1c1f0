//go:build cgo && linux

package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// TestReadNVML maps go-nvml's DGX A100 mock (eight A100s, which have no
// fans) to our GPU type.
func TestReadNVML(t *testing.T) {
	server := dgxa100.New()
	for _, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 61, nvml.SUCCESS }
		dev.GetFanSpeedFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 87}, nvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 312_500, nvml.SUCCESS }
	}
	gpus, err := readNVML(server)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gpus))
	}
	g := gpus[3]
	if g.Index != 3 || g.Name != "Mock NVIDIA A100-SXM4-40GB" || g.VRAMTotalMiB != 40960 || g.Compute != "8.0" {
		t.Fatalf("identity %+v", g)
	}
	if g.TempC != 61 || g.FanPercent != -1 || g.UtilPercent != 87 || g.PowerWatts != 312 || g.Simulated {
		t.Fatalf("reading %+v", g)
	}
	if g.Driver != "550.54.15" || g.CUDA != "12.4" {
		t.Fatalf("driver %q cuda %q", g.Driver, g.CUDA)
	}
}
