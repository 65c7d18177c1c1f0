package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/gpu"
	"github.com/trisparc/gaas/inputs"
	"github.com/trisparc/gaas/p2p"
	"github.com/trisparc/gaas/protocol"
	"github.com/trisparc/gaas/sandbox"
)

// reprovideInterval refreshes DHT provider records well inside their
// 48-hour expiry.
const reprovideInterval = 30 * time.Minute

// provider is this node's provider mode while it is on.
type provider struct {
	gpu     gpu.Reader
	card    gpu.GPU
	tier    protocol.Tier            // the highest tier the GPU serves
	served  map[string]protocol.Tier // the tiers it takes jobs for
	sandbox *sandbox.Sandbox
	busy    atomic.Bool
	cancel  context.CancelFunc
	ready   chan struct{} // closed once the tier is advertised
	done    chan struct{}
}

// SetProvider turns provider mode on or off. Turning it on reads the GPU,
// works out the tier it serves, checks that jobs can be sandboxed here,
// and starts advertising; any of those failing leaves it off, with the
// reason. Turning it off stops advertising; a running job finishes.
func (n *Node) SetProvider(on bool) error {
	n.mu.Lock()
	cur := n.provider
	if !on {
		n.provider = nil
	}
	n.mu.Unlock()
	if !on {
		if cur != nil {
			cur.cancel()
			<-cur.done
		}
		return nil
	}
	if cur != nil {
		return nil
	}
	reader := n.cfg.GPU
	if reader == nil {
		var err error
		if reader, err = gpu.Detect(); err != nil {
			return api.Errorf(http.StatusConflict, api.CodeUnavailable, "%v.", err)
		}
	}
	gpus, err := reader.GPUs()
	if err != nil || len(gpus) == 0 {
		return api.Errorf(http.StatusConflict, api.CodeUnavailable, "Could not read the GPU: %v.", err)
	}
	card, err := n.rateCard(n.ctx)
	if err != nil {
		return coordinatorError(err)
	}
	tier, ok := card.TierFor(gpus[0].VRAMTotalMiB)
	if !ok {
		return api.Errorf(http.StatusConflict, api.CodeUnavailable, "%s has %d MiB of memory, below what the smallest tier needs.", gpus[0].Label(), gpus[0].VRAMTotalMiB)
	}
	sb, err := sandbox.New(n.ctx)
	if err != nil {
		return api.Errorf(http.StatusConflict, api.CodeUnavailable, "Provider mode stays off: %v", err)
	}
	sb.PipIndexURL, sb.PipFindLinks = n.cfg.PipIndexURL, n.cfg.PipFindLinks
	sb.EnvDir = filepath.Join(n.cfg.DataDir, "envs")
	sb.Limits = n.cfg.Limits
	if !gpus[0].Simulated {
		sb.GPU = &sandbox.GPU{Index: gpus[0].Index, UUID: gpus[0].UUID, Libs: sandbox.FindDriverLibs()}
	}
	n.log.Info("sandbox", "limits", sb.Enforcement().String())
	// The highest tier the card can serve; with ServeLowerTiers, every
	// tier below it too, each at its own rate.
	served := map[string]protocol.Tier{tier.Name: tier}
	if n.cfg.ServeLowerTiers {
		for _, t := range card.Tiers {
			if t.MinVRAMMiB <= gpus[0].VRAMTotalMiB {
				served[t.Name] = t
			}
		}
	}
	var subs []*pubsub.Subscription
	for name := range served {
		topic, err := n.topic(protocol.JobTopic(name))
		if err == nil {
			var sub *pubsub.Subscription
			if sub, err = topic.Subscribe(); err == nil {
				subs = append(subs, sub)
				continue
			}
		}
		for _, s := range subs {
			s.Cancel()
		}
		return err
	}
	ctx, cancel := context.WithCancel(n.ctx)
	p := &provider{gpu: reader, card: gpus[0], tier: tier, served: served, sandbox: sb, cancel: cancel, ready: make(chan struct{}), done: make(chan struct{})}
	n.mu.Lock()
	n.provider = p
	n.mu.Unlock()
	n.log.Info("provider mode on", "gpu", gpus[0].Label(), "tier", tier.Name, "tiers", len(served))
	var listeners sync.WaitGroup
	for _, sub := range subs {
		listeners.Add(1)
		go func(sub *pubsub.Subscription) {
			defer listeners.Done()
			defer sub.Cancel()
			for {
				msg, err := sub.Next(ctx)
				if err != nil {
					return
				}
				if msg.ReceivedFrom == n.ID() {
					continue
				}
				m, _, err := protocol.Unmarshal(msg.Data) // the topic validator already checked it
				if req, ok := m.(*protocol.JobRequest); err == nil && ok && req.Buyer != n.ID().String() {
					go n.offer(ctx, p, req)
				}
			}
		}(sub)
	}
	go n.advertise(ctx, p)
	go func() {
		listeners.Wait()
		close(p.done)
	}()
	return nil
}

// ProviderReady is closed once provider mode has advertised its tier; it
// is nil while provider mode is off.
func (n *Node) ProviderReady() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.provider == nil {
		return nil
	}
	return n.provider.ready
}

// advertise keeps a DHT provider record for each served tier while
// online.
func (n *Node) advertise(ctx context.Context, p *provider) {
	first := true
	for {
		wait := reprovideInterval
		for name := range p.served {
			if err := n.peer.DHT.Provide(ctx, protocol.TierKey(name), true); err != nil {
				if ctx.Err() != nil {
					return
				}
				n.log.Warn("advertising tier", "tier", name, "err", err)
				wait = 2 * time.Second
			}
		}
		if wait == reprovideInterval && first {
			first = false
			close(p.ready)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// offer answers a job request for our tier, unless busy.
func (n *Node) offer(ctx context.Context, p *provider, req *protocol.JobRequest) {
	tier, ok := p.served[req.Tier]
	if p.busy.Load() || !ok {
		return
	}
	buyer, err := peer.Decode(req.Buyer)
	if err != nil {
		return
	}
	if infos, err := p2p.ParseAddrs(req.BuyerAddrs); err == nil {
		for _, ai := range infos {
			if ai.ID == buyer {
				n.peer.Host.Peerstore().AddAddrs(buyer, ai.Addrs, time.Minute)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := n.peer.Host.NewStream(ctx, buyer, protocol.OfferProtocol)
	if err != nil {
		n.log.Debug("offering", "job", req.JobID, "err", err)
		return
	}
	defer s.Close()
	protocol.NewConn(s, n.peer.Key).Send(&protocol.Offer{
		JobID: req.JobID, Tier: tier.Name, Provider: n.ID().String(), GPU: p.card.Name, Simulated: p.card.Simulated,
	})
}

var (
	jobIDPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	safeNameRe   = regexp.MustCompile(`^[A-Za-z0-9._ -]{1,100}$`)
)

// Provider-side timings.
const (
	defaultHeartbeat = 5 * time.Second
	sendTimeout      = 30 * time.Second // a buyer that reads nothing this long is gone
	endNoticeFor     = 2 * time.Minute  // keep telling the coordinator how a run ended
)

// jobStream is the provider's end of a job stream. Writes time out, so a
// buyer that stops reading cannot freeze the provider; a failed write ends
// the job.
type jobStream struct {
	s      network.Stream
	conn   *protocol.Conn
	stop   context.CancelFunc
	broken atomic.Pointer[error] // the first failed write; later ones are dropped at once
}

func (js *jobStream) send(m protocol.Message) error {
	if err := js.broken.Load(); err != nil {
		return *err
	}
	js.s.SetWriteDeadline(time.Now().Add(sendTimeout))
	err := js.conn.Send(m)
	if err != nil {
		js.broken.CompareAndSwap(nil, &err)
		js.stop()
	}
	return err
}

// handleJob takes an accepted contract: confirm it if free, wait for the
// buyer's commit, then run it.
func (n *Node) handleJob(s network.Stream) {
	if !n.enter() {
		s.Reset()
		return
	}
	defer n.leave()
	conn := protocol.NewConn(s, n.peer.Key)
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, signer, acceptEnv, err := conn.Receive()
	if err != nil {
		s.Reset()
		return
	}
	accept, ok := m.(*protocol.Accept)
	if !ok {
		s.Reset()
		return
	}
	ct := accept.Contract
	decline := func(reason string) {
		conn.Send(&protocol.Decline{JobID: ct.JobID, Reason: reason})
		s.Close()
	}
	n.mu.Lock()
	p := n.provider
	n.mu.Unlock()
	_, pkgErr := inputs.CheckPackages(ct.Packages)
	switch {
	case signer != s.Conn().RemotePeer() || ct.Buyer != signer.String() || ct.Provider != n.ID().String():
		s.Reset()
		return
	case p == nil:
		decline("provider mode is off")
		return
	case p.served[ct.Tier].RatePaisePerHour != ct.RatePaisePerHour || p.served[ct.Tier].Name == "":
		decline("this provider does not serve " + ct.Tier + " at that rate")
		return
	case !jobIDPattern.MatchString(ct.JobID) || ct.CapSeconds <= 0 || pkgErr != nil:
		decline("malformed contract")
		return
	case !p.busy.CompareAndSwap(false, true):
		decline("busy with another job")
		return
	}
	defer p.busy.Store(false)
	if err := conn.Send(&protocol.Confirm{Contract: ct}); err != nil {
		s.Reset()
		return
	}
	// Only the buyer's commit, after our confirm, lets the meter start.
	m, committer, commitEnv, err := conn.Receive()
	s.SetReadDeadline(time.Time{})
	commit, ok := m.(*protocol.Commit)
	if err != nil || !ok || committer != signer || commit.JobID != ct.JobID || commit.Provider != n.ID().String() {
		s.Reset()
		return
	}
	n.log.Info("job accepted", "job", ct.JobID, "buyer", shortPeer(signer))
	n.peer.Host.ConnManager().Protect(signer, "gaas-job-"+ct.JobID)
	defer n.peer.Host.ConnManager().Unprotect(signer, "gaas-job-"+ct.JobID)

	// One reader for the rest of the stream's life: the buyer's cancel, or
	// its disappearance, stops the job.
	jobCtx, stop := context.WithCancel(n.ctx)
	defer stop()
	js := &jobStream{s: s, conn: conn, stop: stop}
	var cancelled atomic.Bool
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer stop()
		for {
			m, _, _, err := conn.Receive()
			if err != nil {
				return
			}
			if _, ok := m.(*protocol.Cancel); ok {
				cancelled.Store(true)
				return
			}
		}
	}()
	fin, metered := n.runContract(jobCtx, p, js, ct, acceptEnv, commitEnv)
	if fin.Outcome == protocol.OutcomeAborted && cancelled.Load() {
		fin.Outcome, fin.Cause = protocol.OutcomeCancelled, ""
	}
	fin.JobID = ct.JobID
	// The coordinator hears first, so the bill is settled before the buyer
	// asks about it.
	if metered {
		n.sendEnd(ct.JobID, fin)
	}
	if fin.Model != "" {
		if c, err := cid.Decode(fin.Model); err == nil {
			// The buyer may fetch the model; the grant lasts while this node runs.
			n.blocks.Grant(n.ctx, signer, c)
		}
	}
	js.send(fin)
	s.CloseWrite()
	// Keep the stream open until the buyer has read the result and closed.
	s.SetReadDeadline(time.Now().Add(30 * time.Second))
	stopOnClose := context.AfterFunc(n.ctx, func() { s.Reset() })
	<-readerDone
	stopOnClose()
	s.Close()
	n.log.Info("job done", "job", ct.JobID, "outcome", fin.Outcome)
}

// sendEnd tells the coordinator how a metered run ended, retrying for a
// while: until it hears, the buyer's funds stay held. It does not give up
// because this node is shutting down.
func (n *Node) sendEnd(job string, fin *protocol.Finished) {
	limit := endNoticeFor
	if n.ctx.Err() != nil {
		limit = 5 * time.Second // shutting down: try, but do not hold the shutdown up
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
		_, err := n.coord.Send(ctx, &protocol.EndNotice{JobID: job, Outcome: fin.Outcome, Cause: fin.Cause, Model: fin.Model})
		if err == nil {
			return
		}
		var pe *protocol.Error
		if errors.As(err, &pe) {
			n.log.Warn("end notice refused", "job", job, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			n.log.Error("the coordinator never heard how the run ended", "job", job, "err", err)
			return
		case <-time.After(wait):
		}
	}
}

func safeName(name, fallback string) string {
	base := filepath.Base(name)
	if base == "." || base == "/" || base == ".." || !safeNameRe.MatchString(base) {
		return fallback
	}
	return base
}

// runContract fetches the inputs, installs the packages, has the
// coordinator start its meter, runs the script in the sandbox while
// streaming its output and the GPU's telemetry, and collects the model.
// metered reports whether the coordinator's meter was started, so that it
// must hear how the run ended. Ending ctx (the buyer cancelled or went
// away) stops it.
func (n *Node) runContract(ctx context.Context, p *provider, js *jobStream, ct protocol.Contract, acceptEnv, commitEnv protocol.Envelope) (fin *protocol.Finished, metered bool) {
	aborted := func(cause, format string, args ...any) (*protocol.Finished, bool) {
		return &protocol.Finished{Outcome: protocol.OutcomeAborted, Cause: cause, Reason: fmt.Sprintf(format, args...)}, metered
	}
	dir := filepath.Join(n.cfg.DataDir, "provider", "jobs", ct.JobID)
	defer sandbox.RemoveJobDir(dir)
	datasetName, scriptName := safeName(ct.DatasetName, "data.csv"), safeName(ct.ScriptName, "train.py")
	if datasetName == scriptName {
		datasetName = "data.csv"
	}
	if err := os.MkdirAll(filepath.Join(dir, "input"), 0o700); err != nil {
		return aborted(protocol.CauseInputs, "could not create the job folder: %v", err)
	}
	fetchCtx, cancelFetch := context.WithTimeout(ctx, 30*time.Minute)
	for _, in := range []struct{ cid, name string }{{ct.Dataset, datasetName}, {ct.Script, scriptName}} {
		c, err := cid.Decode(in.cid)
		if err != nil {
			cancelFetch()
			return aborted(protocol.CauseInputs, "the contract names an invalid input %q", in.cid)
		}
		if err := n.blocks.Fetch(fetchCtx, c); err != nil {
			cancelFetch()
			return aborted(protocol.CauseInputs, "could not fetch %s from the buyer: %v", in.name, err)
		}
		if err := n.blocks.Export(fetchCtx, c, filepath.Join(dir, "input", in.name)); err != nil {
			cancelFetch()
			return aborted(protocol.CauseInputs, "could not write %s: %v", in.name, err)
		}
	}
	cancelFetch()

	// Packages install before the meter starts: the buyer pays for the
	// script's time, not pip's.
	env, res, err := p.sandbox.Install(ctx, ct.Packages, func(stream, line string) {
		js.send(&protocol.Log{JobID: ct.JobID, Stream: stream, Line: "pip: " + line, At: time.Now().UnixMilli()})
	})
	switch {
	case err != nil:
		n.metrics.sandboxErrors.WithLabelValues("packages").Inc()
		return aborted(protocol.CauseSandbox, "the sandbox failed installing packages: %v", err)
	case res.Outcome == sandbox.Cancelled:
		return aborted(protocol.CauseSandbox, "stopped while installing packages")
	case res.Outcome != sandbox.Completed:
		return &protocol.Finished{Outcome: protocol.OutcomeFailed, Cause: protocol.CausePackages, ExitCode: res.ExitCode, Reason: "pip could not install the packages: " + res.Reason()}, false
	}

	// A lost answer is retried: a repeated start notice changes nothing.
	var startErr error
	for attempt := 0; attempt < 3; attempt++ {
		if _, startErr = n.coord.Send(ctx, &protocol.StartNotice{JobID: ct.JobID, Accept: acceptEnv, Commit: commitEnv}); startErr == nil {
			break
		}
		var pe *protocol.Error
		if errors.As(startErr, &pe) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 300 * time.Millisecond)
	}
	if startErr != nil {
		return aborted(protocol.CauseRefused, "the coordinator would not start the meter: %v", startErr)
	}
	metered = true
	started := time.Now()
	if err := js.send(&protocol.Started{JobID: ct.JobID, At: started.UnixMilli()}); err != nil {
		return aborted(protocol.CauseSandbox, "the buyer went away")
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	p.gpu.SetBusy(true)
	defer p.gpu.SetBusy(false)
	var side sync.WaitGroup
	side.Add(2)
	go func() { // telemetry for the buyer, once a second
		defer side.Done()
		every(runCtx, time.Second, func() {
			gpus, err := p.gpu.GPUs()
			if err != nil || len(gpus) == 0 {
				return
			}
			g := gpus[0]
			js.send(&protocol.Telemetry{
				JobID: ct.JobID, ElapsedMs: time.Since(started).Milliseconds(), GPU: g.Label(), TempC: g.TempC,
				VRAMUsedMiB: g.VRAMUsedMiB, VRAMTotalMiB: g.VRAMTotalMiB, FanPercent: g.FanPercent, UtilPercent: g.UtilPercent, Simulated: g.Simulated,
			})
		})
	}()
	go func() { // heartbeats for the coordinator's meter
		defer side.Done()
		every(runCtx, n.heartbeatEvery(), func() {
			set, err := n.coord.Send(runCtx, &protocol.Heartbeat{JobID: ct.JobID})
			var pe *protocol.Error
			switch {
			case runCtx.Err() != nil:
			case err == nil && set.State != protocol.HoldHeld, errors.As(err, &pe):
				// The coordinator has voided the run (it stopped hearing
				// us): working on would be unpaid.
				n.log.Warn("run voided by the coordinator; stopping", "job", ct.JobID)
				stop()
			case err != nil:
				n.log.Warn("heartbeat", "job", ct.JobID, "err", err)
			}
		})
	}()
	spec := sandbox.Spec{
		Dir: dir, Script: scriptName, Dataset: datasetName, Env: env,
		Limits: sandbox.Limits{Wall: time.Duration(ct.CapSeconds) * time.Second},
		Output: func(stream, line string) {
			js.send(&protocol.Log{JobID: ct.JobID, Stream: stream, Line: line, At: time.Now().UnixMilli()})
		},
	}
	res, err = p.sandbox.Run(runCtx, spec)
	stop()
	side.Wait()
	if err != nil {
		n.metrics.sandboxErrors.WithLabelValues("run").Inc()
		return aborted(protocol.CauseSandbox, "the sandbox failed: %v", err)
	}
	n.metrics.sandboxRuns.WithLabelValues(string(res.Outcome)).Inc()
	fin = &protocol.Finished{ExitCode: res.ExitCode, Reason: res.Reason()}
	switch res.Outcome {
	case sandbox.Completed:
		return n.collectModel(dir, res.Limits.DiskBytes, fin), metered
	case sandbox.OutOfMemory:
		fin.Outcome, fin.Cause = protocol.OutcomeFailed, protocol.CauseMemory
	case sandbox.DiskFull:
		fin.Outcome, fin.Cause = protocol.OutcomeFailed, protocol.CauseDisk
	case sandbox.Cancelled: // handleJob tells a buyer's cancel from a lost buyer
		fin.Outcome, fin.Cause = protocol.OutcomeAborted, protocol.CauseSandbox
	case sandbox.TimedOut:
		fin.Outcome, fin.Cause = protocol.OutcomeFailed, protocol.CauseCap
	case sandbox.NoMain:
		fin.Outcome, fin.Cause = protocol.OutcomeFailed, protocol.CauseNoMain
	default:
		fin.Outcome, fin.Cause = protocol.OutcomeFailed, protocol.CauseScript
	}
	return fin, metered
}

func (n *Node) heartbeatEvery() time.Duration {
	if n.cfg.Heartbeat > 0 {
		return n.cfg.Heartbeat
	}
	return defaultHeartbeat
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// collectModel imports what the script wrote to $GAAS_OUTPUT: one file as
// itself, several as a folder, after the sandbox's checks (no links, no
// special or sparse files, within the limits).
func (n *Node) collectModel(dir string, maxBytes int64, fin *protocol.Finished) *protocol.Finished {
	out, err := sandbox.CheckOutput(dir, maxBytes)
	if errors.Is(err, sandbox.ErrNoOutput) {
		fin.Outcome, fin.Cause, fin.Reason = protocol.OutcomeFailed, protocol.CauseNoModel, err.Error()
		return fin
	}
	if err == nil {
		var c cid.Cid
		if c, err = n.blocks.ImportPath(n.ctx, out.Path); err == nil {
			fin.Outcome, fin.Model, fin.ModelName, fin.ModelSize = protocol.OutcomeCompleted, c.String(), out.Name, out.Bytes
			return fin
		}
	}
	fin.Outcome, fin.Cause, fin.Reason = protocol.OutcomeFailed, protocol.CauseBadModel, err.Error()
	return fin
}
