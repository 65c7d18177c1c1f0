package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/inputs"
	"github.com/trisparc/gaas/money"
)

func (c *cli) job(ctx context.Context, args []string) error {
	if len(args) == 0 {
		c.help([]string{"job"})
		return usagef("job: say what to do: submit, list, show, logs, cancel or model")
	}
	switch args[0] {
	case "submit":
		return c.jobSubmit(ctx, args[1:])
	case "list":
		return c.jobList(ctx, args[1:])
	case "show":
		return c.jobShow(ctx, args[1:])
	case "logs":
		return c.jobLogs(ctx, args[1:])
	case "cancel":
		return c.jobCancel(ctx, args[1:])
	case "model":
		return c.jobModel(ctx, args[1:])
	}
	return usagef("job: unknown subcommand %q (submit, list, show, logs, cancel, model)", args[0])
}

// submission is a job as the person gave it.
type submission struct {
	tier        string
	datasetName string
	dataset     io.Reader
	datasetSize int64 // -1 when not known
	scriptName  string
	script      io.Reader
	scriptSize  int64
	packages    []string
	capSeconds  int64
	out         string
	yes         bool
}

func (c *cli) jobSubmit(ctx context.Context, args []string) error {
	f := c.flags("job submit")
	cf := f.client()
	tier := f.String("tier", "", "GPU tier: starter, pro or max")
	dataset := f.String("dataset", "", "the training data, a .csv file")
	script := f.String("script", "", "the training script, a .py file with a main() function")
	packages := f.list("package", "GAAS_PACKAGES", "a pip package the script needs, with an optional version (numpy, torch==2.2.0)")
	maxHours := f.String("max-hours", "1", "budget cap in hours; the job is stopped there and never costs more")
	out := f.String("out", ".", "folder to save the trained model in")
	yes := f.Bool("yes", false, "start without asking to confirm the price")
	if rest, err := f.parse(args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usagef("job submit: unexpected argument %q", rest[0])
	}
	switch {
	case *tier == "":
		return usagef("job submit: choose a GPU tier with --tier (starter, pro or max)")
	case *dataset == "":
		return usagef("job submit: give the training data with --dataset FILE.csv")
	case *script == "":
		return usagef("job submit: give the training script with --script FILE.py")
	}
	capSeconds, err := parseHours(*maxHours)
	if err != nil {
		return usagef("job submit: %v", err)
	}
	if _, err := inputs.CheckPackages(*packages); err != nil {
		return fmt.Errorf("package %v", err)
	}
	if fi, err := os.Stat(*out); err != nil || !fi.IsDir() {
		return fmt.Errorf("the output folder %s does not exist: create it or choose another with --out", *out)
	}
	ds, err := openInput(*dataset, "dataset")
	if err != nil {
		return err
	}
	defer ds.Close()
	sc, err := openInput(*script, "script")
	if err != nil {
		return err
	}
	defer sc.Close()
	job, err := c.submitAndFollow(ctx, cf.client(), submission{
		tier: *tier, datasetName: filepath.Base(*dataset), dataset: ds, datasetSize: fileSize(ds),
		scriptName: filepath.Base(*script), script: sc, scriptSize: fileSize(sc),
		packages: *packages, capSeconds: capSeconds, out: *out, yes: *yes,
	})
	if err != nil {
		return err
	}
	if job.State != "completed" {
		return &exitError{code: 1}
	}
	return nil
}

func openInput(path, what string) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the %s file %s does not exist", what, path)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the %s file %s: %v", what, path, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("the %s %s is a folder, not a file", what, path)
	}
	return f, nil
}

func fileSize(f *os.File) int64 {
	if fi, err := f.Stat(); err == nil {
		return fi.Size()
	}
	return -1
}

// parseHours reads a budget cap such as "1", "0.5" or "2.25" as seconds.
func parseHours(s string) (int64, error) {
	h, err := strconv.ParseFloat(s, 64)
	if err != nil || h <= 0 || h > 168 {
		return 0, fmt.Errorf("--max-hours must be a number of hours above 0 and at most 168, not %q", s)
	}
	return max(1, int64(h*3600+0.5)), nil
}

func formatDuration(seconds int64) string {
	return (time.Duration(seconds) * time.Second).String()
}

// submitAndFollow checks the inputs on the node, shows the price, asks to
// confirm, starts the job, prints its progress, and saves the model.
func (c *cli) submitAndFollow(ctx context.Context, svc api.Service, s submission) (api.Job, error) {
	w := c.stdout
	tiers, err := svc.Tiers(ctx)
	if err != nil {
		return api.Job{}, err
	}
	tier, ok := tiers.Find(s.tier)
	if !ok {
		var names []string
		for _, t := range tiers.Tiers {
			names = append(names, t.Name)
		}
		return api.Job{}, fmt.Errorf("there is no %q tier: choose one of %s", s.tier, strings.Join(names, ", "))
	}
	bar := c.progress("Uploading "+s.datasetName, s.datasetSize)
	ds, err := svc.UploadDataset(ctx, s.datasetName, bar.Reader(s.dataset))
	bar.Done()
	if err != nil {
		return api.Job{}, fmt.Errorf("%s: %s", s.datasetName, sentence(err))
	}
	fmt.Fprintf(w, "Dataset   %s: %d rows, %d columns (%s)\n", ds.Name, ds.Rows, ds.Columns, strings.Join(ds.Header, ", "))
	bar = c.progress("Uploading "+s.scriptName, s.scriptSize)
	sc, err := svc.UploadScript(ctx, s.scriptName, bar.Reader(s.script))
	bar.Done()
	if err != nil {
		return api.Job{}, fmt.Errorf("%s", sentence(err))
	}
	fmt.Fprintf(w, "Script    %s: main() found on line %d\n", sc.Name, sc.MainLine)
	if len(s.packages) > 0 {
		fmt.Fprintf(w, "Packages  %s\n", strings.Join(s.packages, ", "))
	}
	price, err := svc.Estimate(ctx, tier.Name, s.capSeconds)
	if err != nil {
		return api.Job{}, err
	}
	fmt.Fprintf(w, "Tier      %s (%s) at %s\n", tier.Title, tier.Class, price.RateDisplay)
	fmt.Fprintf(w, "Budget    stops after %s, so it costs at most %s\n", formatDuration(s.capSeconds), price.MaxChargeDisplay)
	fmt.Fprintf(w, "If the script fails: %s\n", allowanceLine(price.FailedAllowanceSeconds))
	if !price.EnoughFunds {
		return api.Job{}, fmt.Errorf("not enough balance: this job can cost up to %s but %s is available; add funds or lower --max-hours", price.MaxChargeDisplay, money.Format(price.Available))
	}
	if !s.yes {
		if !c.interactive {
			return api.Job{}, errors.New("not starting: the price needs your confirmation and there is no terminal to ask on; pass --yes to accept it")
		}
		fmt.Fprintf(w, "%s? [y/N] ", price.StartButton)
		answer, _ := bufio.NewReader(c.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			fmt.Fprintln(w, "Not started.")
			return api.Job{}, &exitError{code: 1}
		}
	}
	job, err := svc.CreateJob(ctx, api.JobSpec{Tier: tier.Name, Dataset: ds.CID, Script: sc.CID, Packages: s.packages, CapSeconds: s.capSeconds})
	if err != nil {
		return api.Job{}, err
	}
	fmt.Fprintf(w, "Job       %s\n", job.ID)
	if err := c.follow(ctx, svc, job.ID, 0); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(c.stderr, "\nStopped following job %s; it keeps running. Cancel it with: gaas job cancel %s\n", job.ID, job.ID)
			return api.Job{}, &exitError{code: 130}
		}
		return api.Job{}, err
	}
	job, err = svc.Job(ctx, job.ID)
	if err != nil {
		return api.Job{}, err
	}
	return job, c.report(ctx, svc, job, s.out)
}

// follow prints a job's events until it ends.
func (c *cli) follow(ctx context.Context, svc api.Service, id string, after uint64) error {
	events, err := svc.Events(ctx, id, after)
	if err != nil {
		return err
	}
	var lastTelemetry time.Time
	final := false
	for ev := range events {
		switch ev.Kind {
		case api.EventState:
			fmt.Fprintf(c.stdout, "%s  state: %s\n", ev.At.Local().Format("15:04:05"), ev.State)
			final = api.Final(ev.State)
		case api.EventNotice:
			fmt.Fprintf(c.stdout, "%s  %s\n", ev.At.Local().Format("15:04:05"), ev.Line)
		case api.EventLog:
			if ev.Stream == "stderr" {
				fmt.Fprintf(c.stderr, "  | %s\n", ev.Line)
			} else {
				fmt.Fprintf(c.stdout, "  | %s\n", ev.Line)
			}
		case api.EventTelemetry:
			if t := ev.Telemetry; t != nil && time.Since(lastTelemetry) >= 5*time.Second {
				lastTelemetry = time.Now()
				fmt.Fprintf(c.stdout, "%s  gpu: %s elapsed, %s\n", ev.At.Local().Format("15:04:05"), formatDuration(t.ElapsedMs/1000), telemetryLine(t))
			}
		}
	}
	if !final {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("lost the connection to the node before job %s ended", id)
	}
	return nil
}

func telemetryLine(t *api.Telemetry) string {
	fan := fmt.Sprintf("fan %d%%", t.FanPercent)
	if t.FanPercent < 0 {
		fan = "no fan"
	}
	return fmt.Sprintf("%s, %d°C, %s, VRAM %d/%d MiB, %d%% busy", t.GPU, t.TempC, fan, t.VRAMUsedMiB, t.VRAMTotalMiB, t.UtilPercent)
}

// report prints how a finished job ended and saves its model.
func (c *cli) report(ctx context.Context, svc api.Service, job api.Job, out string) error {
	w := c.stdout
	switch job.State {
	case "completed":
		path, err := c.saveModel(ctx, svc, job, out)
		if err != nil {
			return fmt.Errorf("job %s completed, but saving its model failed: %v (retry with: gaas job show %s)", job.ID, err, job.ID)
		}
		fmt.Fprintf(w, "Model     %s (%d bytes, CID %s)\n", path, job.Model.Size, job.Model.CID)
	case "failed":
		fmt.Fprintf(w, "Failed    %s\n", job.Explanation)
		if len(job.Dataset.Header) > 0 && !strings.Contains(job.Explanation, "columns are") {
			fmt.Fprintf(w, "Dataset   %s has the columns: %s\n", job.Dataset.Name, strings.Join(job.Dataset.Header, ", "))
		}
	case "cancelled":
		fmt.Fprintln(w, "Cancelled")
	}
	fmt.Fprintf(w, "Charge    %s\n", chargeLine(job))
	if job.State == "failed" && job.Traceback != "" {
		fmt.Fprintf(w, "\nTraceback from the provider:\n%s\n", job.Traceback)
	}
	return nil
}

func chargeLine(job api.Job) string {
	if job.ChargeNote == "" {
		return "not settled yet"
	}
	if job.Settled && job.Charged > 0 {
		return fmt.Sprintf("%s (%s at %s)", money.Format(job.Charged), formatDuration(job.Seconds), job.RateDisplay)
	}
	return job.ChargeNote
}

// saveModel downloads the model into dir without overwriting anything:
// if NAME is taken it tries JOB-NAME, then JOB-2-NAME and so on.
func (c *cli) saveModel(ctx context.Context, svc api.Service, job api.Job, dir string) (string, error) {
	m, err := svc.Model(ctx, job.ID, "")
	if err != nil {
		return "", err
	}
	defer m.Body.Close()
	tmp, err := os.CreateTemp(dir, ".gaas-model-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	bar := c.progress("Downloading "+m.Name, m.Size)
	_, err = io.Copy(tmp, bar.Reader(m.Body))
	bar.Done()
	if err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	os.Chmod(tmp.Name(), 0o644)
	name := filepath.Base(m.Name)
	for i := 1; ; i++ {
		path := filepath.Join(dir, name)
		switch {
		case i == 2:
			path = filepath.Join(dir, job.ID+"-"+name)
		case i > 2:
			path = filepath.Join(dir, fmt.Sprintf("%s-%d-%s", job.ID, i-1, name))
		}
		// A hard link fails if path exists, where a rename would replace it.
		err := os.Link(tmp.Name(), path)
		if err == nil {
			return path, nil
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return "", err
		}
	}
}

func (c *cli) jobList(ctx context.Context, args []string) error {
	f := c.flags("job list")
	cf := f.client()
	asJSON := f.Bool("json", false, "print JSON")
	limit := f.Int("limit", 50, "how many jobs to show")
	if _, err := f.parse(args); err != nil {
		return err
	}
	l, err := cf.client().Jobs(ctx, 0, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(l)
	}
	if len(l.Jobs) == 0 {
		fmt.Fprintln(c.stdout, "No jobs yet. Start one with: gaas job submit --tier pro --dataset FILE.csv --script FILE.py")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTIER\tCREATED\tCHARGE")
	for _, j := range l.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.ID, j.State, j.Tier, j.CreatedAt.Local().Format("2006-01-02 15:04"), chargeLine(j))
	}
	return tw.Flush()
}

func oneID(f *flags, args []string, what string) (string, error) {
	rest, err := f.parse(args)
	if err != nil {
		return "", err
	}
	if len(rest) != 1 {
		return "", usagef("job %s: give one job ID", what)
	}
	return rest[0], nil
}

func (c *cli) jobShow(ctx context.Context, args []string) error {
	f := c.flags("job show")
	cf := f.client()
	asJSON := f.Bool("json", false, "print JSON")
	id, err := oneID(f, args, "show")
	if err != nil {
		return err
	}
	j, err := cf.client().Job(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(j)
	}
	w := c.stdout
	fmt.Fprintf(w, "Job       %s  %s\n", j.ID, j.State)
	if j.Waiting != "" {
		fmt.Fprintf(w, "          %s\n", j.Waiting)
	}
	fmt.Fprintf(w, "Tier      %s at %s, cap %s (at most %s)\n", j.Tier, j.RateDisplay, formatDuration(j.CapSeconds), money.Format(j.MaxCharge))
	fmt.Fprintf(w, "Dataset   %s: %d rows (%s)\nScript    %s\n", j.Dataset.Name, j.Dataset.Rows, strings.Join(j.Dataset.Header, ", "), j.Script.Name)
	if j.Provider != "" {
		fmt.Fprintf(w, "Provider  %s on %s\n", j.Provider, j.GPU)
	}
	for _, t := range j.History {
		fmt.Fprintf(w, "  %s  %s\n", t.At.Local().Format("2006-01-02 15:04:05"), t.State)
	}
	if j.Telemetry != nil && !api.Final(j.State) {
		fmt.Fprintf(w, "GPU       %s\n", telemetryLine(j.Telemetry))
	}
	if j.Model != nil {
		fmt.Fprintf(w, "Model     %s (%d bytes, CID %s)\n", j.Model.Name, j.Model.Size, j.Model.CID)
	}
	if j.Explanation != "" {
		fmt.Fprintf(w, "Failed    %s\n", j.Explanation)
	}
	if api.Final(j.State) {
		fmt.Fprintf(w, "Charge    %s\n", chargeLine(j))
	}
	if j.Traceback != "" {
		fmt.Fprintf(w, "\nTraceback from the provider:\n%s\n", j.Traceback)
	}
	return nil
}

func (c *cli) jobLogs(ctx context.Context, args []string) error {
	f := c.flags("job logs")
	cf := f.client()
	asJSON := f.Bool("json", false, "print JSON")
	followFlag := f.Bool("follow", false, "keep printing new output until the job ends")
	id, err := oneID(f, args, "logs")
	if err != nil {
		return err
	}
	cl := cf.client()
	evs, err := cl.Logs(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(evs)
	}
	var last uint64
	for _, ev := range evs {
		last = ev.Seq
		switch ev.Kind {
		case api.EventLog:
			fmt.Fprintln(c.stdout, ev.Line)
		case api.EventNotice:
			fmt.Fprintf(c.stdout, "[gaas %s] %s\n", ev.At.Local().Format("15:04:05"), ev.Line)
		case api.EventState:
			fmt.Fprintf(c.stdout, "[gaas %s] state: %s\n", ev.At.Local().Format("15:04:05"), ev.State)
		}
	}
	if *followFlag {
		return c.follow(ctx, cl, id, last)
	}
	return nil
}

func (c *cli) jobCancel(ctx context.Context, args []string) error {
	f := c.flags("job cancel")
	cf := f.client()
	id, err := oneID(f, args, "cancel")
	if err != nil {
		return err
	}
	j, err := cf.client().CancelJob(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Cancelling job %s (was %s). A running job is charged for the seconds it ran; see: gaas job show %s\n", j.ID, j.State, j.ID)
	return nil
}

func (c *cli) jobModel(ctx context.Context, args []string) error {
	f := c.flags("job model")
	cf := f.client()
	out := f.String("out", ".", "folder to save the model in")
	id, err := oneID(f, args, "model")
	if err != nil {
		return err
	}
	cl := cf.client()
	j, err := cl.Job(ctx, id)
	if err != nil {
		return err
	}
	path, err := c.saveModel(ctx, cl, j, *out)
	if err != nil {
		return fmt.Errorf("saving the model of job %s: %s", id, sentence(err))
	}
	fmt.Fprintf(c.stdout, "Model     %s (%d bytes, CID %s)\n", path, j.Model.Size, j.Model.CID)
	return nil
}
