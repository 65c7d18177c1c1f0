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
	"regexp"
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

// Authenticate says whose token secret is: "" for the owner, or an
// account's name.
func (n *Node) Authenticate(secret string) (string, bool) {
	h := hashToken(secret)
	n.tokens.mu.Lock()
	defer n.tokens.mu.Unlock()
	for hash, t := range n.tokens.byHash {
		if subtle.ConstantTimeCompare([]byte(hash), []byte(h)) == 1 {
			n.tokens.lastUsed[t.ID] = time.Now()
			return t.Account, true
		}
	}
	return "", false
}

// Tokens lists the caller's account's API tokens.
func (n *Node) Tokens(ctx context.Context) ([]api.Token, error) {
	account := api.AccountFrom(ctx)
	n.tokens.mu.Lock()
	defer n.tokens.mu.Unlock()
	out := make([]api.Token, 0, len(n.tokens.byHash))
	for _, t := range n.tokens.byHash {
		if t.Account == account {
			out = append(out, api.Token{ID: t.ID, Name: t.Name, Account: t.Account, CreatedAt: t.CreatedAt, LastUsed: n.tokens.lastUsed[t.ID]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// CreateToken makes a named token of the caller's account, for a phone or
// a script.
func (n *Node) CreateToken(ctx context.Context, name string) (api.NewToken, error) {
	return n.newToken(api.AccountFrom(ctx), name)
}

func (n *Node) newToken(account, name string) (api.NewToken, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 64 {
		return api.NewToken{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "Give the token a name of 1 to 64 characters, such as phone.")
	}
	b := make([]byte, 24)
	rand.Read(b)
	secret := hex.EncodeToString(b)
	id := make([]byte, 4)
	rand.Read(id)
	t := store.Token{ID: "t-" + hex.EncodeToString(id), Name: name, Account: account, Hash: hashToken(secret), CreatedAt: time.Now()}
	if err := n.store.PutToken(t); err != nil {
		return api.NewToken{}, err
	}
	n.tokens.mu.Lock()
	n.tokens.byHash[t.Hash] = t
	n.tokens.mu.Unlock()
	return api.NewToken{Token: api.Token{ID: t.ID, Name: t.Name, Account: account, CreatedAt: t.CreatedAt}, Secret: secret}, nil
}

// RevokeToken deletes one of the caller's account's tokens; it stops
// working at once.
func (n *Node) RevokeToken(ctx context.Context, id string) error {
	if id == ownerTokenID {
		return api.Errorf(http.StatusConflict, api.CodeConflict, "The owner token cannot be revoked here: delete %s and restart the node to replace it.", filepath.Join(n.cfg.DataDir, TokenFile))
	}
	n.tokens.mu.Lock()
	mine := false
	for _, t := range n.tokens.byHash {
		mine = mine || t.ID == id && t.Account == api.AccountFrom(ctx)
	}
	n.tokens.mu.Unlock()
	if !mine {
		return api.Errorf(http.StatusNotFound, api.CodeNotFound, "There is no token %q.", id)
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

// accountName is what an account may be called: it becomes part of the
// coordinator's sub-account name.
var accountName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// ownerOnly refuses a call made with an account's token.
func ownerOnly(ctx context.Context) error {
	if api.AccountFrom(ctx) != "" {
		return api.Errorf(http.StatusForbidden, api.CodeForbidden, "Only the node's owner may do that.")
	}
	return nil
}

// Accounts lists the node's accounts.
func (n *Node) Accounts(ctx context.Context) ([]api.Account, error) {
	if err := ownerOnly(ctx); err != nil {
		return nil, err
	}
	all, err := n.store.Accounts()
	out := make([]api.Account, 0, len(all))
	for _, a := range all {
		out = append(out, api.Account(a))
	}
	return out, err
}

// CreateAccount makes an account and its first token. Its money is a
// sub-account at the coordinator; the operator tops it up.
func (n *Node) CreateAccount(ctx context.Context, name string) (api.NewToken, error) {
	if err := ownerOnly(ctx); err != nil {
		return api.NewToken{}, err
	}
	if !accountName.MatchString(name) {
		return api.NewToken{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "%q is not an account name: use lowercase letters, digits, - and _ (up to 32).", name)
	}
	if err := n.store.CreateAccount(store.Account{Name: name, CreatedAt: time.Now()}); err != nil {
		return api.NewToken{}, api.Errorf(http.StatusConflict, api.CodeConflict, "%v.", err)
	}
	return n.newToken(name, "first token")
}
