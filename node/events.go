package node

import (
	"context"
	"errors"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/store"
)

// subscribe registers a live listener for a job's events. A listener
// that falls behind is closed rather than blocking the job; Events then
// catches up from the store, so nothing is lost.
func (n *Node) subscribe(id string) (chan api.Event, func()) {
	ch := make(chan api.Event, 256)
	n.mu.Lock()
	if n.subs[id] == nil {
		n.subs[id] = map[chan api.Event]struct{}{}
	}
	n.subs[id][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if _, ok := n.subs[id][ch]; ok {
			delete(n.subs[id], ch)
			close(ch)
		}
		if len(n.subs[id]) == 0 {
			delete(n.subs, id)
		}
	}
}

func (n *Node) publish(id string, ev api.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs[id] {
		select {
		case ch <- ev:
		default:
			delete(n.subs[id], ch)
			close(ch)
		}
	}
}

func eventView(e store.Event) api.Event {
	kind := e.Kind
	if kind == store.EventLog && e.Stream == streamNotice {
		kind = api.EventNotice
	}
	return api.Event{Seq: e.Seq, At: e.At, Kind: kind, State: e.State, Stream: e.Stream, Line: e.Line}
}

// Events streams a job's logged events after `after`, then live ones,
// until the job ends or ctx does.
func (n *Node) Events(ctx context.Context, id string, after uint64) (<-chan api.Event, error) {
	if _, err := n.job(ctx, id); err != nil {
		return nil, err
	}
	out := make(chan api.Event, 16)
	go func() {
		defer close(out)
		last := after
		send := func(ev api.Event) (done bool) {
			if ev.Seq != 0 {
				if ev.Seq <= last {
					return false
				}
				last = ev.Seq
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return true
			}
			return ev.Kind == api.EventState && api.Final(ev.State)
		}
		// Subscribe before reading the store, so nothing falls between the
		// two; a listener that fell behind starts over from the store.
		for {
			sub, unsub := n.subscribe(id)
			done, behind := n.replay(ctx, id, &last, sub, send)
			unsub()
			if done || !behind {
				return
			}
		}
	}()
	return out, nil
}

// replay sends the stored events after *last, then live ones from sub.
// done: the job ended or the caller left; behind: sub was dropped.
func (n *Node) replay(ctx context.Context, id string, last *uint64, sub <-chan api.Event, send func(api.Event) bool) (done, behind bool) {
	stored, err := n.store.Events(id, *last)
	if err != nil {
		return true, false
	}
	for _, e := range stored {
		if send(eventView(e)) {
			return true, false
		}
	}
	for {
		select {
		case ev, ok := <-sub:
			if !ok {
				return false, true
			}
			if send(ev) {
				return true, false
			}
		case <-ctx.Done():
			return true, false
		case <-n.ctx.Done():
			return true, false
		}
	}
}

// Logs returns a job's logged events.
func (n *Node) Logs(ctx context.Context, id string) ([]api.Event, error) {
	if _, err := n.job(ctx, id); err != nil {
		return nil, err
	}
	evs, err := n.store.Events(id, 0)
	out := make([]api.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, eventView(e))
	}
	return out, err
}

// job returns a job of the caller's account: another account's job is
// as good as missing.
func (n *Node) job(ctx context.Context, id string) (store.Job, error) {
	j, err := n.store.Job(id)
	if errors.Is(err, store.ErrNotFound) || err == nil && j.Account != api.AccountFrom(ctx) {
		return store.Job{}, api.NotFound(id)
	}
	return j, err
}
