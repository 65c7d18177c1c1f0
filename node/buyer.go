package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/ipfs/boxo/files"
	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/coordinator"
	"github.com/trisparc/gaas/explain"
	"github.com/trisparc/gaas/inputs"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/protocol"
	"github.com/trisparc/gaas/store"
)

// streamNotice marks log events that GaaS itself wrote, not the script.
const streamNotice = "gaas"

// Matching timings.
const (
	offerWait     = 3 * time.Second       // for the first offer
	offerLinger   = 30 * time.Millisecond // for more offers after the first
	lookupLinger  = 50 * time.Millisecond // for more DHT results after the first
	confirmWait   = 10 * time.Second
	retryInterval = 2 * time.Second
	maxCap        = 7 * 24 * 3600
)

// buyerRun is one job this node is matching or following.
type buyerRun struct {
	cancel context.CancelFunc

	mu        sync.Mutex
	runID     string         // the current attempt
	conn      *protocol.Conn // the job stream, once a provider confirmed
	cancelled bool
	telemetry *store.Telemetry
}

type offerFrom struct {
	offer protocol.Offer
	from  peer.ID
	at    time.Time // when it arrived
}

// CreateJob checks a job, holds its maximum cost at the coordinator,
// stores it and starts matching. A refused hold stores nothing.
func (n *Node) CreateJob(ctx context.Context, spec api.JobSpec) (api.Job, error) {
	card, err := n.rateCard(ctx)
	if err != nil {
		return api.Job{}, coordinatorError(err)
	}
	tier, ok := card.Tier(spec.Tier)
	if !ok {
		var names []string
		for _, t := range card.Tiers {
			names = append(names, t.Name)
		}
		return api.Job{}, api.Errorf(http.StatusBadRequest, api.CodeUnknownTier, "There is no %q tier: choose one of %s.", spec.Tier, strings.Join(names, ", "))
	}
	capSeconds := spec.CapSeconds
	if capSeconds == 0 {
		capSeconds = 3600
	}
	if capSeconds < 1 || capSeconds > maxCap {
		return api.Job{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "The budget cap must be between 1 second and 7 days.")
	}
	account := api.AccountFrom(ctx)
	ds, err := n.store.Upload(account, "dataset", spec.Dataset)
	if err != nil {
		return api.Job{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "Dataset %q was not uploaded to this node: upload it first (POST /api/datasets).", spec.Dataset)
	}
	sc, err := n.store.Upload(account, "script", spec.Script)
	if err != nil {
		return api.Job{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "Script %q was not uploaded to this node: upload it first (POST /api/scripts).", spec.Script)
	}
	pkgs, err := inputs.CheckPackages(spec.Packages)
	if err != nil {
		return api.Job{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "Package %v.", err)
	}
	id := newJobID()
	runID := attemptID(id, 1)
	hold, err := n.holdFor(context.WithoutCancel(ctx), runID, tier.Name, capSeconds, account)
	if err != nil {
		return api.Job{}, coordinatorError(err)
	}
	now := time.Now()
	job := store.Job{
		ID: id, Account: account, Run: runID, Tier: tier.Name, Rate: hold.RatePaisePerHour, CapSeconds: capSeconds, MaxCharge: hold.Held, FailedRunsCharged: hold.FailedRunsCharged,
		Dataset: ds.Input, Script: sc.Input, Packages: pkgs, CreatedAt: now,
	}
	job.SetState(store.Queued, now)
	if err := n.store.CreateJob(job); err != nil {
		n.coord.Send(context.Background(), &protocol.AbortNotice{JobID: runID, Reason: "the buyer's node could not store the job"})
		return api.Job{}, err
	}
	n.log.Info("job queued", "job", id, "tier", tier.Name, "held", hold.Held)
	n.startRun(job)
	return n.view(job), nil
}

func (n *Node) startRun(job store.Job) {
	ctx, cancel := context.WithCancel(n.ctx)
	run := &buyerRun{cancel: cancel, runID: job.Run}
	n.mu.Lock()
	n.runs[job.ID] = run
	n.mu.Unlock()
	n.goBackground(func() {
		defer func() {
			cancel()
			n.mu.Lock()
			delete(n.runs, job.ID)
			n.mu.Unlock()
		}()
		n.runJob(ctx, run, job)
	})
}

// maxAttempts is how many providers a job may lose before it fails.
const maxAttempts = 3

// attemptID names one attempt at a job: the coordinator holds funds, and
// providers run contracts, per attempt, so a lost attempt is voided on
// its own and the job goes on.
func attemptID(job string, attempt int) string {
	// Unguessable, so no one can hold the next attempt's ID first.
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s-r%d-%s", job, attempt, hex.EncodeToString(b))
}

// holdFor holds an attempt's maximum cost. The hold must not be orphaned
// by a client that hangs up mid-request: ctx should not end with the
// request, and anything short of a clear refusal is voided.
func (n *Node) holdFor(ctx context.Context, runID, tier string, capSeconds int64, account string) (*protocol.Settlement, error) {
	hold, err := n.coord.Send(ctx, &protocol.HoldRequest{JobID: runID, Tier: tier, CapSeconds: capSeconds, Account: account})
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			n.coord.Send(context.Background(), &protocol.AbortNotice{JobID: runID, Reason: "the hold's answer was lost"})
		}
		return nil, err
	}
	return hold, nil
}

// session is an accepted job stream.
type session struct {
	stream   network.Stream
	conn     *protocol.Conn
	provider peer.ID
	offer    protocol.Offer
	timing   store.MatchTiming
}

func (n *Node) runJob(ctx context.Context, run *buyerRun, job store.Job) {
	lost := map[peer.ID]bool{} // providers this job lost: not tried again
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			runID := attemptID(job.ID, attempt)
			if _, err := n.holdFor(context.Background(), runID, job.Tier, job.CapSeconds, job.Account); err != nil {
				n.finish(job.ID, store.Failed, nil, func(j *store.Job) {
					j.Explanation = "The provider was lost, and a new attempt could not be paid for: " + api.Sentence(coordinatorError(err))
				})
				return
			}
			updated, ev, err := n.store.UpdateJob(job.ID, func(j *store.Job) error {
				j.Run = runID
				j.SetState(store.Queued, time.Now())
				return nil
			})
			if err != nil {
				return
			}
			if ev != nil {
				n.publish(job.ID, eventView(*ev))
			}
			job = updated
			run.setRun(runID)
		}
		sess, err := n.match(ctx, job, lost)
		switch {
		case n.ctx.Err() != nil:
			return // the node is closing; the job is recovered on restart
		case err != nil && ctx.Err() != nil: // cancelled while queued
			set, _ := n.coord.Send(context.Background(), &protocol.CancelNotice{JobID: job.Run})
			n.finish(job.ID, store.Cancelled, set, nil)
			return
		case err != nil:
			set, _ := n.coord.Send(context.Background(), &protocol.AbortNotice{JobID: job.Run, Reason: "matching failed"})
			n.finish(job.ID, store.Failed, set, func(j *store.Job) {
				j.Explanation = "The job could not be matched with a provider: " + err.Error()
			})
			return
		}
		if !n.follow(ctx, run, job, sess) {
			break
		}
		// The provider vanished and its attempt was voided: match again,
		// elsewhere.
		lost[sess.provider] = true
		if attempt == maxAttempts {
			n.finish(job.ID, store.Failed, nil, func(j *store.Job) {
				j.Explanation = fmt.Sprintf("%d attempts in a row ended without the job running (providers were lost or could not run it). Nothing was charged for them; retry the job later.", maxAttempts)
			})
			return
		}
		n.notice(job.ID, fmt.Sprintf("The attempt on provider %s ended without running the job (the provider was lost or could not run it); it was voided, not charged. Matching again.", shortPeer(sess.provider)))
	}
	// follow ends a job in every way the provider tells of; what remains is
	// a cancel whose provider never answered.
	if j, err := n.store.Job(job.ID); err == nil && !store.Terminal(j.State) && n.ctx.Err() == nil {
		state := store.Failed
		run.mu.Lock()
		if run.cancelled {
			state = store.Cancelled
		}
		run.mu.Unlock()
		n.finish(job.ID, state, n.awaitSettlement(j.Run), func(j *store.Job) {
			if state == store.Failed {
				j.Explanation = "The provider stopped answering before the job finished."
			}
		})
	}
}

func (r *buyerRun) setRun(id string) {
	r.mu.Lock()
	r.runID, r.conn, r.telemetry = id, nil, nil
	r.mu.Unlock()
}

// match finds a provider of the job's tier and gets its confirmation,
// retrying until one confirms or ctx ends.
func (n *Node) match(ctx context.Context, job store.Job, skip map[peer.ID]bool) (*session, error) {
	topic, err := n.topic(protocol.JobTopic(job.Tier))
	if err != nil {
		return nil, err
	}
	offers := make(chan offerFrom, 64)
	n.mu.Lock()
	n.offers[job.Run] = offers
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.offers, job.Run)
		n.mu.Unlock()
	}()
	waiting, first := false, time.Now()
	for {
		begin := time.Now()
		providers := n.findProviders(ctx, job.Tier)
		n.awaitTopicPeers(ctx, topic.String(), providers)
		looked := time.Now()
		env, err := protocol.Seal(n.peer.Key, &protocol.JobRequest{
			JobID: job.Run, Tier: job.Tier, CapSeconds: job.CapSeconds,
			Buyer: n.ID().String(), BuyerAddrs: n.Addrs(), IssuedAt: time.Now().UnixMilli(),
		})
		if err != nil {
			return nil, err
		}
		data, _ := protocol.Marshal(env)
		if err := topic.Publish(ctx, data); err != nil && ctx.Err() == nil {
			n.log.Warn("publishing job request", "job", job.ID, "err", err)
		}
		for _, o := range collectOffers(ctx, offers, job.Run) {
			if skip[o.from] {
				continue
			}
			offered := time.Now()
			sess, err := n.accept(ctx, job, o)
			if err == nil {
				sess.timing = store.MatchTiming{
					LookupMs: looked.Sub(begin).Milliseconds(), OfferMs: o.at.Sub(looked).Milliseconds(),
					ConfirmMs: time.Since(offered).Milliseconds(), Providers: len(providers),
				}
				n.metrics.match.Observe(time.Since(first).Seconds())
				return sess, nil
			}
			n.log.Info("offer not taken", "job", job.ID, "provider", o.from.ShortString(), "err", err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !waiting {
			waiting = true
			msg := fmt.Sprintf("Waiting for a %s GPU", tierTitle(job.Tier))
			n.notice(job.ID, msg)
			n.store.UpdateJob(job.ID, func(j *store.Job) error { j.Waiting = msg; return nil })
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retryInterval):
		}
	}
}

// shortPeer abbreviates a peer ID for people: "12D3KooW…kRAAVm".
func shortPeer(id peer.ID) string {
	s := id.String()
	if len(s) <= 16 {
		return s
	}
	return s[:8] + "…" + s[len(s)-6:]
}

func tierTitle(name string) string {
	if name == "" {
		return name
	}
	return strings.ToUpper(name[:1]) + name[1:]
}

// findProviders looks the tier up in the DHT and connects to what it
// finds. It does not wait for the lookup to exhaust the network: once a
// provider is found, it takes what else arrives within lookupLinger.
func (n *Node) findProviders(ctx context.Context, tier string) []peer.ID {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var found []peer.ID
	var wg sync.WaitGroup
	results := n.peer.DHT.FindProvidersAsync(ctx, protocol.TierKey(tier), 20)
	var linger <-chan time.Time
collect:
	for {
		select {
		case ai, ok := <-results:
			if !ok {
				break collect
			}
			if ai.ID == n.ID() {
				continue
			}
			found = append(found, ai.ID)
			if linger == nil {
				linger = time.After(lookupLinger)
			}
			wg.Add(1)
			go func(ai peer.AddrInfo) {
				defer wg.Done()
				n.peer.Host.Connect(ctx, ai)
			}(ai)
		case <-linger:
			break collect
		case <-ctx.Done():
			break collect
		}
	}
	wg.Wait()
	return found
}

// awaitTopicPeers waits (briefly) until gossipsub knows that at least one
// of the providers found is subscribed to the topic, so the request is not
// published into a mesh that has not formed yet.
func (n *Node) awaitTopicPeers(ctx context.Context, topic string, providers []peer.ID) {
	if len(providers) == 0 {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, p := range n.peer.PubSub.ListPeers(topic) {
			for _, want := range providers {
				if p == want {
					return
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// collectOffers returns the offers for a job in arrival order: the first
// to answer is the closest and least loaded, so it is tried first.
func collectOffers(ctx context.Context, offers <-chan offerFrom, job string) []offerFrom {
	var out []offerFrom
	timer := time.NewTimer(offerWait)
	defer timer.Stop()
	for {
		select {
		case o := <-offers:
			if o.offer.JobID != job {
				continue
			}
			if len(out) == 0 {
				timer.Reset(offerLinger)
			}
			out = append(out, o)
		case <-timer.C:
			return out
		case <-ctx.Done():
			return nil
		}
	}
}

// handleOffer receives a provider's offer for one of our jobs.
func (n *Node) handleOffer(s network.Stream) {
	defer s.Close()
	if !n.enter() {
		return
	}
	defer n.leave()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	m, signer, _, err := protocol.NewConn(s, n.peer.Key).Receive()
	if err != nil {
		return
	}
	o, ok := m.(*protocol.Offer)
	if !ok || signer != s.Conn().RemotePeer() || o.Provider != signer.String() {
		return
	}
	n.mu.Lock()
	ch := n.offers[o.JobID]
	n.mu.Unlock()
	if ch != nil {
		select {
		case ch <- offerFrom{offer: *o, from: signer, at: time.Now()}:
		default:
		}
	}
}

var errDeclined = errors.New("declined")

// accept sends the signed contract to a provider and waits for its
// countersignature.
func (n *Node) accept(ctx context.Context, job store.Job, o offerFrom) (*session, error) {
	contract := protocol.Contract{
		JobID: job.Run, Tier: job.Tier, RatePaisePerHour: job.Rate, CapSeconds: job.CapSeconds,
		Buyer: n.ID().String(), Provider: o.from.String(),
		Dataset: job.Dataset.CID, DatasetName: job.Dataset.Name, Script: job.Script.CID, ScriptName: job.Script.Name,
		Packages: job.Packages,
	}
	s, err := n.peer.Host.NewStream(ctx, o.from, protocol.JobProtocol)
	if err != nil {
		return nil, err
	}
	conn := protocol.NewConn(s, n.peer.Key)
	if err := conn.Send(&protocol.Accept{Contract: contract}); err != nil {
		s.Reset()
		return nil, err
	}
	s.SetReadDeadline(time.Now().Add(confirmWait))
	m, signer, _, err := conn.Receive()
	s.SetReadDeadline(time.Time{})
	if err != nil {
		s.Reset()
		return nil, err
	}
	switch m := m.(type) {
	case *protocol.Confirm:
		if signer != o.from || !reflect.DeepEqual(m.Contract, contract) {
			s.Reset()
			return nil, fmt.Errorf("the provider confirmed a different contract")
		}
		// Only now may this provider fetch the inputs, and only now can it
		// have the meter started: the commit is what the coordinator checks.
		if err := n.grantInputs(ctx, job, o.from, true); err != nil {
			s.Reset()
			return nil, err
		}
		if err := conn.Send(&protocol.Commit{JobID: job.Run, Provider: o.from.String()}); err != nil {
			n.grantInputs(context.Background(), job, o.from, false)
			s.Reset()
			return nil, err
		}
		return &session{stream: s, conn: conn, provider: o.from, offer: o.offer}, nil
	case *protocol.Decline:
		s.Close()
		return nil, fmt.Errorf("%w: %s", errDeclined, m.Reason)
	}
	s.Reset()
	return nil, fmt.Errorf("unexpected %s", m.Kind())
}

// grantInputs lets a provider fetch a job's dataset and script, or takes
// that back.
func (n *Node) grantInputs(ctx context.Context, job store.Job, p peer.ID, grant bool) error {
	var roots []cid.Cid
	for _, s := range []string{job.Dataset.CID, job.Script.CID} {
		c, err := cid.Decode(s)
		if err != nil {
			return err
		}
		roots = append(roots, c)
	}
	if grant {
		return n.blocks.Grant(ctx, p, roots...)
	}
	return n.blocks.Revoke(ctx, p, roots...)
}

// How long a job stream may carry nothing before its provider is taken
// as lost: once running, telemetry comes every second; before, the
// provider may be fetching inputs and installing packages quietly.
const (
	runningSilence   = 5 * time.Second
	preparingSilence = time.Hour
)

// follow records a confirmed attempt until it ends. It reports true when
// the provider was lost and the attempt voided, so the job should be
// matched again; otherwise the job has been finished.
func (n *Node) follow(ctx context.Context, run *buyerRun, job store.Job, sess *session) (rematch bool) {
	n.peer.Host.ConnManager().Protect(sess.provider, "gaas-job-"+job.ID)
	defer n.peer.Host.ConnManager().Unprotect(sess.provider, "gaas-job-"+job.ID)
	defer n.grantInputs(context.Background(), job, sess.provider, false)
	gpuLabel := sess.offer.GPU
	if sess.offer.Simulated && !strings.Contains(gpuLabel, "simulated") {
		gpuLabel += " (simulated)"
	}
	timing := sess.timing
	n.store.UpdateJob(job.ID, func(j *store.Job) error {
		j.Provider, j.GPU, j.Simulated, j.Waiting = sess.provider.String(), gpuLabel, sess.offer.Simulated, ""
		j.Attempts++
		j.Match = &timing
		return nil
	})
	n.notice(job.ID, fmt.Sprintf("Matched with provider %s (%s)", shortPeer(sess.provider), gpuLabel))
	run.mu.Lock()
	run.conn = sess.conn
	run.mu.Unlock()

	type received struct {
		m      protocol.Message
		signer peer.ID
		err    error
	}
	msgs := make(chan received, 64)
	go func() {
		for {
			m, signer, _, err := sess.conn.Receive()
			select {
			case msgs <- received{m, signer, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer sess.stream.Reset() // unblocks the reader

	logs := newLogBatch(n, job.ID)
	var stderr []string
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	quiet := preparingSilence
	silence := time.NewTimer(quiet)
	defer silence.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-flush.C:
			logs.flush()
			continue
		case <-silence.C:
			logs.flush()
			sess.stream.Reset()
			return n.providerLost(job, run, fmt.Errorf("nothing heard for %s", quiet))
		case r := <-msgs:
			if r.err != nil {
				logs.flush()
				return n.providerLost(job, run, r.err)
			}
			if r.signer != sess.provider {
				continue
			}
			silence.Reset(quiet)
			switch m := r.m.(type) {
			case *protocol.Started:
				logs.flush()
				n.setState(job.ID, store.Running)
				quiet = runningSilence
				silence.Reset(quiet)
			case *protocol.Log:
				logs.add(m.Stream, m.Line, time.UnixMilli(m.At))
				if m.Stream == "stderr" {
					stderr = append(stderr, m.Line)
					if len(stderr) > 2000 {
						stderr = stderr[len(stderr)-1000:]
					}
				}
			case *protocol.Telemetry:
				t := &store.Telemetry{
					At: time.Now(), ElapsedMs: m.ElapsedMs, GPU: m.GPU, TempC: m.TempC, VRAMUsedMiB: m.VRAMUsedMiB,
					VRAMTotalMiB: m.VRAMTotalMiB, FanPercent: m.FanPercent, UtilPercent: m.UtilPercent, Simulated: m.Simulated,
				}
				run.mu.Lock()
				run.telemetry = t
				run.mu.Unlock()
				n.publish(job.ID, api.Event{At: t.At, Kind: api.EventTelemetry, Telemetry: telemetryView(t)})
			case *protocol.Finished:
				logs.flush()
				run.mu.Lock()
				last := run.telemetry
				run.mu.Unlock()
				return n.finished(ctx, job, m, stderr, last)
			}
		}
	}
}

// providerLost handles an attempt whose stream broke before the provider
// said how it ended. The coordinator voids the attempt's hold once the
// provider's heartbeats have stopped, or settles it if the provider's end
// notice arrives; until one of those, the buyer keeps asking, so that a
// provider still at work is never run twice. A voided attempt is matched
// again (true); a settled one has ended (the result did not arrive).
func (n *Node) providerLost(job store.Job, run *buyerRun, cause error) (rematch bool) {
	n.log.Warn("job stream lost", "job", job.ID, "run", job.Run, "err", cause)
	var set *protocol.Settlement
	deadline := time.Now().Add(2*coordinator.DefaultProviderLost + 10*time.Second)
	for n.ctx.Err() == nil && time.Now().Before(deadline) {
		s, err := n.coord.Send(n.ctx, &protocol.AbortNotice{JobID: job.Run, Reason: "the job stream broke"})
		if err == nil && s.State != protocol.HoldHeld {
			set = s
			break
		}
		select {
		case <-n.ctx.Done():
		case <-time.After(time.Second):
		}
	}
	if n.ctx.Err() != nil {
		return false // recovered on restart
	}
	run.mu.Lock()
	cancelled := run.cancelled
	run.mu.Unlock()
	switch {
	case cancelled:
		n.finish(job.ID, store.Cancelled, set, nil)
	case set != nil && set.State == protocol.HoldReleased:
		return true
	case set != nil:
		n.finish(job.ID, store.Failed, set, func(j *store.Job) {
			j.Explanation = "The provider finished the job, but the connection broke before its result arrived."
		})
	default:
		n.finish(job.ID, store.Failed, nil, func(j *store.Job) {
			j.Explanation = "The provider running your job stopped answering, and the coordinator had not yet settled it; gaas job show asks it again."
		})
	}
	return false
}

// finished records how the provider says the attempt ended. It reports
// true when the provider could not run it and the job should be matched
// again.
func (n *Node) finished(ctx context.Context, job store.Job, m *protocol.Finished, stderr []string, last *store.Telemetry) (rematch bool) {
	// The meter stops now, even if the provider is slow to tell the
	// coordinator itself.
	n.coord.Send(n.ctx, &protocol.ReceiptNotice{JobID: job.Run})
	switch m.Outcome {
	case protocol.OutcomeCompleted:
		// The run is paid for: a cancel arriving now must not stop the download.
		model, err := n.fetchModel(n.ctx, m)
		set := n.awaitSettlement(job.Run)
		if err != nil {
			n.finish(job.ID, store.Failed, set, func(j *store.Job) {
				j.Telemetry = last
				j.Explanation = "The job finished, but its model could not be fetched from the provider: " + err.Error()
			})
			return
		}
		n.finish(job.ID, store.Completed, set, func(j *store.Job) { j.Model, j.Telemetry = model, last })
	case protocol.OutcomeCancelled:
		n.finish(job.ID, store.Cancelled, n.awaitSettlement(job.Run), func(j *store.Job) { j.Telemetry = last })
	case protocol.OutcomeFailed:
		var set *protocol.Settlement
		if m.Cause == protocol.CausePackages { // failed before the meter started
			set, _ = n.coord.Send(context.Background(), &protocol.AbortNotice{JobID: job.Run, Reason: m.Reason})
		} else {
			set = n.awaitSettlement(job.Run)
		}
		n.finish(job.ID, store.Failed, set, func(j *store.Job) {
			j.Telemetry, j.ExitCode = last, m.ExitCode
			j.Explanation = explain.Sentence(explain.Failure{Cause: m.Cause, Reason: m.Reason, Stderr: stderr, Header: job.Dataset.Header, CapSeconds: job.CapSeconds})
			j.Traceback = explain.Traceback(stderr)
		})
	default:
		// The provider, its sandbox or the network failed: void the
		// attempt (nobody pays) and match the job again, unless the buyer
		// cancelled it meanwhile.
		set, err := n.coord.Send(context.Background(), &protocol.AbortNotice{JobID: job.Run, Reason: m.Reason})
		if err != nil {
			set = n.awaitSettlement(job.Run)
		}
		if set != nil && set.State == protocol.HoldReleased && ctx.Err() == nil {
			n.log.Warn("provider could not run the job", "job", job.ID, "reason", m.Reason)
			return true
		}
		n.finish(job.ID, store.Failed, set, func(j *store.Job) {
			j.Telemetry = last
			j.Explanation = fmt.Sprintf("The provider could not run the job (%s). Retry the job to run it on another GPU.", m.Reason)
		})
	}
	return false
}

func (n *Node) fetchModel(ctx context.Context, m *protocol.Finished) (*store.Model, error) {
	c, err := cid.Decode(m.Model)
	if err != nil {
		return nil, fmt.Errorf("the provider sent an invalid model CID %q", m.Model)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if err := n.blocks.Fetch(ctx, c); err != nil {
		return nil, err
	}
	nd, err := n.blocks.Node(ctx, c)
	if err != nil {
		return nil, err
	}
	defer nd.Close()
	size, _ := nd.Size()
	_, isDir := nd.(files.Directory)
	model := &store.Model{CID: c.String(), Name: m.ModelName, Size: size, Dir: isDir}
	if model.Name == "" {
		model.Name = "model"
	}
	return model, nil
}

// awaitSettlement asks the coordinator how the job's hold was resolved,
// waiting briefly for the provider's end notice to land.
func (n *Node) awaitSettlement(job string) *protocol.Settlement {
	deadline := time.Now().Add(10 * time.Second)
	for {
		set, err := n.coord.Settlement(n.ctx, job)
		if err == nil && set.State != protocol.HoldHeld {
			return set
		}
		if time.Now().After(deadline) || n.ctx.Err() != nil {
			if err != nil {
				n.log.Warn("settlement unknown", "job", job, "err", err)
			}
			return set
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// finish moves a job to a final state with its settlement.
func (n *Node) finish(id, state string, set *protocol.Settlement, change func(*store.Job)) {
	_, ev, err := n.store.UpdateJob(id, func(j *store.Job) error {
		if change != nil {
			change(j)
		}
		if set != nil && set.State != protocol.HoldHeld {
			j.Settled, j.Charged, j.Seconds, j.SettleReason = true, set.Charged, set.Seconds, set.Reason
		}
		j.Waiting = ""
		j.SetState(state, time.Now())
		return nil
	})
	if err != nil {
		n.log.Error("recording the end of a job", "job", id, "err", err)
		return
	}
	n.log.Info("job ended", "job", id, "state", state)
	if ev != nil {
		n.publish(id, eventView(*ev))
	}
}

func (n *Node) setState(id, state string) {
	_, ev, err := n.store.UpdateJob(id, func(j *store.Job) error {
		j.SetState(state, time.Now())
		return nil
	})
	if err == nil && ev != nil {
		n.publish(id, eventView(*ev))
	}
}

// notice logs a line from GaaS itself in the job's event log.
func (n *Node) notice(id, line string) {
	if ev, err := n.store.AppendLog(id, store.Event{Stream: streamNotice, Line: line}); err == nil {
		n.publish(id, eventView(ev))
	}
}

// CancelJob stops a job. A queued job is released in full; a running one
// is charged for the seconds it ran, and its provider stops at once.
func (n *Node) CancelJob(ctx context.Context, id string) (api.Job, error) {
	job, err := n.job(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	if store.Terminal(job.State) {
		return api.Job{}, api.Errorf(http.StatusConflict, api.CodeConflict, "Job %s has already ended (%s); there is nothing to cancel.", id, job.State)
	}
	n.mu.Lock()
	run := n.runs[id]
	n.mu.Unlock()
	if run == nil {
		return api.Job{}, api.Errorf(http.StatusConflict, api.CodeConflict, "Job %s is not being followed by this node.", id)
	}
	run.mu.Lock()
	run.cancelled = true
	conn, runID := run.conn, run.runID
	run.mu.Unlock()
	// The coordinator stops the meter first, so the bill ends at the
	// buyer's cancel, not when the provider gets round to it.
	if _, err := n.coord.Send(ctx, &protocol.CancelNotice{JobID: runID}); err != nil {
		return api.Job{}, coordinatorError(err)
	}
	if conn == nil {
		run.cancel()
	} else if err := conn.Send(&protocol.Cancel{JobID: runID}); err != nil {
		run.cancel()
	} else {
		// A provider that does not answer is cut off, after long enough for
		// its end notice to reach the coordinator.
		time.AfterFunc(30*time.Second, run.cancel)
	}
	j, _ := n.job(ctx, id)
	return n.view(j), nil
}

// Job returns one job. A finished job whose settlement was not known
// yet asks the coordinator again.
func (n *Node) Job(ctx context.Context, id string) (api.Job, error) {
	j, err := n.job(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	if store.Terminal(j.State) && !j.Settled && j.Run != "" {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		set, err := n.coord.Settlement(qctx, j.Run)
		cancel()
		if err == nil && set.State != protocol.HoldHeld {
			if updated, _, err := n.store.UpdateJob(id, func(j *store.Job) error {
				j.Settled, j.Charged, j.Seconds, j.SettleReason = true, set.Charged, set.Seconds, set.Reason
				return nil
			}); err == nil {
				j = updated
			}
		}
	}
	return n.view(j), nil
}

// Jobs lists jobs, newest first.
func (n *Node) Jobs(ctx context.Context, offset, limit int) (api.JobList, error) {
	jobs, total, err := n.store.Jobs(api.AccountFrom(ctx), offset, limit)
	if err != nil {
		return api.JobList{}, err
	}
	out := api.JobList{Total: total, Jobs: make([]api.Job, 0, len(jobs))}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, n.view(j))
	}
	return out, nil
}

func telemetryView(t *store.Telemetry) *api.Telemetry {
	if t == nil {
		return nil
	}
	v := api.Telemetry(*t)
	return &v
}

// view is a job as the API shows it, with live telemetry merged in.
func (n *Node) view(j store.Job) api.Job {
	v := api.Job{
		ID: j.ID, Tier: j.Tier, State: j.State, Rate: j.Rate, RateDisplay: money.FormatRate(j.Rate),
		CapSeconds: j.CapSeconds, MaxCharge: j.MaxCharge, Packages: j.Packages, CreatedAt: j.CreatedAt,
		Dataset: api.Input(j.Dataset), Script: api.Input(j.Script), Waiting: j.Waiting,
		Provider: j.Provider, GPU: j.GPU, Simulated: j.Simulated, Attempts: j.Attempts, ExitCode: j.ExitCode,
		Match:       (*api.MatchTiming)(j.Match),
		Explanation: j.Explanation, Traceback: j.Traceback, Settled: j.Settled, Charged: j.Charged,
		Seconds: j.Seconds, SettleReason: j.SettleReason, Telemetry: telemetryView(j.Telemetry), FailedRunsCharged: j.FailedRunsCharged,
	}
	for _, t := range j.History {
		v.History = append(v.History, api.Transition(t))
	}
	if j.Model != nil {
		m := api.Model(*j.Model)
		v.Model = &m
	}
	if started := j.StateAt(store.Running); !started.IsZero() {
		end := time.Now()
		if store.Terminal(j.State) {
			end = j.History[len(j.History)-1].At
		}
		v.ElapsedMs = end.Sub(started).Milliseconds()
	}
	n.mu.Lock()
	if run := n.runs[j.ID]; run != nil {
		run.mu.Lock()
		if run.telemetry != nil {
			v.Telemetry = telemetryView(run.telemetry)
		}
		run.mu.Unlock()
	}
	n.mu.Unlock()
	switch {
	case j.Settled && j.Charged == 0:
		v.ChargeNote = "Not charged"
	case j.Settled:
		v.ChargeNote = fmt.Sprintf("Charged %s for %s", money.Format(j.Charged), time.Duration(j.Seconds)*time.Second)
	case store.Terminal(j.State):
		v.ChargeNote = "Settlement pending at the coordinator"
	}
	return v
}

// recoverJobs ends jobs a previous run of this node left unfinished: the
// node no longer follows them, so their holds are voided.
func (n *Node) recoverJobs() {
	jobs, _, err := n.store.Jobs("*", 0, 1<<30)
	if err != nil {
		n.log.Error("listing jobs to recover", "err", err)
		return
	}
	for _, j := range jobs {
		if store.Terminal(j.State) {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		set, err := n.coord.Send(ctx, &protocol.AbortNotice{JobID: j.Run, Reason: "the buyer's node restarted"})
		cancel()
		if err != nil {
			n.log.Warn("voiding an abandoned job", "job", j.ID, "err", err)
		}
		n.finish(j.ID, store.Failed, set, func(j *store.Job) {
			j.Explanation = "This node stopped while the job was in progress, so the job was abandoned. Retry it to run it again."
		})
	}
}

// logBatch gathers output lines and stores them in one transaction, so a
// chatty script costs one disk sync per batch rather than per line.
type logBatch struct {
	n       *Node
	job     string
	pending []store.Event
}

func newLogBatch(n *Node, job string) *logBatch { return &logBatch{n: n, job: job} }

func (b *logBatch) add(stream, line string, at time.Time) {
	if stream != "stdout" && stream != "stderr" {
		stream = "stdout"
	}
	b.pending = append(b.pending, store.Event{Stream: stream, Line: line, At: at})
	if len(b.pending) >= 500 {
		b.flush()
	}
}

func (b *logBatch) flush() {
	if len(b.pending) == 0 {
		return
	}
	evs, err := b.n.store.AppendLogs(b.job, b.pending)
	b.pending = b.pending[:0]
	if err != nil {
		b.n.log.Error("storing job output", "job", b.job, "err", err)
		return
	}
	for _, e := range evs {
		b.n.publish(b.job, eventView(e))
	}
}
