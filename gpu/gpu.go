// Package gpu reads the provider's GPUs: real ones through NVML, or
// simulated ones for the testnet and tests, which say so in every field
// that shows them.
package gpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// GPU is one card's identity and its latest reading.
type GPU struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	UUID         string `json:"uuid"`
	VRAMTotalMiB uint64 `json:"vram_total_mib"`
	VRAMUsedMiB  uint64 `json:"vram_used_mib"`
	Driver       string `json:"driver"`
	CUDA         string `json:"cuda"`
	Compute      string `json:"compute_capability"`
	TempC        int    `json:"temp_c"`
	FanPercent   int    `json:"fan_pct"` // -1: no fan
	UtilPercent  int    `json:"util_pct"`
	PowerWatts   int    `json:"power_w"`
	Simulated    bool   `json:"simulated"`
}

// Label is the card's name as shown to people: simulated cards say so.
func (g GPU) Label() string {
	if g.Simulated {
		return g.Name + " (simulated)"
	}
	return g.Name
}

// Reader reads a machine's GPUs.
type Reader interface {
	// GPUs returns every card with a fresh reading.
	GPUs() ([]GPU, error)
	// SetBusy tells the reader a job is (or is no longer) using the
	// cards; only a simulation uses it.
	SetBusy(bool)
	Close() error
}

// ErrNoDriver means there is no NVIDIA driver: the machine can rent GPUs
// but cannot provide one. Its message is the sentence to show.
var ErrNoDriver = errors.New("No NVIDIA GPU driver found (libnvidia-ml.so not present): this machine can rent GPUs but cannot provide one")

// ErrNoGPU means the driver is there but reports no card.
var ErrNoGPU = errors.New("The NVIDIA driver reports no GPU on this machine: it can rent GPUs but cannot provide one")

// Model is a simulated card's make-up.
type Model struct {
	Name    string
	VRAMMiB uint64
	Watts   int
}

// Simulated models, one per default tier.
var (
	RTX4060 = Model{Name: "NVIDIA GeForce RTX 4060", VRAMMiB: 8188, Watts: 115}
	RTX4070 = Model{Name: "NVIDIA GeForce RTX 4070", VRAMMiB: 12282, Watts: 200}
	RTX4090 = Model{Name: "NVIDIA GeForce RTX 4090", VRAMMiB: 24564, Watts: 450}
)

// Simulator is a pretend GPU whose telemetry moves plausibly: under load
// the temperature climbs toward 74 °C, the fan follows it, VRAM fills and
// utilization sits near 95%; idle, it all settles back.
type Simulator struct {
	mu    sync.Mutex
	model Model
	uuid  string
	busy  bool
	temp  float64
	last  time.Time
	rng   *rand.Rand
}

// NewSimulator makes a simulated card of a model.
func NewSimulator(m Model) *Simulator {
	seed := uint64(time.Now().UnixNano())
	return &Simulator{
		model: m, temp: 36, last: time.Now(),
		uuid: fmt.Sprintf("GPU-sim-%08x", uint32(seed)),
		rng:  rand.New(rand.NewPCG(seed, seed>>7)),
	}
}

// SetBusy switches the simulated load.
func (s *Simulator) SetBusy(busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	s.busy = busy
}

// advance moves the temperature toward its target with a 20 s time constant.
func (s *Simulator) advance() {
	now := time.Now()
	dt := now.Sub(s.last).Seconds()
	s.last = now
	target := 36.0
	if s.busy {
		target = 74
	}
	s.temp = target + (s.temp-target)*math.Exp(-dt/20)
}

// GPUs returns the simulated card's reading.
func (s *Simulator) GPUs() ([]GPU, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	g := GPU{
		Name: s.model.Name, UUID: s.uuid, VRAMTotalMiB: s.model.VRAMMiB,
		Driver: "simulated", CUDA: "simulated", Compute: "8.9", Simulated: true,
		TempC:       int(math.Round(s.temp + s.rng.Float64() - 0.5)),
		VRAMUsedMiB: 412,
		PowerWatts:  s.model.Watts / 8,
	}
	// The fan idles at 30% and ramps linearly from 50 °C to full at 80 °C.
	g.FanPercent = 30 + int(max(0, min(70, (s.temp-50)*70/30)))
	if s.busy {
		g.UtilPercent = 92 + s.rng.IntN(7)
		g.VRAMUsedMiB = s.model.VRAMMiB * 6 / 10
		g.PowerWatts = s.model.Watts * 85 / 100
	}
	return []GPU{g}, nil
}

// Close does nothing.
func (s *Simulator) Close() error { return nil }
