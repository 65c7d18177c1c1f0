//go:build !(cgo && linux)

package gpu

// Detect reports that this build cannot read NVIDIA GPUs: NVML needs cgo
// on Linux.
func Detect() (Reader, error) { return nil, ErrNoDriver }
