//go:build cgo && linux

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Detect opens NVML. Without a driver it returns ErrNoDriver and never
// touches NVML again: any call after a failed Init kills the process.
func Detect() (Reader, error) {
	lib := nvml.New()
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, ErrNoDriver
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w (the NVIDIA library is installed but its driver is not loaded)", ErrNoDriver)
	default:
		return nil, fmt.Errorf("NVML could not start (%s): this machine can rent GPUs but cannot provide one", nvml.ErrorString(ret))
	}
	r := &nvmlReader{lib: lib}
	gpus, err := r.GPUs()
	if err != nil {
		lib.Shutdown()
		return nil, err
	}
	if len(gpus) == 0 {
		lib.Shutdown()
		return nil, ErrNoGPU
	}
	return r, nil
}

type nvmlReader struct{ lib nvml.Interface }

func (r *nvmlReader) SetBusy(bool) {}

func (r *nvmlReader) Close() error {
	if ret := r.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shutting NVML down: %s", nvml.ErrorString(ret))
	}
	return nil
}

func (r *nvmlReader) GPUs() ([]GPU, error) { return readNVML(r.lib) }

// readNVML maps NVML's answers to GPUs. It takes the interface so that
// go-nvml's mocks can test it on machines without a GPU.
func readNVML(lib nvml.Interface) ([]GPU, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %s", nvml.ErrorString(ret))
	}
	driver, _ := lib.SystemGetDriverVersion()
	cuda := ""
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	var out []GPU
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("opening GPU %d: %s", i, nvml.ErrorString(ret))
		}
		g := GPU{Index: i, Driver: driver, CUDA: cuda, FanPercent: -1}
		g.Name, _ = dev.GetName()
		g.UUID, _ = dev.GetUUID()
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.VRAMTotalMiB, g.VRAMUsedMiB = mem.Total>>20, mem.Used>>20
		}
		if major, minor, ret := dev.GetCudaComputeCapability(); ret == nvml.SUCCESS {
			g.Compute = fmt.Sprintf("%d.%d", major, minor)
		}
		if t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			g.TempC = int(t)
		}
		// Cards without fans (most datacenter ones) answer NOT_SUPPORTED.
		if f, ret := dev.GetFanSpeed(); ret == nvml.SUCCESS {
			g.FanPercent = int(f)
		}
		if u, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
			g.UtilPercent = int(u.Gpu)
		}
		if p, ret := dev.GetPowerUsage(); ret == nvml.SUCCESS {
			g.PowerWatts = int(p / 1000)
		}
		out = append(out, g)
	}
	return out, nil
}
