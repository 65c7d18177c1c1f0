package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressBar draws how far a transfer has got on one terminal line of
// stderr, redrawn at most ten times a second, so stdout stays clean for
// scripts. It is an io.Writer that counts what passes through it.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer // nil draws nothing: stderr is not a terminal
	label string
	total int64 // -1 when not known (an archive made as it downloads)
	done  int64
	start time.Time
	drawn time.Time
	width int // of the last line drawn, to clear it
}

// progress starts a bar for a transfer of total bytes (-1: unknown).
func (c *cli) progress(label string, total int64) *progressBar {
	p := &progressBar{label: label, total: total, start: time.Now()}
	if c.progressTTY {
		p.w = c.stderr
	}
	return p
}

func (p *progressBar) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(len(b))
	if p.w != nil && time.Since(p.drawn) >= 100*time.Millisecond {
		p.drawn = time.Now()
		p.draw(renderProgress(p.label, p.done, p.total, time.Since(p.start)))
	}
	return len(b), nil
}

// Reader counts what is read from r.
func (p *progressBar) Reader(r io.Reader) io.Reader { return io.TeeReader(r, p) }

// Done clears the bar, so the line that reports the result takes its place.
func (p *progressBar) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

func (p *progressBar) draw(line string) {
	pad := ""
	if n := len([]rune(line)); n < p.width {
		pad = strings.Repeat(" ", p.width-n)
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.width = len([]rune(line))
}

// renderProgress is one frame: "students.csv [=====>    ]  52%  61 MB of 117 MB  48 MB/s".
func renderProgress(label string, done, total int64, elapsed time.Duration) string {
	const cells = 24
	rate := ""
	if s := elapsed.Seconds(); s > 0 {
		rate = "  " + formatBytes(int64(float64(done)/s)) + "/s"
	}
	if total <= 0 {
		return fmt.Sprintf("%s  %s%s", label, formatBytes(done), rate)
	}
	done = min(done, total)
	filled := int(done * cells / total)
	bar := strings.Repeat("=", filled)
	if filled < cells {
		bar += ">" + strings.Repeat(" ", cells-filled-1)
	}
	return fmt.Sprintf("%s [%s] %3d%%  %s of %s%s", label, bar, done*100/total, formatBytes(done), formatBytes(total), rate)
}

// formatBytes is a size for people: "812 B", "4.2 KB", "61 MB", "1.1 GB".
func formatBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KB", "MB", "GB", "TB"} {
		v, suffix = v/unit, s
		if v < unit {
			break
		}
	}
	if v < 10 {
		return fmt.Sprintf("%.1f %s", v, suffix)
	}
	return fmt.Sprintf("%.0f %s", v, suffix)
}
