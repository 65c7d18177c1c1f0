package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/trisparc/gaas/gpu"
	"github.com/trisparc/gaas/inputs"
	"github.com/trisparc/gaas/sandbox"
)

// sandboxCmd is `gaas sandbox run`: a script through exactly the sandbox
// a job uses, on this machine, so a provider can try it before going
// online.
func (c *cli) sandboxCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "run" {
		return usagef("sandbox: the command is 'gaas sandbox run SCRIPT.py [--dataset FILE.csv] [--package NAME]... [--out DIR]'")
	}
	f := c.flags("sandbox run")
	data := f.string("data", "GAAS_DATA", defaultDataDir("gaas"), "data folder; package environments are cached in DATA/envs")
	dataset := f.String("dataset", "", "a .csv file, given to the script as $GAAS_DATASET (default: an empty one)")
	packages := f.list("package", "GAAS_PACKAGES", "a pip package the script needs")
	out := f.String("out", ".", "folder to export the model into, as a job would")
	maxHours := f.String("max-hours", "1", "wall-time limit in hours, like a job's budget cap")
	pipIndex := f.string("pip-index-url", "GAAS_PIP_INDEX_URL", "", "package index to install from")
	pipLinks := f.string("pip-find-links", "GAAS_PIP_FIND_LINKS", "", "local folder of wheels to install from")
	withGPU := f.Bool("gpu", false, "bind the first NVIDIA GPU into the sandbox, as a provider's jobs get it")
	rest, err := f.parse(args[1:])
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("sandbox run: give one script: gaas sandbox run SCRIPT.py")
	}
	wall, err := parseHours(*maxHours)
	if err != nil {
		return usagef("sandbox run: %v", err)
	}
	pkgs, err := inputs.CheckPackages(*packages)
	if err != nil {
		return fmt.Errorf("package %v", err)
	}
	script := rest[0]
	if !strings.EqualFold(filepath.Ext(script), ".py") {
		return fmt.Errorf("the script must be a .py file; %s is not", script)
	}
	src, err := os.ReadFile(script)
	if err != nil {
		return fmt.Errorf("cannot read the script %s: %v", script, err)
	}
	sb, err := sandbox.New(ctx)
	if err != nil {
		return err
	}
	sb.EnvDir, sb.PipIndexURL, sb.PipFindLinks = filepath.Join(*data, "envs"), *pipIndex, *pipLinks
	if *withGPU {
		r, err := gpu.Detect()
		if err != nil {
			return fmt.Errorf("--gpu: %v", err)
		}
		gpus, err := r.GPUs()
		r.Close()
		if err != nil {
			return err
		}
		sb.GPU = &sandbox.GPU{Index: gpus[0].Index, UUID: gpus[0].UUID, Libs: sandbox.FindDriverLibs()}
		fmt.Fprintf(c.stdout, "GPU       %s bound into the sandbox\n", gpus[0].Label())
	}
	info, err := inputs.CheckScript(ctx, sb.Python(), bytes.NewReader(src))
	if err != nil {
		return err
	}
	if p := info.Problem(filepath.Base(script)); p != "" {
		return errors.New(p)
	}
	dir, err := os.MkdirTemp("", "gaas-sandbox-")
	if err != nil {
		return err
	}
	defer sandbox.RemoveJobDir(dir)
	in := filepath.Join(dir, "input")
	os.MkdirAll(in, 0o755)
	scriptName := filepath.Base(script)
	os.WriteFile(filepath.Join(in, scriptName), src, 0o644)
	datasetName := "data.csv"
	if *dataset != "" {
		ds, err := os.Open(*dataset)
		if err != nil {
			return fmt.Errorf("cannot read the dataset %s: %v", *dataset, err)
		}
		csv, err := inputs.InspectCSV(ds, 1<<40)
		ds.Close()
		if err != nil {
			return fmt.Errorf("%s: %s", *dataset, sentence(err))
		}
		fmt.Fprintf(c.stdout, "Dataset   %s: %d rows, %d columns\n", *dataset, csv.Rows, csv.Columns)
		datasetName = filepath.Base(*dataset)
		if err := copyInto(*dataset, filepath.Join(in, datasetName)); err != nil {
			return err
		}
	} else {
		os.WriteFile(filepath.Join(in, datasetName), nil, 0o644)
	}
	print := func(stream, line string) {
		w := c.stdout
		if stream == "stderr" {
			w = c.stderr
		}
		fmt.Fprintf(w, "  | %s\n", line)
	}
	env, res, err := sb.Install(ctx, pkgs, func(stream, line string) { print(stream, "pip: "+line) })
	if err != nil {
		return err
	}
	if res.Outcome != sandbox.Completed {
		return fmt.Errorf("installing the packages failed: %s", res.Reason())
	}
	limits := sandbox.Limits{Wall: time.Duration(wall) * time.Second}
	res, err = sb.Run(ctx, sandbox.Spec{Dir: dir, Script: scriptName, Dataset: datasetName, Env: env, Limits: limits, Output: print})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Ended     %s after %s\n", res.Reason(), res.Duration.Round(time.Millisecond))
	c.printLimits(sb, res.Limits)
	if res.Outcome != sandbox.Completed {
		return &exitError{code: 1}
	}
	o, err := sandbox.CheckOutput(dir, res.Limits.DiskBytes)
	if err != nil {
		return fmt.Errorf("the model cannot be exported: %v", err)
	}
	path, err := o.Export(*out)
	if err != nil {
		return fmt.Errorf("exporting the model: %v", err)
	}
	fmt.Fprintf(c.stdout, "Model     %s (%d files, %d bytes)\n", path, o.Files, o.Bytes)
	return nil
}

func (c *cli) printLimits(sb *sandbox.Sandbox, l sandbox.Limits) {
	e := sb.Enforcement()
	if e.Cgroup == "" {
		fmt.Fprintf(c.stdout, "Limits    (no cgroup: %s)\n", e.CgroupErr)
	} else {
		fmt.Fprintf(c.stdout, "Limits    (%s)\n", e.Cgroup)
	}
	for _, line := range e.Lines(l) {
		fmt.Fprintf(c.stdout, "  %s\n", line)
	}
}

func copyInto(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// doctor says whether this machine can provide, and which limits a job
// would run under.
func (c *cli) doctor(ctx context.Context, args []string) error {
	f := c.flags("doctor")
	if _, err := f.parse(args); err != nil {
		return err
	}
	w := c.stdout
	ok := true
	if v, err := exec.Command("bwrap", "--version").Output(); err == nil {
		fmt.Fprintf(w, "bubblewrap  %s", v)
	} else {
		fmt.Fprintln(w, "bubblewrap  missing: install it with: sudo apt-get install bubblewrap")
	}
	sb, err := sandbox.New(ctx)
	if err != nil {
		fmt.Fprintf(w, "sandbox     cannot start: %v\n", err)
		ok = false
	} else {
		fmt.Fprintf(w, "sandbox     works (python %s)\n", sb.Python())
		c.printLimits(sb, sandbox.Limits{})
	}
	if r, err := gpu.Detect(); err != nil {
		fmt.Fprintf(w, "GPU         %v.\n", err)
		ok = false
	} else {
		gpus, _ := r.GPUs()
		r.Close()
		for _, g := range gpus {
			fmt.Fprintf(w, "GPU         %s, %d MiB, driver %s\n", g.Label(), g.VRAMTotalMiB, g.Driver)
		}
	}
	if !ok {
		fmt.Fprintln(w, "This machine can rent GPUs but cannot provide one.")
		return &exitError{code: 1}
	}
	fmt.Fprintln(w, "This machine can provide its GPU: run gaas node --provider.")
	return nil
}
