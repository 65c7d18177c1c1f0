// Package explain turns how a job failed (the sandbox's outcome and the
// script's traceback) into one plain-English sentence a new user can act
// on, naming the columns the dataset really has where that matters.
package explain

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/trisparc/gaas/protocol"
)

// Failure is what is known about a failed run.
type Failure struct {
	Cause      string   // a protocol.Cause* value from the provider
	Reason     string   // the provider's one-line reason
	Stderr     []string // the script's stderr lines, in order
	Header     []string // the dataset's column names
	CapSeconds int64    // the job's budget cap
}

// Traceback returns the last Python traceback in the stderr lines, or the
// last few lines when there is none.
func Traceback(stderr []string) string {
	start := -1
	for i, l := range stderr {
		if strings.HasPrefix(l, "Traceback (most recent call last):") {
			start = i
		}
	}
	if start < 0 {
		start = max(0, len(stderr)-20)
	}
	return strings.Join(stderr[start:], "\n")
}

var (
	excLine   = regexp.MustCompile(`^([A-Za-z_][\w.]*)(: ?(.*))?$`)
	excName   = regexp.MustCompile(`(Error|Exception|Interrupt|Exit|Warning)$`)
	keyQuoted = regexp.MustCompile(`^['"](.*)['"]$`)
	modName   = regexp.MustCompile(`No module named '([^']+)'`)
	fileLine  = regexp.MustCompile(`File "([^"]+)", line (\d+)`)
)

// lastException finds the final "Type: message" line of a traceback.
func lastException(tb string) (typ, msg string) {
	lines := strings.Split(strings.TrimSpace(tb), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "File ") || strings.HasPrefix(l, "^") {
			continue
		}
		// "ValueError: msg", or a bare "MemoryError" without a message.
		if m := excLine.FindStringSubmatch(l); m != nil && (m[2] != "" || excName.MatchString(m[1])) {
			return m[1], m[3]
		}
	}
	return "", ""
}

// Sentence explains a failure in one or two sentences.
func Sentence(f Failure) string {
	switch f.Cause {
	case protocol.CauseNoModel:
		return "Your script finished but saved no model: write the trained model into the folder named by $GAAS_OUTPUT."
	case protocol.CauseBadModel:
		return fmt.Sprintf("Your script's output could not be collected (%s). Save plain files, not links, into $GAAS_OUTPUT.", f.Reason)
	case protocol.CauseCap:
		return fmt.Sprintf("Your job reached its budget cap of %s and was stopped before it finished. Raise the cap or train for fewer epochs.", (time.Duration(f.CapSeconds) * time.Second).String())
	case protocol.CausePackages:
		last := ""
		for i := len(f.Stderr) - 1; i >= 0 && last == ""; i-- {
			if strings.Contains(f.Stderr[i], "ERROR:") {
				last = strings.TrimSpace(strings.SplitN(f.Stderr[i], "ERROR:", 2)[1])
			}
		}
		if last == "" {
			return "Installing your packages failed. Check the names and versions of your package chips."
		}
		return fmt.Sprintf("Installing your packages failed: %s. Check the names and versions of your package chips.", strings.TrimSuffix(last, "."))
	case protocol.CauseMemory:
		return "Your script ran out of memory: " + f.Reason + ". Use a smaller batch or dataset, or pick the next tier up."
	case protocol.CauseDisk:
		return "Your script wrote too much to disk: " + f.Reason + ". Save only the model into $GAAS_OUTPUT."
	case protocol.CauseNoMain:
		return "Your script has no main() function to run. Add `def main():` at the top level of the file."
	}
	tb := Traceback(f.Stderr)
	typ, msg := lastException(tb)
	short := typ[strings.LastIndex(typ, ".")+1:]
	switch {
	case short == "KeyError" && keyQuoted.MatchString(msg) && len(f.Header) > 0:
		col := keyQuoted.FindStringSubmatch(msg)[1]
		if !slices.Contains(f.Header, col) {
			return fmt.Sprintf("Your script asked for a column named '%s', but the dataset's columns are: %s.", col, strings.Join(f.Header, ", "))
		}
	case short == "ModuleNotFoundError" || short == "ImportError" && modName.MatchString(msg):
		if m := modName.FindStringSubmatch(msg); m != nil {
			pkg := strings.SplitN(m[1], ".", 2)[0]
			return fmt.Sprintf("Your script imports '%s', which is not installed. Add it as a package chip (for example %s) and retry.", pkg, pkg)
		}
	case short == "SyntaxError" || short == "IndentationError":
		where := ""
		if m := fileLine.FindAllStringSubmatch(tb, -1); len(m) > 0 {
			where = fmt.Sprintf(" in %s on line %s", baseName(m[len(m)-1][1]), m[len(m)-1][2])
		}
		return fmt.Sprintf("Your script has a syntax error%s: %s.", where, msg)
	case short == "OutOfMemoryError" || strings.Contains(msg, "CUDA out of memory") || strings.Contains(msg, "CUDA_ERROR_OUT_OF_MEMORY"):
		return "Your script ran out of GPU memory (VRAM). Use a smaller batch or model, or pick the next tier up, which has more VRAM."
	case short == "MemoryError":
		return "Your script ran out of memory. Use a smaller batch or dataset, or pick the next tier up."
	case short == "FileNotFoundError":
		return fmt.Sprintf("Your script tried to open a file that does not exist (%s). Read the dataset from the path in $GAAS_DATASET and write the model into $GAAS_OUTPUT.", msg)
	}
	if typ != "" {
		if msg == "" {
			return fmt.Sprintf("Your script stopped with %s.", typ)
		}
		return fmt.Sprintf("Your script stopped with %s: %s.", typ, strings.TrimSuffix(msg, "."))
	}
	if f.Reason != "" {
		return fmt.Sprintf("The job failed: %s.", f.Reason)
	}
	return "The job failed without an error message."
}

func baseName(p string) string { return p[strings.LastIndex(p, "/")+1:] }
