package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/store"
)

// ownerTokenID names the token kept in the data folder's api.token.
const ownerTokenID = "owner"

// tokens are the API tokens: hashes in the store, cached in memory, with
// when each was last used.
type tokens struct {
	mu       sync.Mutex
	byHash   map[string]store.Token
	lastUsed map[string]time.Time
}

func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// loadTokens caches the stored tokens and makes sure the owner token from
// the data folder is one of them.
func (n *Node) loadTokens() error {
	n.tokens = &tokens{byHash: map[string]store.Token{}, lastUsed: map[string]time.Time{}}
	owner := store.Token{ID: ownerTokenID, Name: "owner (" + filepath.Join(n.cfg.DataDir, TokenFile) + ")", Hash: hashToken(n.token), CreatedAt: time.Now()}
	all, err := n.store.Tokens()
	if err != nil {
		return err
	}
	found := false
	for _, t := range all {
		if t.ID == ownerTokenID {
			found = t.Hash == owner.Hash
			if !found {
				continue // the file was replaced: its new token takes over
			}
		}
		n.tokens.byHash[t.Hash] = t
	}
	if !found {
		if err := n.store.PutToken(owner); err != nil {
			return err
		}
		n.tokens.byHash[owner.Hash] = owner
	}
	return nil
}

// Authenticate reports whether secret is a live token.
func (n *Node) Authenticate(secret string) bool {
	h := hashToken(secret)
	n.tokens.mu.Lock()
	defer n.tokens.mu.Unlock()
	for hash, t := range n.tokens.byHash {
		if subtle.ConstantTimeCompare([]byte(hash), []byte(h)) == 1 {
			n.tokens.lastUsed[t.ID] = time.Now()
			return true
		}
	}
	return false
}

// Tokens lists the API tokens.
func (n *Node) Tokens(ctx context.Context) ([]api.Token, error) {
	n.tokens.mu.Lock()
	defer n.tokens.mu.Unlock()
	out := make([]api.Token, 0, len(n.tokens.byHash))
	for _, t := range n.tokens.byHash {
		out = append(out, api.Token{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, LastUsed: n.tokens.lastUsed[t.ID]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// CreateToken makes a named token for a phone or a script.
func (n *Node) CreateToken(ctx context.Context, name string) (api.NewToken, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 64 {
		return api.NewToken{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "Give the token a name of 1 to 64 characters, such as phone.")
	}
	b := make([]byte, 24)
	rand.Read(b)
	secret := hex.EncodeToString(b)
	id := make([]byte, 4)
	rand.Read(id)
	t := store.Token{ID: "t-" + hex.EncodeToString(id), Name: name, Hash: hashToken(secret), CreatedAt: time.Now()}
	if err := n.store.PutToken(t); err != nil {
		return api.NewToken{}, err
	}
	n.tokens.mu.Lock()
	n.tokens.byHash[t.Hash] = t
	n.tokens.mu.Unlock()
	return api.NewToken{Token: api.Token{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt}, Secret: secret}, nil
}

// RevokeToken deletes a token; it stops working at once.
func (n *Node) RevokeToken(ctx context.Context, id string) error {
	if id == ownerTokenID {
		return api.Errorf(http.StatusConflict, api.CodeConflict, "The owner token cannot be revoked here: delete %s and restart the node to replace it.", filepath.Join(n.cfg.DataDir, TokenFile))
	}
	if err := n.store.DeleteToken(id); errors.Is(err, store.ErrNotFound) {
		return api.Errorf(http.StatusNotFound, api.CodeNotFound, "There is no token %q.", id)
	} else if err != nil {
		return err
	}
	n.tokens.mu.Lock()
	defer n.tokens.mu.Unlock()
	for h, t := range n.tokens.byHash {
		if t.ID == id {
			delete(n.tokens.byHash, h)
		}
	}
	return nil
}
